"""Trace metrics on small hand-written traces; every expected number is counted by hand in the comments."""
import math

import numpy as np
import pandas as pd
import pytest

from analysis import trace_metrics as tm
from fedsim.errors import ConfigError
from fedsim.sim.trace import Trace, load_trace

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _events():
    """Three clients A, B, C; segments s1, s2; three rounds (the third aggregates nothing)."""
    ev = []
    e = lambda t, kind, **f: ev.append({"t": float(t), "kind": kind, **f})
    e(1, "download", client="A", start=0, end=1, bytes=100, wait=0, version=0)
    e(1, "download", client="B", start=0, end=1, bytes=100, wait=0, version=0)
    e(2, "download", client="C", start=0, end=2, bytes=100, wait=0, version=0)
    e(2, "compute", client="B", start=1, end=2, flops=1e6, steps=1, what="train")
    e(3, "upload", client="B", start=2, end=3, bytes=50, wait=0)
    e(3, "apply", client="B", base_version=0, version=1, staleness=0, staleness_s=3.0, weight=1.0, round=1,
      coverage={"s1": 1.0, "s2": 0.0})
    e(4, "compute", client="A", start=1, end=4, flops=3e6, steps=3, what="train")
    e(5, "upload", client="A", start=4, end=5, bytes=50, wait=0)
    e(5, "apply", client="A", base_version=0, version=1, staleness=0, staleness_s=5.0, weight=1.0, round=1,
      coverage={"s1": 1.0, "s2": 0.5})
    e(5, "aggregate", version=1, round=1, n_updates=2, clients=["B", "A"])
    e(5, "round", round=1, start=0, end=5, clients=["A", "B", "C"], dropped=0)
    e(5, "eval", version=1, round=1, accuracy=0.30, loss=2.0)
    e(6, "download", client="B", start=5, end=6, bytes=100, wait=0, version=1)
    e(7, "compute", client="B", start=6, end=7, flops=1e6, steps=1, what="train")
    e(8, "compute", client="C", start=2, end=8, flops=6e6, steps=6, what="train")
    e(8, "upload", client="B", start=7, end=8, bytes=50, wait=0)
    e(8, "apply", client="B", base_version=1, version=2, staleness=0, staleness_s=3.0, weight=1.0, round=2,
      coverage=["s1"])
    e(9, "drop", client="A", reason="offline", round=2)
    e(10, "upload", client="C", start=8, end=10, bytes=50, wait=0)
    e(10, "apply", client="C", base_version=0, version=2, staleness=1, staleness_s=10.0, weight=0.5, round=2)
    e(10, "aggregate", version=2, round=2, n_updates=2, clients=["B", "C"])
    e(10, "round", round=2, start=5, end=10, clients=["B", "C"], dropped=["A"])
    e(10, "eval", version=2, round=2, accuracy=0.50, loss=1.5)
    e(12, "round", round=3, start=10, end=12, clients=["A"], dropped=1)
    return ev


@pytest.fixture(scope="module")
def trace_df(tmp_path_factory):
    # Round-trip through the real trace writer and loader.
    path = tmp_path_factory.mktemp("run") / "trace.jsonl"
    tr = Trace(path, flush_every=3)
    for rec in _events():
        rec = dict(rec)
        tr.emit(rec.pop("t"), rec.pop("kind"), **rec)
    tr.close()
    return load_trace(path)


def test_staleness_table_and_summary(trace_df):
    st = tm.staleness_table(trace_df)
    assert st["client"].tolist() == ["B", "A", "B", "C"]
    assert st["staleness"].tolist() == [0, 0, 0, 1]
    s = tm.staleness_summary(trace_df)
    # versions: [0,0,0,1] -> mean 0.25, max 1, p50 0, p90 at rank 0.9*3 = 2.7 -> 0 + 0.7*(1-0) = 0.7
    assert s["n_updates"] == 4
    assert s["mean"] == pytest.approx(0.25) and s["max"] == 1
    assert s["p50"] == pytest.approx(0.0) and s["p90"] == pytest.approx(0.7)
    # seconds sorted [3,3,5,10] -> mean 5.25, p50 (3+5)/2 = 4, p90 5 + 0.7*5 = 8.5
    assert s["mean_s"] == pytest.approx(5.25) and s["max_s"] == 10
    assert s["p50_s"] == pytest.approx(4.0) and s["p90_s"] == pytest.approx(8.5)
    # tau_q = max staleness per round: round 1 -> 0, round 2 -> 1; tau_bar = (0^2 + 1^2)/2
    assert s["tau_bar"] == pytest.approx(0.5) and s["tau_max"] == 1


