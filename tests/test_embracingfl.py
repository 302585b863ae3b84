"""EmbracingFL: pinned to FedAvg, to ordinary frozen-input training, to hand-counted FLOPs and bytes, and
to the SVCCA ordering of the paper's Fig. 1."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedsim.algorithms.embracingfl import block_keys, multi_step_forward_train, type_memory
from fedsim.cli import main
from fedsim.learn.data import load_dataset
from fedsim.learn.models import build_model, split_model
from fedsim.learn.partition import partition
from fedsim.learn.sgd import SGDConfig, local_sgd
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping
from fedsim.sim.trace import load_trace

HIDDEN, WIDTH = 24, 0.25          # femnist_cnn at width 1/4: conv 8 and 16 channels, dense 24/4 = 6 units
H = 6


def _scenario(tiny, **alg):
    sc = copy.deepcopy(tiny)
    sc["model"] = {"name": "femnist_cnn", "hidden": HIDDEN, "width": WIDTH}
    sc["train"] = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "batch_size": 16, "local_steps": 3}
    sc["data"]["partition"] = {"method": "dirichlet", "alpha": 0.3, "min_size": 20}
    sc["algorithm"] = {"name": "embracingfl", "clients_per_round": 4, **alg}
    return sc


def _final(run_dir):
    return torch.load(run_dir / "final_model.pt", weights_only=True)


def test_femnist_cnn_has_the_papers_parameter_counts():
    """Table 1: 6,603,710 parameters in all, 127,038 in the weak client's trainable output layer."""
    m = build_model("femnist_cnn", (1, 28, 28), 62)
    assert sum(p.numel() for p in m.parameters()) == 6_603_710
    _, weak = split_model(m, 3)
    _, moderate = split_model(m, 2)
    assert sum(p.numel() for p in weak.parameters()) == 127_038
    assert sum(p.numel() for p in moderate.parameters()) == 6_551_614


def test_all_strong_equals_fedavg_bit_for_bit(tiny, tmp_path):
    emb = _scenario(tiny, weak_fraction=0.0)
    fed = copy.deepcopy(emb)
    fed["algorithm"] = {"name": "fedavg", "clients_per_round": 4}
    run_scenario(scenario_from_mapping(emb), tmp_path / "e", progress=False)
    run_scenario(scenario_from_mapping(fed), tmp_path / "f", progress=False)
    a, b = _final(tmp_path / "e"), _final(tmp_path / "f")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ma, mb = pd.read_csv(tmp_path / "e" / "metrics.csv"), pd.read_csv(tmp_path / "f" / "metrics.csv")
    assert ma[["t", "version", "accuracy", "loss"]].equals(mb[["t", "version", "accuracy", "loss"]])


def _digits_model(seed=0):
    data = load_dataset("digits", rng=np.random.default_rng(0))
    model = build_model("femnist_cnn", tuple(data.train.input_shape), 10, hidden=HIDDEN, width=WIDTH,
                        seed_generator=torch.Generator().manual_seed(seed))
    return data, model


