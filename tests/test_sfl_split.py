"""Split-learning plumbing against hand calculations and against plain (unsplit) SGD."""
from __future__ import annotations

import pytest
import torch

from fedsim.errors import ConfigError
from fedsim.learn.models import build_model
from fedsim.learn.split import SideOptimizer, SplitComputer, merge_state, split_costs, split_state
from fedsim.learn.sgd import SGDConfig, batch_schedule
from fedsim.build import build_global_model, prepare_data
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping
from fedsim.sim.rng import Streams


def test_gas_alexnet_costs_match_the_gas_code_constants():
    """Spec gas.md §2.2: 5,603,328 client MACs per image, 131,072 activation bits, 620,544 / 123,799,872 model bits."""
    m = build_model("alexnet_cifar", (3, 32, 32), 10)
    c = split_costs(m, (3, 32, 32), 6)
    assert c.client_forward == 2 * 5_603_328  # FLOPs = 2 x the fvcore MAC count
    assert c.activation_bytes * 8 == 131_072 and c.activation_shape == (64, 8, 8)
    assert c.client_model_bytes * 8 == 620_544
    assert (c.client_model_bytes + c.server_model_bytes) * 8 == 123_799_872


def test_mlp_costs_by_hand():
    m = build_model("mlp", (1, 8, 8), 10, hidden=(64, 32))
    c = split_costs(m, (1, 8, 8), 1)
    assert c.client_forward == 2 * 64 * 64  # Linear(64 -> 64)
    assert c.client_backward == 2 * 64 * 64  # weight gradient only: the input needs none
    assert c.server_forward == 2 * (64 * 32 + 32 * 10)
    assert c.server_backward == 2 * c.server_forward  # weight and input gradients
    assert c.activation_bytes == 64 * 4 and c.label_bytes == 8
    assert c.client_model_bytes == (64 * 64 + 64) * 4
    assert c.server_model_bytes == (64 * 32 + 32 + 32 * 10 + 10) * 4
    with pytest.raises(ConfigError, match="split.cut"):
        split_costs(m, (1, 8, 8), 3)


def test_state_halves_round_trip():
    m = build_model("cnn", (1, 8, 8), 10)
    full = m.state_dict()
    c, s = split_state(full, 2)
    assert all(k.startswith(("blocks.0.", "blocks.1.")) for k in c) and len(c) + len(s) == len(full)
    back = merge_state(c, s, list(full))
    assert list(back) == list(full) and all(torch.equal(back[k], full[k]) for k in full)


def test_chain_rule_equals_full_model_gradient():
    """GAS eq. (8): client step with the server's ∂l/∂A equals SGD on the whole model (client part)."""
    torch.manual_seed(0)
    m = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(1))
    x, y = torch.randn(12, 1, 8, 8), torch.randint(0, 10, (12,))
    comp = SplitComputer(m, 2)
    c, s = split_state(m.state_dict(), 2)
    copt, sopt = SideOptimizer(c, SGDConfig(lr=0.1)), SideOptimizer(s, SGDConfig(lr=0.1))
    a = comp.forward(copt.params, x)
    g, loss = comp.activation_grad(sopt.params, a, y)
    sgrads, sloss = comp.server_grads(sopt, a, y)
    comp.client_step(copt, x, g)
    sopt.step(sgrads)
    ref = build_model("cnn", (1, 8, 8), 10, seed_generator=torch.Generator().manual_seed(1))
    ref_loss = torch.nn.functional.cross_entropy(ref(x), y)
    grads = torch.autograd.grad(ref_loss, list(ref.parameters()))
    ref_loss = ref_loss.detach()
    assert loss == pytest.approx(ref_loss.item()) and sloss == pytest.approx(ref_loss.item())
    got = {**copt.state(), **sopt.state()}
    for (name, p), gr in zip(ref.named_parameters(), grads):
        torch.testing.assert_close(got[name], p.detach() - 0.1 * gr, rtol=1e-5, atol=1e-6)


def _scenario(algo: dict, **extra) -> dict:
    sc = {
        "name": "sfl-tiny", "seed": 5,
        "data": {"name": "digits", "num_clients": 1, "partition": {"method": "iid"}},
        "model": {"name": "mlp", "hidden": [32, 16]},
        "train": {"lr": 0.1, "batch_size": 16, "local_steps": 4},
        "devices": {"mix": [{"profile": "jetson-nano", "flops_per_s": [1e9, 1e10]}], "jitter": 0.0},
        "channel": {"uplink": {"model": "fixed", "mbps": [5.0, 50.0]}, "downlink": {"model": "fixed", "mbps": 20.0}},
        "network": {"latency_s": 0.0},
        "algorithm": algo,
        "stop": {"max_versions": 3}, "eval": {"every_versions": None}, "output": {"figures": False},
    }
    sc.update(extra)
    return sc


@pytest.mark.parametrize("algo", [
    {"name": "minibatch-sfl", "cut": 1, "clients_per_round": 1},
    {"name": "async-sfl", "cut": 2, "concurrency": 1, "logit_adjust": False},
])
def test_one_client_split_learning_is_plain_sgd(tmp_path, algo):
    """One client, no momentum: each server step and each client step use the same pre-step weights and the
    same minibatch, so split training is SGD on the whole model over the client's batch schedule."""
    sc = scenario_from_mapping(_scenario(algo))
    run_scenario(sc, tmp_path, progress=False)
    got = torch.load(tmp_path / "final_model.pt")
    prep = prepare_data(sc)
    model = build_global_model(sc, prep.data)
    streams = Streams(sc.seed)
    x, y, part = prep.data.train.x, prep.data.train.y, torch.as_tensor(prep.parts[0])
    for task in range(3):
        for pos in batch_schedule(len(part), 4, 16, streams.torch("client", 0, "task", task)):
            b = part[pos]
            loss = torch.nn.functional.cross_entropy(model(x[b]), y[b])
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p.sub_(0.1 * g)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6)


def test_bad_cut_and_options_are_config_errors(tmp_path):
    sc = scenario_from_mapping(_scenario({"name": "gas", "cut": 3}))
    with pytest.raises(ConfigError, match=r"algorithm\.cut.*1\.\.2"):
        run_scenario(sc, tmp_path, progress=False)
    assert not any(tmp_path.iterdir())  # the algorithm's own checks run before anything is written
    with pytest.raises(ConfigError, match="cost_input_shape.*systems_only"):
        run_scenario(scenario_from_mapping(_scenario({"name": "gas", "cost_input_shape": [3, 32, 32]})), tmp_path,
                     progress=False)
    with pytest.raises(ConfigError, match="timing.convention"):
        scenario_from_mapping(_scenario({"name": "s2fl", "timing": {"convention": "fast"}}))
    with pytest.raises(ConfigError, match="gaussian_covariance"):
        scenario_from_mapping(_scenario({"name": "gas", "gaussian_covariance": "lowrank"}))
