"""Co-S²P server: Eq. 4/5 on a hand-worked 3-client example, the semi-asynchronous schedule, RU (Eq. 17)
recomputed by hand from the trace, and the sync variant against FedAvg."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fedsim.messages import Update
from fedsim.algorithms.cos2p import quorum, split_rates
from fedsim.algorithms.cos2p_rules import cos2p_aggregate, segment_index
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping


def _t(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_gamma_and_eq5_on_a_hand_worked_three_client_example():
    # w_q: tensor a has two segments (rows, one neuron each), b is one segment, c nobody trains
    now = {"a": _t([1.0, 1.0], [1.0, 1.0]), "b": _t(0.0, 0.0, 0.0), "c": _t(5.0)}
    old = {"a": _t([1.0, 1.0], [0.0, 1.0]), "b": _t(0.0, 0.0, 0.0), "c": _t(5.0)}  # w_{q-1}
    groups = {"hidden": SimpleNamespace(name="hidden", size=2, unit=1, members=[("a", 0)])}
    seg = segment_index(now, groups)
    assert seg.count == 4
    row0 = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    u1 = Update(client=1, tensors={"a": _t([2.0, 0.0], [1.0, 1.0])}, mask={"a": row0}, base_version=5)
    u2 = Update(client=2, tensors={"a": _t([1.5, 1.5], [2.0, 1.0]), "b": _t(3.0, 0.0, 0.0)}, base_version=4)
    u3 = Update(client=3, tensors={"a": _t([9.0, 9.0], [0.0, 0.0]), "b": _t(0.0, 0.0, 3.0)},
                mask={"a": 1 - row0}, base_version=5)
    res = cos2p_aggregate(now, [u1, u2, u3], [now, old, now], seg)
    # By hand (Eq. 4): segment a0 (size 2): client 1 |(1,-1)|=2, drift 0 -> 1; client 2 |(0.5,0.5)|=1 -> 0.5.
    # a1: client 2 |(2,0)|=2, drift |1-0|=1 -> 2/3; client 3 |(-1,-1)|=2 -> 1.  b (size 3): 3/3 = 1 each.
    g = [gi.tolist() for gi in res.gammas]
    names = seg.names
    at = {n: i for i, n in enumerate(names)}
    a0, a1 = at["a[hidden:0]"], at["a[hidden:1]"]
    assert g[0][a0] == pytest.approx(1.0) and g[1][a0] == pytest.approx(0.5) and g[2][a0] == 0.0
    assert g[0][a1] == 0.0 and g[1][a1] == pytest.approx(2 / 3) and g[2][a1] == pytest.approx(1.0)
    assert g[1][at["b"]] == pytest.approx(1.0) and g[2][at["b"]] == pytest.approx(1.0)
    # Eq. 5: a0 = 1 + (2/3)(1,-1) + (1/3)(0.5,0.5); a1 = 1 + 0.4 (2,0) + 0.6 (-1,-1); b = 0.5 (3,0,0) + 0.5 (0,0,3)
    assert torch.allclose(res.state["a"], _t([1 + 2 / 3 + 1 / 6, 1 - 2 / 3 + 1 / 6], [1.2, 0.4]))
    assert torch.allclose(res.state["b"], _t(1.5, 0.0, 1.5))
    assert torch.equal(res.state["c"], now["c"])  # nobody covered c: unchanged
    assert res.coverage[at["a[hidden:0]"]] == 2 and res.coverage[at["c"]] == 0
    assert now["a"][0, 0] == 1.0  # inputs untouched


def test_uniform_weighting_is_the_plain_masked_mean():
    now = {"w": _t(0.0, 0.0)}
    seg = segment_index(now)
    ups = [Update(client=i, tensors={"w": _t(float(i), 2.0 * i)}) for i in (1, 2)]
    res = cos2p_aggregate(now, ups, [now, now], seg, weighting="uniform")
    assert torch.allclose(res.state["w"], _t(1.5, 3.0))
    assert res.weights == pytest.approx([0.5, 0.5])


def test_quorum_is_the_ceiling_and_rates_split_as_sqrt():
    assert quorum(0.5, 8) == 4 and quorum(0.4, 16) == 7 and quorum(1.0, 5) == 5 and quorum(0.01, 5) == 1
    assert split_rates(0.5625, 1.0) == pytest.approx((0.75, 0.75))
    rw, rd = split_rates(0.0625, 2.0)
    assert rw / rd == pytest.approx(2.0) and rw * rd == pytest.approx(0.0625)


def _world(tiny, algorithms, **over):
    sc = copy.deepcopy(tiny)
    sc["data"] = {"name": "digits", "num_clients": 5, "partition": {"method": "iid"}}
    sc["model"] = {"name": "mlp", "hidden": 16}
    sc["train"] = {"lr": 0.1, "batch_size": 16, "local_steps": 4}
    sc["algorithm"] = algorithms
    sc["stop"] = {"max_versions": 3}
    sc["eval"] = {"every_versions": 1}
    sc.update(over)
    return scenario_from_mapping(sc)


def _events(run: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (run / "trace.jsonl").read_text().splitlines()) if e["kind"] == kind]


def test_sync_full_model_without_distillation_equals_fedavg(tiny, tmp_path):
    sync = {"name": "cos2p", "label": "sync", "mu": 1.0, "t_clk": 0.0, "weighting": "samples", "rates": {},
            "rate_rule": "table7",
            "distill": False, "local_train_fraction": 1.0}
    fedavg = {"name": "fedavg", "clients_per_round": 5}
    run_scenario(_world(tiny, [sync, fedavg]), tmp_path, progress=False)
    a, b = _events(tmp_path / "sync", "apply"), _events(tmp_path / "fedavg", "apply")
    assert len(a) == len(b) == 15
    key = lambda e: (e["version"], e["client"])  # noqa: E731
    for x, y in zip(sorted(a, key=key), sorted(b, key=key)):
        assert (x["client"], x["version"], x["staleness"]) == (y["client"], y["version"], y["staleness"])
        assert x["t"] == pytest.approx(y["t"], rel=1e-12)
        assert x["weight"] == pytest.approx(y["weight"], rel=1e-9)
    sa, sb = torch.load(tmp_path / "sync" / "final_model.pt"), torch.load(tmp_path / "fedavg" / "final_model.pt")
    for k in sa:
        assert torch.allclose(sa[k], sb[k], atol=1e-6), k


def _ru_by_hand(run: Path) -> float:
    """Eq. 17 from the raw trace: per round, Time(n) = Σ of the client's download/compute/upload interval
    lengths inside its job [dispatch, arrival]; RU_q = Σ Time / (N_q · max Time); RU = mean over rounds."""
    events = [json.loads(x) for x in (run / "trace.jsonl").read_text().splitlines()]
    rounds: dict[int, list[float]] = {}
    last_dispatch: dict[int, float] = {}
    intervals: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e["kind"] == "dispatch":
            last_dispatch.setdefault(e["client"], e["t"])
        elif e["kind"] in ("download", "compute", "upload"):
            intervals.setdefault(e["client"], []).append((e["start"], e["end"]))
        elif e["kind"] == "apply":
            c = e["client"]
            t0 = last_dispatch.pop(c)
            busy = sum(en - st for st, en in intervals.get(c, []) if st >= t0 - 1e-12 and en <= e["t"] + 1e-12)
            intervals[c] = [(st, en) for st, en in intervals.get(c, []) if st > e["t"]]
            rounds.setdefault(e["round"], []).append(busy)
    per = [sum(v) / (len(v) * max(v)) for v in rounds.values()]
    return sum(per) / len(per)


@pytest.mark.parametrize("mode", ["async", "semi"])
def test_recorded_ru_matches_eq17_by_hand(tiny, tmp_path, mode):
    from analysis.trace_metrics import utilisation
    from fedsim.sim.trace import load_trace

    algo = {"name": "cos2p", "mode": mode, "mu": 0.4, "t_clk": 0.0, "rates": {}, "distill": False,
            "rate_rule": "table7"}
    run_scenario(_world(tiny, algo, stop={"max_versions": 6}), tmp_path, progress=False)
    ru = utilisation(load_trace(tmp_path / "trace.jsonl"))
    assert ru == pytest.approx(_ru_by_hand(tmp_path), rel=1e-9)
    rounds = _events(tmp_path, "cos2p_round")
    per = [sum(r["busy"]) / (len(r["busy"]) * max(r["busy"])) for r in rounds]
    assert sum(per) / len(per) == pytest.approx(ru, rel=1e-6)
    if mode == "async":
        assert ru == 1.0 and all(len(r["clients"]) == 1 for r in rounds)
    else:
        assert all(len(r["clients"]) >= 2 for r in rounds)  # ⌈0.4 · 5⌉ = 2
        assert ru < 1.0


def test_size_weighted_dirichlet_follows_the_weights_and_device_counts_are_exact(tiny, tmp_path):
    import numpy as np

    from fedsim.learn.partition import partition

    labels = np.repeat(np.arange(10), 2000)
    w = [8277, 24960, 24960, 24960, 36992, 36992, 36992, 36992]  # Co-S²P Table 7, E1 mix 1/0/3/4
    sizes = np.zeros(8)
    for s in range(5):
        parts = partition(labels, 8, "dirichlet", np.random.default_rng(s), alpha=1.5, size_weights=w)
        assert sum(len(p) for p in parts) == len(labels)
        sizes += [len(p) for p in parts]
    share = sizes / sizes.sum()
    nx, orin32, orin64 = share[0], share[1:4].mean(), share[4:].mean()
    assert nx < orin32 < orin64  # Table 7's order, and roughly its ratios (1 : 3.0 : 4.5)
    assert 2.0 < orin32 / nx < 4.5 and 3.0 < orin64 / nx < 6.5
    sc = copy.deepcopy(tiny)
    sc["data"]["num_clients"] = 8
    sc["devices"] = {"mix": [{"profile": "jetson-xavier-nx-8gb", "count": 1}, {"profile": "jetson-agx-orin-32gb", "count": 3},
                             {"profile": "jetson-agx-orin-64gb", "count": 4}]}
    sc["stop"] = {"max_versions": 1}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    import simpy

    from fedsim.sim.rng import Streams
    from fedsim.sim.trace import Trace
    from fedsim.system.world import World

    world = World.from_scenario(simpy.Environment(), Streams(0), Trace(None), 8, scenario_from_mapping(sc))
    names = [world.device(c).name for c in range(8)]
    assert names == ["jetson-xavier-nx-8gb"] + ["jetson-agx-orin-32gb"] * 3 + ["jetson-agx-orin-64gb"] * 4


def test_balanced_rates_by_hand():
    """T* = max(slowest client at the smallest rate, fastest client at the largest); each client takes the
    largest rate whose estimated job fits in T*."""
    from fedsim.algorithms.cos2p import balanced_rates, rate_grid

    grid = [0.1, 0.2, 0.3]
    # band [max(1, 2, .5), min(3, 5, 1.5)] = [2, 1.5] is empty: T* = 2 (the slowest at its smallest rate)
    t = [[1.0, 2.0, 3.0], [2.0, 3.0, 5.0], [0.5, 1.0, 1.5]]
    assert balanced_rates(t, grid).tolist() == [0.2, 0.1, 0.3]
    # band [max(1, 1.2), min(4, 2.5)] = [1.2, 2.5]: T* = 2.5, the fastest client at the largest rate
    t = [[1.0, 2.4, 4.0], [1.2, 1.8, 2.5]]
    assert balanced_rates(t, grid).tolist() == [0.2, 0.3]
    # the grid of R = (w/L)² for L = 8 up to Table 7's 0.5625 (windows 1..6)
    assert rate_grid(8, 1.0, 0.5625) == pytest.approx([(w / 8) ** 2 for w in range(1, 7)])


def test_balanced_rates_balance_job_times_across_the_e1_mix(tmp_path):
    """On the built-in E1 world (1 Xavier NX, 3 Orin 32 GB, 4 Orin 64 GB; weight phase only, no jitter) the
    measured per-client job time spread (max/min of each client's mean busy time) shrinks from Table 7's
    fixed rates to the balanced rule's (estimated 0.109-0.139 s per job: spread 1.28)."""
    from analysis.trace_metrics import update_busy_times
    from fedsim import load_scenario
    from fedsim.sim.trace import load_trace

    spreads = {}
    for rule in ("table7", "balanced"):
        m = load_scenario("cos2p").as_mapping()
        m["algorithm"] = {**m["algorithm"], "rate_rule": rule, "mask_rounds": 0, "mu": 1.0, "t_clk": 0.0}
        m["devices"] = {**m["devices"], "jitter": 0.0}
        m["stop"] = {"max_versions": 7}  # μ = 1: 7 jobs per client, a full roll of the 2-block window
        m["eval"] = {"every_versions": 7}
        m["output"] = {"figures": False, "checkpoints": None}
        # job times come from the cost model, not from the weights: systems only gives the trained run's spreads
        # (4.812 / 1.275 trained, 4.811 / 1.276 systems-only) at a tenth of the time
        m["train"] = {**m.get("train", {}), "systems_only": True}
        out = tmp_path / rule
        run_scenario(scenario_from_mapping(m), out, progress=False)
        busy = update_busy_times(load_trace(out / "trace.jsonl")).groupby("client")["busy"].mean()
        assert len(busy) == 8
        spreads[rule] = float(busy.max() / busy.min())
    # Table 7: the NX (R = 0.0625, 36 samples) takes a fraction of the slowest Orin's time
    assert spreads["table7"] > 3.0
    assert spreads["balanced"] < 1.35
