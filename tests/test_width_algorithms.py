"""HeteroFL, FjORD, FedRolex and FedAvg's only_fitting: semantics against hand computations and plain SGD,
and bad width tables through the CLI."""
from __future__ import annotations

import copy
import json

import pytest
import simpy
import torch
import yaml

from fedsim.algorithms import registry
from fedsim.algorithms.width import FedRolex, FjORD, OrderedDropoutTrainer
from fedsim.cli import main
from fedsim.output.report import submodel_table
from fedsim.learn.submodel import extract, insert, sub_state_bytes, width_submodel
from fedsim.learn.sgd import local_sgd
from fedsim.build import build_global_model, prepare_data
from fedsim.runner import run_scenario
from fedsim.context import Context
from fedsim.scenario import load_raw
from fedsim import scenario_from_mapping
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace, load_trace
from fedsim.system.world import World

NANO, ORIN = "jetson-nano", "jetson-agx-orin-32gb"


def _width_scenario(tiny: dict, algorithm: dict) -> dict:
    s = copy.deepcopy(tiny)
    s["model"] = {"name": "cnn"}
    s["train"] = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "batch_size": 16, "local_steps": 3}
    s["algorithm"] = algorithm
    return s


def _algo(mapping: dict):
    """The algorithm of ``mapping`` on its world, built as a run builds it (nothing runs)."""
    sc = scenario_from_mapping(mapping)
    prep = prepare_data(sc)
    env, streams = simpy.Environment(), Streams(sc.seed)
    trace = Trace(None)
    world = World.from_scenario(env, streams, trace, len(prep.parts), sc)
    ctx = Context(sc, env, streams, trace, world, prep.data, prep.parts, build_global_model(sc, prep.data))
    spec = sc.algorithms[0]
    return registry()[spec.name](ctx, spec.params)


def test_heterofl_width_one_equals_fedavg(tiny, tmp_path):
    """Every client at width 1.0: HeteroFL's round goes through extraction, insertion and the masked
    average, and must give FedAvg's weights exactly."""
    base = _width_scenario(tiny, {"name": "fedavg", "clients_per_round": 3})
    base["stop"] = {"max_versions": 2}
    hetero = copy.deepcopy(base)
    hetero["algorithm"] = {"name": "heterofl", "clients_per_round": 3, "widths": {NANO: 1.0, ORIN: 1.0}}
    run_scenario(scenario_from_mapping(base), tmp_path / "a", progress=False)
    run_scenario(scenario_from_mapping(hetero), tmp_path / "b", progress=False)
    wa = torch.load(tmp_path / "a" / "final_model.pt")
    wb = torch.load(tmp_path / "b" / "final_model.pt")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    sa = json.loads((tmp_path / "a" / "summary.json").read_text())
    sb = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert sa["bytes_up"] == sb["bytes_up"] and sa["bytes_down"] == sb["bytes_down"]
    assert sa["virtual_time_s"] == pytest.approx(sb["virtual_time_s"])
    disp = load_trace(tmp_path / "b" / "trace.jsonl", kinds=("dispatch",))
    assert all(s["kept"] == 1.0 for s in disp["submodel"])


def test_heterofl_half_width_trains_only_the_prefix(tiny, tmp_path):
    """Weak clients at width 0.5: entries outside every client's prefix keep their initial values; the
    masked average touches the rest; bytes shrink with the sub-model."""
    s = _width_scenario(tiny, {"name": "heterofl", "clients_per_round": 6, "widths": {NANO: 0.5, ORIN: 0.5}})
    s["stop"] = {"max_versions": 1}
    run_scenario(scenario_from_mapping(s), tmp_path / "h", progress=False)
    algo = _algo(s)
    init = algo.ctx.global_state
    final = torch.load(tmp_path / "h" / "final_model.pt")
    _, mask = insert(init, width_submodel(algo.ctx.training.worker, 0.5), extract(algo.ctx.training.worker, init, width_submodel(algo.ctx.training.worker, 0.5)).state_dict())
    for k, m in mask.items():
        outside = m == 0
        assert torch.equal(final[k][outside], init[k][outside]), k
        assert not torch.equal(final[k][~outside], init[k][~outside]), k
    summary = json.loads((tmp_path / "h" / "summary.json").read_text())
    half = sub_state_bytes(algo.ctx.training.worker, width_submodel(algo.ctx.training.worker, 0.5))
    full = sum(v.numel() * v.element_size() for v in init.values())
    assert summary["bytes_down"] == summary["bytes_up"] == 6 * half and half < 0.3 * full
    agg = load_trace(tmp_path / "h" / "trace.jsonl", kinds=("aggregate",))
    assert agg["coverage_min"].iloc[0] == 0 and agg["coverage_mean"].iloc[0] < 6


