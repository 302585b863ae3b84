"""The compact trace holds the same events as jsonl, is smaller, streams, and survives a cut-off end."""
from __future__ import annotations

import json

import pandas as pd

from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping
from fedsim.sim.trace import Trace, iter_trace, load_trace, trace_path

BASE = {"data": {"num_clients": 6}, "train": {"local_steps": 2},
        "algorithm": {"name": "fedbuff", "buffer_size": 2, "concurrency": 3},
        "stop": {"max_versions": 4}, "output": {"figures": False}}


def _run(tmp_path, fmt):
    sc = scenario_from_mapping({**BASE, "output": {"figures": False, "trace_format": fmt}})
    [summary] = run_scenario(sc, tmp_path / fmt, progress=False)
    return summary, trace_path(tmp_path / fmt)


def test_compact_and_jsonl_hold_the_same_events(tmp_path):
    s_json, p_json = _run(tmp_path, "jsonl")
    s_comp, p_comp = _run(tmp_path, "compact")
    assert p_json.name == "trace.jsonl" and p_comp.name == "trace.compact.gz"
    a, b = load_trace(p_json), load_trace(p_comp)
    assert len(a) == s_json["trace_events"] > 50
    pd.testing.assert_frame_equal(a, b)
    lines = [json.loads(x) for x in p_json.read_text().splitlines()]
    assert list(iter_trace(p_comp)) == lines  # same records, same field order
    assert p_comp.stat().st_size * 4 < p_json.stat().st_size
    for k in ("mean_staleness", "updates_applied", "bytes_up", "final_accuracy"):
        assert s_json[k] == s_comp[k]
    only = load_trace(p_comp, kinds=("apply",), columns=("staleness", "client"))
    assert list(only.columns) == ["t", "kind", "staleness", "client"]
    assert (only["kind"] == "apply").all() and len(only) == s_json["updates_applied"]


def test_cut_off_compact_trace_still_loads_a_prefix(tmp_path):
    path = tmp_path / "t.compact.gz"
    tr = Trace(path, flush_every=10, fmt="compact")
    for i in range(30):
        tr.emit(float(i), "drop", client=i, reason="offline", round=None)
    size = path.stat().st_size  # three flushed members
    for i in range(30, 35):
        tr.emit(float(i), "drop", client=i, reason="offline", round=None)
    tr.close()
    data = path.read_bytes()
    path.write_bytes(data[: size + (len(data) - size) // 2])  # the last member is cut in the middle
    df = load_trace(path)
    assert 30 <= len(df) < 35
    assert df["client"].tolist() == list(range(len(df)))


def test_figures_and_check_read_a_compact_trace(tmp_path):
    """Every reader finds the trace through ``trace_path``: a compact run gets its timeline and `fedsim check`."""
    from analysis.report import check_run
    from fedsim.output.report import run_figures

    _run(tmp_path, "compact")
    run_dir = tmp_path / "compact"
    written = {p.name for p in run_figures(run_dir)}
    assert {"timeline.svg", "link_rates.svg"} <= written
    table = check_run(run_dir, progress=False)
    row = table[table["quantity"] == "trace: staleness >= 0"]
    assert len(row) == 1 and bool(row["holds"].iloc[0])


def test_column_load_equals_the_full_frame(tmp_path):
    """Loading by columns (packed buffers) gives the values and dtypes of the full frame, with ``kind``
    categorical: ints stay int64, None among numbers is NaN, a column that turns to strings or booleans
    part-way holds what pandas infers from the records, an all-None column stays object."""
    tr = Trace(tmp_path / "trace.jsonl")
    for i in range(50):
        tr.emit(float(i), "upload" if i % 4 else "server", client=i % 3, wait=None if i < 20 else 0.5 * i,
                rate_bps=1e6 + i, note=i if i < 30 else f"n{i}", flag=i > 40, gone=None, big=2 ** 60 + i)
    tr.close()
    cols = ("client", "wait", "rate_bps", "note", "flag", "gone", "big")
    full = load_trace(tmp_path / "trace.jsonl")[["t", "kind", *cols]]
    full["kind"] = full["kind"].astype("category")
    packed = load_trace(tmp_path / "trace.jsonl", columns=cols)
    pd.testing.assert_frame_equal(packed, full)
    assert packed["client"].dtype == "int64" and packed["wait"].isna().sum() == 20
    assert packed["big"].iloc[-1] == 2 ** 60 + 49  # beyond float64's exact ints: kept exact
    only = load_trace(tmp_path / "trace.jsonl", kinds=("server",), columns=("client",))
    assert list(only["kind"].cat.categories) == ["server"] and len(only) == 13
    empty = load_trace(tmp_path / "trace.jsonl", kinds=("nothing",), columns=("client",))
    assert list(empty.columns) == ["t", "kind", "client"] and len(empty) == 0
