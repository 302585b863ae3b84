"""Fed-RAA end to end on small runs: equivalence with FedAsync, fragment isolation, q(j) recount, K bound,
Sync Fed-RAA, the baselines, and bad input through the CLI."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import fedraa_metrics
from fedsim.algorithms import AsyncSlots, FedRAA, SyncRounds
from fedsim.cli import main
from fedsim.learn.submodel import fragment_submodel
from fedsim.learn.models import build_model
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping
from fedsim.sim.trace import load_trace

BASE = {
    "name": "fedraa-test",
    "seed": 3,
    "data": {"name": "digits", "num_clients": 6, "partition": {"method": "iid"}},
    "model": {"name": "mlp", "hidden": 20},
    "train": {"lr": 0.05, "momentum": 0.5, "batch_size": 16, "local_steps": 3},
    "devices": {"mix": [{"profile": "jetson-nano"}], "capability": {"levels": [1, 3], "beta": 0.5,
                                                                   "unit_flops_per_s": 2.0e6}, "jitter": 0.2},
    "channel": {"uplink": {"model": "fixed", "mbps": 2.0}, "downlink": {"model": "fixed", "mbps": 10.0}},
    "network": {"latency_s": 0.01},
    "stop": {"max_versions": 40},
    "eval": {"every_versions": 20},
    "output": {"figures": False},
}


def run(tmp: Path, algorithm: dict, **sections) -> Path:
    data = copy.deepcopy(BASE)
    for k, v in sections.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    data["algorithm"] = algorithm
    run_scenario(scenario_from_mapping(data), tmp, progress=False)
    return tmp


def test_one_fragment_with_constant_staleness_is_fedasync(tmp_path):
    """M = 1, s ≡ 1: every client loops on the whole model and the server mixes with α, which is FedAsync
    with every client always busy (concurrency = N); same world, same streams, so the same model."""
    a = run(tmp_path / "raa", {"name": "fedraa", "fragments": 1, "alpha": 0.5, "staleness": "constant"})
    b = run(tmp_path / "async", {"name": "fedasync", "alpha": 0.5, "staleness": "constant", "concurrency": 6})
    sa, sb = torch.load(a / "final_model.pt"), torch.load(b / "final_model.pt")
    assert set(sa) == set(sb)
    for k in sa:
        assert torch.allclose(sa[k], sb[k], atol=1e-6, rtol=0), k
    ta = load_trace(a / "trace.jsonl", kinds=("apply",))
    tb = load_trace(b / "trace.jsonl", kinds=("apply",))
    assert ta["client"].tolist() == tb["client"].tolist()
    assert np.allclose(ta["t"].to_numpy(float), tb["t"].to_numpy(float))


def test_fragment_updates_touch_only_their_fragment_and_q_recounts(tmp_path):
    out = run(tmp_path, {"name": "fedraa", "fragments": 3, "scheduler": "gre"},
              stop={"max_versions": 12}, output={"figures": False, "checkpoints": 1})
    trace = load_trace(out / "trace.jsonl")
    fr = trace[trace["kind"] == "fragment"].reset_index(drop=True)
    assert len(fr) == 12
    model = build_model("mlp", (8, 8), 10, hidden=20)
    units = [set(fragment_submodel(model, j, (0.2, 0.3, 0.5)).keep["hidden.0"]) for j in range(3)]
    assert [len(u) for u in units] == [4, 6, 10]
    for v in range(1, 13):
        before = torch.load(out / "checkpoints" / f"v{v - 1:06d}.pt")
        after = torch.load(out / "checkpoints" / f"v{v:06d}.pt")
        rows = torch.tensor(sorted(units[int(fr.loc[v - 1, "fragment"])]))
        others = torch.tensor(sorted(set(range(20)) - set(rows.tolist())))
        w1, b1, w2 = "blocks.0.1.weight", "blocks.0.1.bias", "blocks.1.0.weight"
        assert torch.equal(after[w1][others], before[w1][others])
        assert torch.equal(after[b1][others], before[b1][others])
        assert torch.equal(after[w2][:, others], before[w2][:, others])
        assert not torch.equal(after[w1][rows], before[w1][rows])
    # q(j) recount: the fragment each apply covered, read from ctx.versions.apply's own coverage record
    applies = trace[trace["kind"] == "apply"]
    cov = [c["blocks.0.1.bias"] for c in applies["coverage"]]
    recount = [sum(abs(f - len(u) / 20) < 1e-9 for f in cov) for u in units]
    assert recount == fedraa_metrics.fragment_counts(trace).tolist()
    assert fr.groupby("fragment")["q"].max().tolist() == [r for r in recount if r > 0]


def test_gre_raa_respects_k_off_and_slow_clients_get_small_fragments(tmp_path):
    out = run(tmp_path, {"name": "fedraa", "fragments": 3, "scheduler": "gre"}, output={"figures": False, "checkpoints": 20})
    trace = load_trace(out / "trace.jsonl")
    setup = fedraa_metrics.setup(trace)
    a = trace[trace["kind"] == "assign"]
    assert setup["K"] == pytest.approx(setup["K_off"])
    assert (a["cost"].astype(float) <= setup["K"] * (1 + 1e-9)).all() and not a["empty"].astype(bool).any()
    caps = np.asarray(setup["capability"])
    slow = a[a["client"].map(lambda c: caps[int(c)] == 1.0)]
    assert len(slow) and (slow["fragment"] < 2).all()  # never the 50% fragment on a capability-1 client
    # fedsim check: per-fragment rows, q(j) balance and the Theorem 1 row, from the same records
    from analysis.report import check_run

    table = check_run(out, figures=False, progress=False).set_index("quantity")
    q = fedraa_metrics.fragment_counts(trace)
    for j in range(3):
        assert table.loc[f"fragment {j}: q(j), staleness mean/max", "measured"] == q[j]
    assert f"q = {q.tolist()}" in table.loc["q(j) balance: min/max", "note"]
    assert table.loc["Gre-RAA: assignments with estimated c > K", "holds"]
    row = table.loc["Theorem 1 (Corollary 1 shape) at T, K_hat, delta"]
    assert row["measured"] > 0 and f"T = {int(q.sum())}" in row["note"]
    assert table.loc["[fedraa] bounded delay t - tau <= K", "holds"] in (True, False)


def test_sync_fed_raa_counts_one_update_per_fragment_per_round(tmp_path):
    out = run(tmp_path, {"name": "fedraa", "fragments": 3, "aggregation": "sync"}, stop={"max_versions": 4})
    trace = load_trace(out / "trace.jsonl")
    fr = trace[trace["kind"] == "fragment"]
    rounds = trace[trace["kind"] == "round"]
    assert len(rounds) == 4 and len(fr) == 4 * 6
    per_round = fr.groupby(["t", "fragment"]).size().reset_index()
    assert fedraa_metrics.fragment_counts(trace).sum() == len(per_round)


def test_async_staleness_is_counted_per_fragment(tmp_path):
    """Algorithm 1: the worker's timestamp is τ ← q(j), so the staleness of an update of fragment j is the
    number of updates of fragment j applied since its dispatch: q(j) before the apply − q(j) at dispatch.
    Worked from the trace's own schedule: each client's assign (fragment, q at dispatch) and the q its
    fragment reached; α_t = 0.6·(1 + τ)^−0.5 must follow that count, not the global version count."""
    out = run(tmp_path, {"name": "fedraa", "fragments": 3, "scheduler": "gre", "alpha": 0.6,
                         "staleness": "polynomial", "staleness_a": 0.5}, stop={"max_versions": 40})
    trace = load_trace(out / "trace.jsonl")
    events = trace[trace["kind"].isin(["assign", "fragment"])]
    last_assign: dict[int, tuple[int, int]] = {}
    q = [0, 0, 0]
    taus, taus_global = [], []
    for _, e in events.iterrows():
        c, j = int(e["client"]), int(e["fragment"])
        if e["kind"] == "assign":
            last_assign[c] = (j, q[j])
            continue
        j0, q0 = last_assign.pop(c)
        assert j0 == j
        tau = q[j] - q0  # updates of fragment j applied between this client's dispatch and its apply
        q[j] += 1
        assert int(e["q"]) == q[j]
        assert float(e["weight"]) == pytest.approx(0.6 * (1 + tau) ** -0.5, rel=1e-12)
        taus.append(tau)
        taus_global.append(int(e["staleness"]))
    assert len(taus) == 40
    # the two clocks really differ on this schedule, so the check above tells them apart
    assert sum(taus) < sum(taus_global) and any(a != b for a, b in zip(taus, taus_global))


def test_sync_fed_raa_mixes_the_fragment_average_with_alpha(tmp_path):
    """Sync differs from async only in waiting: the round's per-fragment average enters with α_t = α·s(0)
    = α, as an async update of staleness 0 would.  Same clients, streams and bases: the α = 0.6 state after
    one round is 0.4·w_0 + 0.6·(the α = 1 state, which is the plain per-fragment average)."""
    common = {"name": "fedraa", "fragments": 3, "aggregation": "sync", "staleness": "polynomial"}
    a = run(tmp_path / "a06", {**common, "alpha": 0.6}, stop={"max_versions": 1},
            output={"figures": False, "checkpoints": 1})
    b = run(tmp_path / "a1", {**common, "alpha": 1.0}, stop={"max_versions": 1},
            output={"figures": False, "checkpoints": 1})
    w0 = torch.load(a / "checkpoints" / "v000000.pt")
    assert all(torch.equal(w0[k], v) for k, v in torch.load(b / "checkpoints" / "v000000.pt").items())
    mixed, avg = torch.load(a / "final_model.pt"), torch.load(b / "final_model.pt")
    moved = 0
    for k in w0:
        if not torch.is_floating_point(w0[k]):
            continue
        torch.testing.assert_close(mixed[k], 0.4 * w0[k] + 0.6 * avg[k], rtol=1e-5, atol=1e-6)
        moved += int((avg[k] != w0[k]).sum())
    assert moved > 0
    fr = load_trace(a / "trace.jsonl", kinds=("fragment",))
    per_fragment = fr.groupby("fragment")["weight"].sum()
    assert np.allclose(per_fragment.to_numpy(float), 0.6)  # each fragment's copies share α_t = 0.6


@pytest.mark.parametrize("alg", [
    {"name": "fedprox", "mu": 0.1, "clients_per_round": 6},
    {"name": "ramfed-lite", "clients_per_round": 6},
    {"name": "prunefl-lite", "clients_per_round": 6, "density": 0.3, "reconfigure_every": 2},
    {"name": "fedraa", "fragments": 4, "scheduler": "offline", "mode": "frozen", "rho": 0.01},
    {"name": "fedraa", "fragments": 2, "scheduler": "random", "staleness_clock": "fragment"},
    {"name": "fedraa", "fragments": 5, "scheduler": "mp"},
])
def test_variants_and_baselines_run_and_learn(tmp_path, alg):
    out = run(tmp_path, alg, stop={"max_versions": 6}, eval={"every_versions": 6})
    m = pd.read_csv(out / "metrics.csv")
    assert m["accuracy"].iloc[-1] > m["accuracy"].iloc[0]
    if alg["name"] == "prunefl-lite":
        final = torch.load(out / "final_model.pt")
        w = final["blocks.0.1.weight"]
        assert abs(float((w != 0).float().mean()) - 0.3) < 0.02


@pytest.mark.parametrize("overrides, field, says", [
    (["model.hidden=2", "algorithm.fragments=3"], "algorithm.fragments", "only 2 units"),
    (["algorithm.fragments=2", "algorithm.ratios=[0.5,0.6]"], "algorithm.ratios", "sum to 1"),
    (["devices.capability.beta=1.5"], "devices.capability.beta", "[0, 1]"),
    (["algorithm.scheduler=fifo"], "algorithm.scheduler", "allowed"),
])
def test_bad_input_one_line_exit_2(capsys, tmp_path, overrides, field, says):
    code = main(["run", "fedraa", *overrides, "--out", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and field in err and says in err and "Traceback" not in err, err



_CALLS: list[int] = []


class CountingRAA(FedRAA):
    """A user's Fed-RAA: counts the updates it is about to apply, then does what Fed-RAA does."""

    def before_apply(self, updates, weights, round_):
        _CALLS.append(len(updates))
        super().before_apply(updates, weights, round_)


def test_fedraa_runs_on_the_framework_shapes_and_a_subclass_keeps_its_overrides(tmp_path):
    """``FedRAA`` is one class on both shapes (``AsyncSlots``, one slot per client, and ``SyncRounds``) and its
    ``run`` picks the loop from ``aggregation``; a subclass's override of a decision (here ``before_apply``) is
    used on either loop, with no class built at run time."""
    for aggregation, shape in (("async", AsyncSlots), ("sync", SyncRounds)):
        _CALLS.clear()
        run(tmp_path / aggregation, {"name": CountingRAA, "aggregation": aggregation}, stop={"max_versions": 3})
        assert len(_CALLS) == 3
        frags = load_trace(tmp_path / aggregation / "trace.jsonl", kinds=("fragment",))
        assert len(frags) == sum(_CALLS)
        rounds = load_trace(tmp_path / aggregation / "trace.jsonl", kinds=("round",))
        assert (len(rounds) > 0) == (aggregation == "sync")  # only the sync loop writes round records
        assert issubclass(CountingRAA, shape)
    assert "__new__" not in vars(FedRAA)