def test_fedrolex_window_after_r_rounds_by_hand(tiny):
    """cnn groups conv1 (16 units), conv2 (32), fc (64); width 0.25 keeps 4, 8, 16 units starting at unit
    r - 1 (mod n) in round r."""
    algo = _algo(_width_scenario(tiny, {"name": "fedrolex", "widths": {NANO: 0.25, ORIN: 1.0}}))
    assert isinstance(algo, FedRolex)
    weak = next(c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == NANO)
    strong = next(c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == ORIN)
    hand = {
        1: {"conv1": (0, 1, 2, 3), "conv2": tuple(range(0, 8)), "fc": tuple(range(0, 16))},
        3: {"conv1": (2, 3, 4, 5), "conv2": tuple(range(2, 10)), "fc": tuple(range(2, 18))},
        15: {"conv1": (14, 15, 0, 1), "conv2": tuple(range(14, 22)), "fc": tuple(range(14, 30))},
        17: {"conv1": (0, 1, 2, 3), "conv2": tuple(range(16, 24)), "fc": tuple(range(16, 32))},
        30: {"conv1": (13, 14, 15, 0), "conv2": (29, 30, 31, 0, 1, 2, 3, 4), "fc": tuple(range(29, 45))},
        60: {"conv1": (11, 12, 13, 14), "conv2": (27, 28, 29, 30, 31, 0, 1, 2),
             "fc": (59, 60, 61, 62, 63, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)},
    }
    for r, keep in hand.items():
        sub = algo.assign(weak, r).submodel
        assert {g: set(idx) for g, idx in sub.keep.items()} == {g: set(idx) for g, idx in keep.items()}, r
        assert algo.assign(strong, r).submodel.keep == {}  # width 1.0: the whole model, every round


def test_heterofl_prefix_and_auto_width(tiny):
    s = _width_scenario(tiny, {"name": "heterofl", "widths": "auto", "allowed_widths": [0.25, 0.5, 1.0]})
    algo = _algo(s)
    assert algo.class_width == {NANO: 1.0, ORIN: 1.0}  # 4 GiB holds the full cnn
    # a nano with 0.9x the half-width model's memory gets width 0.25; an orin keeps 1.0
    need_half = algo.memory_at(0.5)
    s["devices"]["mix"][0]["memory_mb"] = 0.9 * need_half / 2**20
    algo = _algo(s)
    assert algo.class_width == {NANO: 0.25, ORIN: 1.0}
    assert algo.memory_at(0.25) < 0.9 * need_half < algo.memory_at(0.5) < algo.memory_at(1.0)
    weak = next(c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == NANO)
    assert dict(algo.assign(weak, 7).submodel.keep) == {"conv1": (0, 1, 2, 3), "conv2": tuple(range(8)),
                                                        "fc": tuple(range(16))}


def test_fedavg_only_fitting_samples_strong_devices(tiny, tmp_path):
    s = _width_scenario(tiny, {"name": "fedavg", "clients_per_round": 6, "only_fitting": True})
    s["devices"]["mix"][0]["memory_mb"] = 0.2
    s["stop"] = {"max_versions": 2}
    algo = _algo(s)
    strong = {c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == ORIN}
    assert {c for c in range(algo.ctx.num_clients) if algo.eligible(c)} == strong
    run_scenario(scenario_from_mapping(s), tmp_path / "f", progress=False)
    disp = load_trace(tmp_path / "f" / "trace.jsonl", kinds=("dispatch",))
    assert set(disp["client"]) == strong