def test_participation_per_round(trace_df):
    p = tm.participation_per_round(trace_df)
    assert list(p.index) == [1, 2, 3]
    assert p.loc[1, "n_updates"] == 2 and p.loc[1, "clients"] == ["A", "B"] and p.loc[1, "dropped"] == 0
    assert p.loc[2, "n_clients"] == 2 and p.loc[2, "clients"] == ["B", "C"] and p.loc[2, "dropped"] == 1
    assert p.loc[3, "n_updates"] == 0 and p.loc[3, "dropped"] == 1
    assert p.loc[2, "start"] == 5 and p.loc[2, "end"] == 10


def test_coverage_and_n_star(trace_df):
    cov = tm.coverage_matrix(trace_df)
    # round 1: s1 {A,B}, s2 {A} (B's s2 fraction is 0); round 2: s1 {B,C}, s2 {C} (no coverage = all);
    # round 3: nothing.
    assert cov.loc[1].tolist() == [2, 1] and cov.loc[2].tolist() == [2, 1] and cov.loc[3].tolist() == [0, 0]
    per = tm.n_star_per_round(trace_df)
    assert per["n_star"].tolist() == [1, 1, 0] and per["n_star_trained"].tolist() == [1, 1, 0]
    ns = tm.n_star(trace_df)
    assert ns["n_star"] == 0 and ns["n_star_trained"] == 1
    assert ns["n_star_mean"] == pytest.approx((2 + 1 + 2 + 1 + 0 + 0) / 6)
    # A threshold on the covered fraction: A's s2 at 0.5 no longer counts with min_fraction=0.5.
    assert tm.coverage_matrix(trace_df, min_fraction=0.5).loc[1].tolist() == [2, 0]
    # Without any coverage field every update covers the single segment "model".
    plain = trace_df.drop(columns=["coverage"])
    assert tm.coverage_matrix(plain).loc[[1, 2]].to_numpy().ravel().tolist() == [2, 2]


def test_utilisation_co_s2p_eq17(trace_df):
    busy = tm.update_busy_times(trace_df)
    # B: 1+1+1 = 3; A: 1+3+1 = 5; B (2nd job, from its download of v1 at 5): 1+1+1 = 3; C: 2+6+2 = 10
    assert busy["busy"].tolist() == [3, 5, 3, 10]
    ru = tm.utilisation_per_round(trace_df)
    assert ru.loc[1] == pytest.approx(8 / (2 * 5)) and ru.loc[2] == pytest.approx(13 / (2 * 10))
    assert tm.utilisation(trace_df) == pytest.approx((0.8 + 0.65) / 2)


def test_utilisation_is_one_when_fully_async():
    rows = []
    for k, (c, dur) in enumerate([("A", 2.0), ("B", 7.0), ("A", 3.0)]):
        t0 = 10.0 * k
        rows.append({"t": t0 + dur, "kind": "compute", "client": c, "start": t0, "end": t0 + dur})
        rows.append({"t": t0 + dur, "kind": "apply", "client": c, "staleness": 0, "round": k + 1, "base_version": k})
    assert tm.utilisation(pd.DataFrame(rows)) == pytest.approx(1.0)


def test_update_fairness(trace_df):
    counts = tm.update_counts(trace_df)
    assert counts.to_dict() == {"A": 1, "B": 2, "C": 1}
    f = tm.update_fairness(trace_df)
    assert f["total"] == 4 and f["jain"] == pytest.approx(16 / (3 * 6))
    # A client that never got an update in counts as zero when listed.
    assert tm.update_counts(trace_df, clients=["A", "B", "C", "D"])["D"] == 0
    assert tm.jain_index([5, 5, 5]) == pytest.approx(1.0) and tm.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)


def test_time_bytes_energy_to_accuracy(trace_df):
    assert tm.time_to_accuracy(trace_df, 0.3) == 5 and tm.time_to_accuracy(trace_df, 0.4) == 10
    assert math.isnan(tm.time_to_accuracy(trace_df, 0.9))
    # Bytes by t = 10: downloads 4 x 100, uploads 4 x 50 = 600; gain (0.5 - 0.3) x 100 = 20 points.
    assert tm.bytes_per_accuracy_point(trace_df) == pytest.approx(30.0)
    assert tm.bytes_per_accuracy_point(trace_df, target=0.45) == pytest.approx(30.0)
    assert math.isnan(tm.bytes_per_accuracy_point(trace_df, target=0.9))
    # Energy: compute seconds 1+3+1+6 = 11 at 10 W, upload seconds 1+1+1+2 = 5 at 2 W -> 120 J / 20 points.
    assert tm.energy_per_accuracy_point(trace_df, power_w={"compute": 10.0, "upload": 2.0}) == pytest.approx(6.0)
    with pytest.raises(ConfigError, match="power_w"):
        tm.energy_per_accuracy_point(trace_df)
    # A metrics table can stand in for eval events.
    metrics = pd.DataFrame({"t": [5.0, 10.0], "round": [1, 2], "version": [1, 2], "accuracy": [0.3, 0.5], "loss": [2.0, 1.5]})
    assert tm.time_to_accuracy(metrics, 0.4) == 10
    assert tm.bytes_per_accuracy_point(trace_df, metrics=metrics) == pytest.approx(30.0)
    withe = trace_df.copy()
    withe["energy"] = np.where(withe["kind"] == "compute", 1.0, np.nan)
    assert tm.energy_per_accuracy_point(withe) == pytest.approx(4 / 20)