@pytest.mark.parametrize("frozen", [2, 3])
def test_multi_step_forward_equals_frozen_input_training(frozen):
    """Cached-activation training of blocks[k:] == ordinary SGD on the whole model with blocks[:k] frozen,
    and the frozen blocks are bit-identical before and after the round."""
    data, model = _digits_model()
    twin = copy.deepcopy(model)
    idx = np.arange(40, 140)
    sgd = SGDConfig(lr=0.1, momentum=0.9, weight_decay=1e-3, batch_size=16, local_steps=12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    res = multi_step_forward_train(model, frozen, data.train.x, data.train.y, idx, sgd, torch.Generator().manual_seed(5))
    train_params = [p for b in twin.blocks[frozen:] for p in b.parameters()]
    ref = local_sgd(twin, data.train.x, data.train.y, idx, sgd, torch.Generator().manual_seed(5), params=train_params)
    assert res.stats.steps == ref.steps == 12 and res.stats.samples == ref.samples
    after, want = model.state_dict(), twin.state_dict()
    for k in block_keys(model, 0, frozen):
        assert torch.equal(after[k], before[k]), k              # the input side never moves
    moved = 0.0
    for k in block_keys(model, frozen):
        torch.testing.assert_close(after[k], want[k], rtol=1e-5, atol=1e-6)
        moved += float((after[k] - before[k]).abs().sum())
    assert moved > 0


def _hand_flops(n_local: int, samples: int) -> float:
    """FLOPs of a weak client (3 frozen blocks) on digits 1x8x8, counted by hand (2 x MACs, no bias)."""
    c1, c2, h, k = 8, 16, H, 10
    conv1 = 2 * 1 * c1 * 25 * 8 * 8            # 5x5 'same' conv on 8x8
    conv2 = 2 * c1 * c2 * 25 * 4 * 4           # after one 2x2 pool
    dense = 2 * (c2 * 2 * 2) * h               # flatten of 16 x 2 x 2
    out_fwd = 2 * h * k
    out_bwd = 2 * h * k                        # weight gradient only: the cache needs no input gradient
    return n_local * (conv1 + conv2 + dense) + samples * (out_fwd + out_bwd)


def test_weak_client_time_and_memory_are_frozen_forward_plus_output_training(tiny, tmp_path):
    sc = _scenario(tiny, weak_fraction=1.0)
    sc["devices"] = {"mix": [{"profile": "jetson-nano", "flops_per_s": 1.0e8}], "jitter": 0.0}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    trace = load_trace(tmp_path / "trace.jsonl")
    parts = pd.read_csv(tmp_path / "partition.csv")
    comp = trace[(trace["kind"] == "compute")]
    assert len(comp) >= 4
    for _, ev in comp.iterrows():
        n = int(parts.loc[parts["client"] == ev["client"], "samples"].iloc[0])
        samples = 3 * 16 if n >= 48 else None
        assert samples is not None
        want = _hand_flops(n, samples)
        assert ev["flops"] == pytest.approx(want, rel=1e-12)
        assert ev["end"] - ev["start"] == pytest.approx(want / 1.0e8, rel=1e-9)
    # memory: the larger of the output-side training and the frozen forward, by hand
    types = trace[trace["kind"] == "client_types"].iloc[0]
    h, k, b = H, 10, 16
    out_params = (h * k + k) * 4
    training = 3 * out_params + b * h * 4                   # weights + grads + momentum + saved input of the Linear
    prefix_bytes = (1 * 8 * 25 + 8 + 8 * 16 * 25 + 16 + 64 * h + h) * 4
    forward = prefix_bytes + b * 64 * 4 + b * h * 4         # frozen weights + one batch in + its cut activation
    assert types["memory_bytes"]["weak"] == max(training, forward)
    data, model = _digits_model()
    assert types["memory_bytes"]["weak"] == type_memory(model, 3, (1, 8, 8), 16).memory_bytes
    assert types["memory_bytes"]["weak"] < types["memory_bytes"]["strong"]
    # uploads carry only the trained output layer
    up = trace[trace["kind"] == "upload"]
    assert set(up["bytes"].astype(int)) == {out_params}


def test_server_averages_y_over_strong_and_z_over_everyone(tiny, tmp_path):
    """One round of 2 strong + 2 weak: y equals the mean of the strong clients' y, z the mean of all z."""
    sc = _scenario(tiny, weak_fraction=0.5)
    sc["data"]["num_clients"] = 4
    sc["data"]["partition"] = {"method": "iid"}
    sc["stop"] = {"max_versions": 1}
    sc["output"] = {"figures": False, "checkpoints": 1}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    trace = load_trace(tmp_path / "trace.jsonl")
    types = trace[trace["kind"] == "client_types"].iloc[0]["types"]
    assert sorted(types) == ["strong", "strong", "weak", "weak"]
    # re-train every client by hand from the initial model with its own stream
    from fedsim.build import prepare_data
    from fedsim.sim.rng import Streams

    scen = scenario_from_mapping(sc)
    prep = prepare_data(scen)
    init = torch.load(tmp_path / "checkpoints" / "v000000.pt", weights_only=True)
    model = build_model("femnist_cnn", (1, 8, 8), 10, hidden=HIDDEN, width=WIDTH)
    streams = Streams(scen.seed)
    sgd = SGDConfig(lr=0.05, momentum=0.9, weight_decay=1e-4, batch_size=16, local_steps=3)
    results = []
    for c in range(4):
        model.load_state_dict(init)
        gen = streams.torch("client", c, "task", 0)
        if types[c] == "strong":
            local_sgd(model, prep.data.train.x, prep.data.train.y, prep.parts[c], sgd, gen)
        else:
            multi_step_forward_train(model, 3, prep.data.train.x, prep.data.train.y, prep.parts[c], sgd, gen)
        results.append({k: v.clone() for k, v in model.state_dict().items()})
    final = _final(tmp_path)
    strong = [r for r, t in zip(results, types) if t == "strong"]
    for k in block_keys(model, 0, 3):
        torch.testing.assert_close(final[k], sum(r[k] for r in strong) / 2, rtol=1e-6, atol=1e-7)
    for k in block_keys(model, 3):
        torch.testing.assert_close(final[k], sum(r[k] for r in results) / 4, rtol=1e-6, atol=1e-7)


def test_input_side_layers_agree_more_across_independent_clients():
    """Fig. 1: after independent non-IID training, max-pairwise SVCCA falls with depth (3 seeds)."""
    from analysis.embracingfl import depth_spearman, svcca_study

    for seed in (0, 1, 2):
        data = load_dataset("digits", rng=np.random.default_rng(seed))
        parts = partition(data.train.y.numpy(), 6, "dirichlet", np.random.default_rng(seed), alpha=0.1, min_size=20)

        def build():
            return build_model("femnist_cnn", (1, 8, 8), 10, hidden=32, width=0.5,
                               seed_generator=torch.Generator().manual_seed(seed))

        df = svcca_study(build, data.train.x, data.train.y, parts, data.test.x[:200], scheme="none", iterations=40,
                         sync_every=10, sgd=SGDConfig(lr=0.05, momentum=0.9, batch_size=32), seed=seed,
                         measure_every=100)
        last = df[df["iteration"] == 40].sort_values("depth")
        assert depth_spearman(df) < 0, last
        assert last["svcca"].iloc[0] > last["svcca"].iloc[-1]


@pytest.mark.parametrize("override, field, allowed", [
    ("algorithm.splits.weak=4", "algorithm.splits.weak", "nothing to train"),
    ("algorithm.types.jetson-nanoo=weak", "algorithm.types.jetson-nanoo", "unknown device"),
    ("algorithm.weak_fraction=1.5", "algorithm.weak_fraction", "[0, 1]"),
    ("algorithm.weak_fraction=-0.1", "algorithm.weak_fraction", "[0, 1]"),
])
def test_bad_embracingfl_input_gives_one_line(capsys, tmp_path, tiny, override, field, allowed):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(tiny)))
    code = main(["run", str(path), override, "stop.max_versions=1", "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and allowed in lines[0]


def test_device_table_assigns_types_by_device_class(tiny, tmp_path):
    sc = _scenario(tiny, assign="devices", types={"jetson-nano": "weak"})
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    trace = load_trace(tmp_path / "trace.jsonl")
    types = trace[trace["kind"] == "client_types"].iloc[0]["types"]
    energy = pd.read_csv(tmp_path / "energy.csv")
    dev = dict(zip(energy["device"].astype(int), energy["device_class"]))
    assert set(types) == {"weak", "strong"}
    for c, t in enumerate(types):
        assert (t == "weak") == (dev[c] == "jetson-nano")


def test_check_prints_partition_rows_and_theorem1(tiny, tmp_path):
    from analysis.report import check_run

    sc = _scenario(tiny, weak_fraction=0.5)
    sc["stop"] = {"max_versions": 4}
    sc["output"] = {"figures": False, "checkpoints": 2}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    table = check_run(tmp_path, figures=False, progress=False)
    q = table["quantity"].tolist()
    assert any(s.startswith("y (blocks 0..2, strong only): mean ||grad_y F||^2") for s in q)
    assert any(s.startswith("z (blocks 3.., everyone): mean ||grad_z F||^2") for s in q)
    thm = table[table["quantity"] == "[embracingfl] Theorem 1: (1/T) sum E||grad F(x_t)||^2"]
    assert len(thm) == 1 and thm["holds"].iloc[0] in (True, False)
    assert table["quantity"].str.contains("A_max").any()
    assert table["quantity"].str.contains("Lemma 2: model discrepancy y").any()
    # the partition norms add up to the whole-model ||grad F||^2 that the generic probe measured
    part = pd.read_csv(tmp_path / "embracingfl_probes.csv")
    whole = pd.read_csv(tmp_path / "probes.csv")
    merged = part.merge(whole, on="version")
    np.testing.assert_allclose(merged["grad_y_sq"] + merged["grad_z_sq"], merged["grad_norm_sq"], rtol=1e-6)
    types = load_trace(tmp_path / "trace.jsonl").query("kind == 'client_types'").iloc[0]["types"]
    meas = json.loads((tmp_path / "measured.json").read_text())
    assert meas["m"] == 4 and 0 <= meas["s"] <= 4 and types.count("strong") == 3


def test_memory_assignment_picks_the_strongest_type_that_fits(tiny, tmp_path):
    """A Jetson Nano given just the weak type's memory is weak; an AGX Orin (8x its memory) is strong."""
    from fedsim.system.devices import load_profile

    data, model = _digits_model()
    need = {t: type_memory(model, k, (1, 8, 8), 16).memory_bytes for t, k in (("strong", 0), ("moderate", 2), ("weak", 3))}
    nano, orin = load_profile("jetson-nano").memory_bytes, load_profile("jetson-agx-orin-32gb").memory_bytes
    share = (need["weak"] + 0.5) / nano        # half a byte of slack against rounding
    assert need["moderate"] > need["weak"] and orin * share >= need["strong"]   # the test's premise
    sc = _scenario(tiny, assign="memory", memory_share=share)
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    trace = load_trace(tmp_path / "trace.jsonl")
    types = trace[trace["kind"] == "client_types"].iloc[0]["types"]
    energy = pd.read_csv(tmp_path / "energy.csv")
    dev = dict(zip(energy["device"].astype(int), energy["device_class"]))
    for c, t in enumerate(types):
        assert t == ("weak" if dev[c] == "jetson-nano" else "strong"), (c, t, dev[c])


def test_resnet20_splits_train_the_papers_parameter_counts():
    """Table 1: ResNet-20's moderate client (conv1 + stage 1 frozen) trains 257,994 parameters, the weak
    client (conv1 + stages 1-2 frozen) 206,346: ``splits: {moderate: 4, weak: 7}`` on the block list."""
    m = build_model("resnet20", (3, 32, 32), 10, bn="global")
    assert [sum(p.numel() for p in split_model(m, k)[1].parameters()) for k in (4, 7)] == [257_994, 206_346]


def test_resnet20_weak_round_leaves_frozen_blocks_and_their_bn_statistics_alone():
    data = load_dataset("digits32", rng=np.random.default_rng(0))
    model = build_model("resnet20", (3, 32, 32), 10, depth=8, width=0.25, bn="global")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sgd = SGDConfig(lr=0.05, momentum=0.9, batch_size=16, local_steps=2)
    multi_step_forward_train(model, 3, data.train.x, data.train.y, np.arange(48), sgd, torch.Generator().manual_seed(1))
    after = model.state_dict()
    for k in block_keys(model, 0, 3):
        assert torch.equal(after[k], before[k]), k                    # weights and running statistics
    assert any(not torch.equal(after[k], before[k]) for k in block_keys(model, 3) if "running_mean" in k)


def test_sync_masks_select_the_papers_halves():
    """Fig. 3 schemes on a 4-block model: second half = blocks 2-3, first half = blocks 0-1, channels =
    the first ceil(d/2) output rows of every tensor."""
    from analysis.embracingfl import sync_masks

    _, model = _digits_model()
    state = model.state_dict()
    second, first, chans = (sync_masks(model, s) for s in ("second_half", "first_half", "channels"))
    for k, v in state.items():
        blk = int(k.split(".")[1])
        assert bool(second[k].all()) == (blk >= 2) and bool(second[k].any()) == (blk >= 2)
        assert bool(first[k].all()) == (blk < 2)
        half = -(-v.shape[0] // 2)
        assert chans[k][:half].eq(1).all() and chans[k][half:].eq(0).all()