def test_fjord_widths_from_allowed_set_and_deterministic(tiny):
    algo = _algo(_width_scenario(tiny, {"name": "fjord", "widths": {NANO: 0.5, ORIN: 1.0},
                                        "allowed_widths": [0.125, 0.25, 0.5, 0.75, 1.0]}))
    assert isinstance(algo, FjORD)
    weak = next(c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == NANO)
    strong = next(c for c in range(algo.ctx.num_clients) if algo.ctx.world.device_class(c) == ORIN)
    assert algo.client_widths(weak) == [0.125, 0.25, 0.5]
    assert algo.client_widths(strong) == [0.125, 0.25, 0.5, 0.75, 1.0]
    a = algo.assign(weak, 1)
    assert a.trainer is not None and a.submodel.keep["conv1"] == tuple(range(8))
    d1 = a.trainer.draw(200, torch.Generator().manual_seed(5))
    d2 = a.trainer.draw(200, torch.Generator().manual_seed(5))
    d3 = a.trainer.draw(200, torch.Generator().manual_seed(6))
    assert d1 == d2 and d1 != d3
    assert set(d1) == {0.125, 0.25, 0.5}


def test_fjord_step_trains_the_drawn_prefix_like_plain_sgd(tiny):
    """With one allowed width p below the client's w_max, FjORD's local training is plain momentum SGD of
    the extracted p-prefix (same batches, same step: bit for bit), and the rest of the w_max prefix does
    not move."""
    algo = _algo(_width_scenario(tiny, {"name": "fjord", "widths": {NANO: 0.5, ORIN: 0.5}}))
    ctx = algo.ctx
    model, state = ctx.training.worker, ctx.global_state
    top, small = width_submodel(model, 0.5), width_submodel(model, 0.25)
    trainer = OrderedDropoutTrainer([0.25], top)
    module = extract(model, state, top)
    idx = ctx.parts[0]
    out = trainer(module, ctx.training, 0, idx, torch.Generator().manual_seed(11))
    assert trainer.drawn == [0.25] * ctx.training.sgd.local_steps
    ref = extract(model, state, small)
    g = torch.Generator().manual_seed(11)
    torch.randint(1, (ctx.training.sgd.local_steps,), generator=g)  # the width draws come first
    stats = local_sgd(ref, ctx.data.train.x, ctx.data.train.y, idx, ctx.training.sgd, g)
    got, _ = insert(state, top, module.state_dict())
    want, mask_small = insert(state, small, ref.state_dict())
    _, mask_top = insert(state, top, module.state_dict())
    for k in state:
        m_small = mask_small.get(k, torch.ones_like(state[k])) == 1
        m_top = mask_top.get(k, torch.ones_like(state[k])) == 1
        assert torch.equal(got[k][m_small], want[k][m_small]), k  # the same step (sgd_step), bit for bit
        ring = m_top & ~m_small
        assert torch.equal(got[k][ring], state[k][ring]), k
    assert out.stats.samples == stats.samples
    from fedsim.learn.costs import flops_per_sample

    assert out.flops == pytest.approx(flops_per_sample(ref, ctx.training.input_shape).total * stats.samples)


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("widths, field, words", [
    ("{jetson-banana: 0.5, jetson-nano: 0.25, jetson-agx-orin-32gb: 1.0}", "algorithm.widths.jetson-banana",
     ["unknown device class", "jetson-nano"]),
    ("{jetson-nano: 1.5, jetson-agx-orin-32gb: 1.0}", "algorithm.widths.jetson-nano", ["(0, 1]", "1.5"]),
    ("{jetson-nano: 0, jetson-agx-orin-32gb: 1.0}", "algorithm.widths.jetson-nano", ["(0, 1]"]),
    ("{jetson-nano: 0.5}", "algorithm.widths", ["no width", "jetson-agx-orin-32gb"]),
])
def test_bad_width_table_one_line_exit_2(capsys, tmp_path, tiny, widths, field, words):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_width_scenario(tiny, {"name": "heterofl"})))
    code, err = _cli(capsys, "run", str(path), f"algorithm.widths={widths}", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert field in err and all(w in err for w in words), err


def test_device_too_small_for_every_width(capsys, tmp_path, tiny):
    s = _width_scenario(tiny, {"name": "fedrolex", "allowed_widths": [0.5, 0.25]})
    s["devices"]["mix"][0]["memory_mb"] = 0.01
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(s))
    code, err = _cli(capsys, "run", str(path), "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    s["devices"]["mix"][0]["memory_mb"] = None
    need = _algo(s).memory_at(0.25)  # the smallest allowed width, the closest to fitting
    assert NANO in err and "'cnn'" in err and f"({need} bytes)" in err and f"({round(0.01 * 2**20)} bytes)" in err


def test_heterofl_scenario_end_to_end_tiny(tmp_path):
    raw = load_raw("heterofl")
    assert [a["name"] for a in raw["algorithm"]] == ["fedavg", "heterofl", "fjord", "fedrolex"]
    raw["data"]["num_clients"] = 8
    raw["stop"] = {"max_versions": 1}
    raw["eval"] = {"every_versions": 1}
    raw["output"] = {"figures": True}
    summaries = run_scenario(scenario_from_mapping(raw), tmp_path, progress=False)
    assert [s["status"] for s in summaries] == ["ok"] * 4
    assert (tmp_path / "accuracy_vs_time.svg").exists()
    for label in ("heterofl", "fjord", "fedrolex"):
        assert (tmp_path / label / "submodel_heatmap.svg").exists(), label
    assert not (tmp_path / "fedavg" / "submodel_heatmap.svg").exists()
    table = submodel_table(load_trace(tmp_path / "heterofl" / "trace.jsonl", kinds=("dispatch",)))
    assert len(table) and (table.to_numpy() < 1).any() and (table.to_numpy() > 0).all()


def test_check_reports_per_entry_coverage(tiny, tmp_path):
    """One HeteroFL round, nano at width 0.5, orin at 1.0: the least-covered entries are those outside the
    half-width prefix, covered by the orin clients only; the mean is Σ over clients of their kept fraction."""
    from analysis.report import check_run

    s = _width_scenario(tiny, {"name": "heterofl", "clients_per_round": 6, "widths": {NANO: 0.5, ORIN: 1.0}})
    s["stop"] = {"max_versions": 1}
    run_scenario(scenario_from_mapping(s), tmp_path / "r", progress=False)
    algo = _algo(s)
    model = algo.ctx.training.worker
    n_orin = sum(algo.ctx.world.device_class(c) == ORIN for c in range(6))
    kept_half = sub_state_bytes(model, width_submodel(model, 0.5)) / sub_state_bytes(model, width_submodel(model, 1.0))
    table = check_run(tmp_path / "r", figures=False, progress=False).set_index("quantity")["measured"]
    assert 0 < n_orin < 6
    assert table["per-parameter coverage N_q^i: min over entries and rounds"] == n_orin
    assert table["per-parameter coverage N_q^i: mean over entries and rounds"] == pytest.approx(
        n_orin + (6 - n_orin) * kept_half, rel=1e-6)
    applies = load_trace(tmp_path / "r" / "trace.jsonl", kinds=("apply",))
    kept = sorted(s["kept"] for s in applies["submodel"])
    assert kept == pytest.approx([kept_half] * (6 - n_orin) + [1.0] * n_orin, abs=1e-4)


def test_fedavg_only_fitting_refuses_when_no_device_fits(capsys, tmp_path, tiny):
    s = _width_scenario(tiny, {"name": "fedavg", "only_fitting": True})
    for g in s["devices"]["mix"]:
        g["memory_mb"] = 0.01
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(s))
    code, err = _cli(capsys, "run", str(path), "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "algorithm.only_fitting" in err and "'cnn'" in err and f"({round(0.01 * 2**20)} bytes)" in err