def test_bad_input_is_reported():
    with pytest.raises(ConfigError, match="staleness"):
        tm.staleness_table(pd.DataFrame([{"t": 0.0, "kind": "apply", "client": "A"}]))
    bad = pd.DataFrame([{"t": 0.0, "kind": "apply", "client": "A", "round": 1, "staleness": 0, "coverage": 3}])
    with pytest.raises(ConfigError, match="coverage"):
        tm.coverage_matrix(bad)
    assert tm.staleness_summary(pd.DataFrame())["n_updates"] == 0


def _busy_by_pandas_filters(df):
    """update_busy_times as first written: two pandas filters of the trace per applied update (the reference)."""
    import math

    st = tm.staleness_table(df)
    iv = df[df["kind"].isin(tm.INTERVAL_KINDS)]
    dl = df[df["kind"] == "download"]
    prev, rows = {}, []
    for _, ev in st.iterrows():
        c, t = ev["client"], float(ev["t"])
        start = prev.get(c, -math.inf)
        if not dl.empty and "base_version" in ev and "version" in dl.columns and not tm._is_missing(ev["base_version"]):
            cand = dl[(dl["client"] == c) & (dl["version"] == ev["base_version"]) & (dl["end"] <= t + 1e-12)]
            if not cand.empty:
                start = float(cand["start"].max())
        busy = 0.0
        if not iv.empty:
            mine = iv[(iv["client"] == c) & (iv["start"] >= start - 1e-12) & (iv["end"] <= t + 1e-12)]
            busy = float((mine["end"] - mine["start"]).sum())
        rows.append({"t": t, "client": c, "round": ev.get("round", np.nan), "busy": busy})
        prev[c] = t
    return pd.DataFrame(rows)


def test_update_busy_times_equal_the_per_update_pandas_filters(tiny, tmp_path):
    """The per-client arrays give exactly the frame the per-update filters of the whole trace gave: on a
    semi-asynchronous run's trace, and on a hand-made one with a missing download, a NaN start, a client
    named by a string and an update whose base version was never downloaded."""
    import copy

    from fedsim import scenario_from_mapping
    from fedsim.runner import run_scenario
    from fedsim.sim.trace import load_trace, trace_path

    sc = copy.deepcopy(tiny)
    sc["data"] = {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}}
    sc["model"] = {"name": "vit", "depth": 1, "options": {"embed_dim": 16, "heads": 2, "patch": 4}}
    sc["train"] = {"lr": 0.05, "batch_size": 16, "local_steps": 2}
    sc["algorithm"] = {"name": "cos2p", "mu": 0.5, "t_clk": 0.0}
    sc["stop"] = {"max_versions": 6}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    real = load_trace(trace_path(tmp_path))
    made = pd.DataFrame([
        {"t": 1.0, "kind": "download", "client": "a", "version": 0, "start": 0.0, "end": 1.0},
        {"t": 2.0, "kind": "compute", "client": "a", "start": 1.0, "end": 2.0},
        {"t": 2.5, "kind": "upload", "client": "a", "start": 2.0, "end": 2.5},
        {"t": 2.0, "kind": "compute", "client": 7, "start": np.nan, "end": 2.0},
        {"t": 2.2, "kind": "upload", "client": 7, "start": 2.0, "end": 2.2},
        {"t": 2.6, "kind": "apply", "client": "a", "round": 0, "base_version": 0, "version": 1, "staleness": 0},
        {"t": 2.7, "kind": "apply", "client": 7, "round": 0, "base_version": 0, "version": 2, "staleness": 1},
        {"t": 3.0, "kind": "download", "client": 7, "version": 2, "start": 2.7, "end": 3.0},
        {"t": 3.5, "kind": "compute", "client": 7, "start": 3.0, "end": 3.5},
        {"t": 3.9, "kind": "apply", "client": 7, "round": 1, "base_version": 5, "version": 3, "staleness": 1},
        {"t": 4.0, "kind": "apply", "client": "a", "round": 1, "base_version": np.nan, "version": 4, "staleness": 3},
    ])
    for df in (real, made):
        got, want = tm.update_busy_times(df), _busy_by_pandas_filters(df)
        assert len(want) > 0
        pd.testing.assert_frame_equal(got, want, check_exact=True)
