"""The figures and report.html read the trace in one streamed pass (fedsim.output.digest) and give what the
whole trace in memory gave: the same timeline coverage and every bar of the tiles the page holds whatever
the block size, a second pass when the clients' order forces one, and the compact reader's columns equal
the full loader's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedsim.output import digest as dg
from fedsim import load_scenario
from fedsim.runner import run_scenario
from fedsim.sim.trace import iter_blocks, load_trace


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("streamed")
    sc = load_scenario("fedasync", ["data.num_clients=6", "model.name=logreg", "train.systems_only=true",
                                    "stop={max_versions: 40}", "output.figures=false", "output.trace_format=compact",
                                    "output.flush_every=16"])
    run_scenario(sc, out, progress=False)
    return out


def _reference_bars(trace: pd.DataFrame, max_clients: int) -> pd.DataFrame:
    """report.html's candidate bars computed on the whole trace in memory (the order the page draws them in)."""
    kind = trace["kind"].astype(str)
    phase = kind.isin(dg.PHASES)
    clients = sorted(int(c) for c in trace.loc[phase, "client"].dropna().unique())[:max_clients]
    row = {c: i + 1 for i, c in enumerate(clients)}
    bars = trace[phase & trace["client"].isin(clients)]
    server = trace[kind == "server"]
    waits = server[(server["wait"] > 0) & server["client"].isin(clients)]
    parts = [pd.DataFrame({"row": bars["client"].map(row), "start": bars["start"], "end": bars["end"]}),
             pd.DataFrame({"row": 0, "start": server["start"], "end": server["end"]}),
             pd.DataFrame({"row": waits["client"].map(row), "start": waits["start"] - waits["wait"],
                           "end": waits["start"]})]
    return pd.concat(parts, ignore_index=True).sort_values(["start", "row"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("block_lines", [7, 100000])
def test_streamed_interactive_bars_are_whole_tiles_of_the_in_memory_ones(run, block_lines, monkeypatch):
    monkeypatch.setattr(dg, "_PRUNE_SLACK", 0)
    monkeypatch.setattr(dg, "EXACT_TILES", 16)
    trace = load_trace(run)
    want = _reference_bars(trace, max_clients=4)
    blocks = list(iter_blocks(run, kinds=dg.DIGEST_KINDS, fields=dg.DIGEST_FIELDS, block_lines=block_lines))
    d = dg.digest_blocks(blocks, interactive_clients=4, interactive_bars=25)
    table, total = d.interactive_table()
    assert 0 < len(table) <= 25 < total == len(want)
    # the bars held are exactly the in-memory bars that start in the tiles kept, in the page's order
    tiles = np.floor(want["start"].to_numpy() / d.tile_width()).clip(0, 15).astype(int)
    kept = want[~d.tile_dropped[tiles]]
    assert table["row"].tolist() == kept["row"].tolist()
    assert np.array_equal(table["start"], kept["start"]) and np.array_equal(table["end"], kept["end"])


@pytest.mark.parametrize("block_lines", [7, 100000])
def test_streamed_coverage_equals_the_in_memory_sums(run, block_lines):
    trace = load_trace(run)
    blocks = list(iter_blocks(run, kinds=dg.DIGEST_KINDS, fields=dg.DIGEST_FIELDS, block_lines=block_lines))
    d = dg.digest_blocks(blocks, timeline_clients=3)
    kind = trace["kind"].astype(str)
    for (k, c), h in d.timeline_cover().items():
        if k in dg.PHASES:
            sel = trace[(kind == k) & (trace["client"] == c)]
            want = float((sel["end"] - sel["start"]).sum())
        elif k == "wait":
            want = float(trace.loc[(kind == "server") & (trace["client"] == c), "wait"].sum())
        else:
            sel = trace[kind == "server"]
            want = float((sel["end"] - sel["start"]).sum())
        assert h.sum() == pytest.approx(want, rel=1e-9, abs=1e-12), (k, c)
    assert {c for _, c in d.timeline_cover()} <= {dg.SERVER, 0, 1, 2}


def test_clients_arriving_in_descending_order_are_read_twice_and_exactly(monkeypatch):
    rows = []
    for k, c in enumerate(range(9, -1, -1)):  # the lowest ids come last
        for j in range(30):
            s = 100.0 * k + j
            rows.append({"t": s + 0.5, "kind": "upload", "client": c, "start": s, "end": s + 0.5, "wait": 0.0})
    trace = pd.DataFrame(rows)
    monkeypatch.setattr(dg, "_PRUNE_SLACK", 0)
    blocks = [dg.Block("upload", ["client", "start", "end", "wait"], np.arange(i, i + 30),
                       cols={f: trace[f].to_numpy(float)[i:i + 30] for f in ("t", "client", "start", "end", "wait")})
              for i in range(0, len(trace), 30)]
    monkeypatch.setattr(dg, "frame_blocks", lambda _: iter(blocks))
    d = dg.digest_trace(trace, timeline_clients=3, interactive_clients=3, interactive_bars=10)
    assert d.known_clients == list(range(10))  # the second pass
    assert sorted(c for _, c in d.timeline_cover()) == [0, 1, 2]
    table, total = d.interactive_table()
    want = _reference_bars(trace, max_clients=3)
    tiles = np.floor(want["start"].to_numpy() / d.tile_width()).clip(0, dg.EXACT_TILES - 1).astype(int)
    assert total == 90 and table["start"].tolist() == want.loc[~d.tile_dropped[tiles], "start"].tolist()
    assert 0 < len(table) <= 10


def test_compact_reader_columns_equal_the_full_loader(run):
    full = load_trace(run)
    got: dict[str, list] = {}
    for b in iter_blocks(run, block_lines=5):
        got.setdefault(b.kind, []).append(b)
    for kind, blocks in got.items():
        sub = full[full["kind"] == kind]
        for f in ("t", "client", "start", "end", "wait", "staleness", "version"):
            if f not in sub:
                continue
            a = np.concatenate([b.t if f == "t" else b.num(f) for b in blocks])
            want = pd.to_numeric(sub[f], errors="coerce").to_numpy(dtype=float)
            assert np.array_equal(a, want, equal_nan=True), (kind, f)
    order = np.argsort(np.concatenate([b.seq for bs in got.values() for b in bs]))
    kinds = np.concatenate([[b.kind] * len(b) for bs in got.values() for b in bs])[order]
    assert kinds.tolist() == full["kind"].astype(str).tolist()


@pytest.mark.parametrize("rates, log", [([1e6, 2e6, 3e6], False), ([1e5, 1e7, 1e15], True)])
def test_link_rates_go_on_a_log_axis_when_they_span_decades(tmp_path, monkeypatch, rates, log):
    import matplotlib.axes

    from fedsim.output import report

    scales = []
    real = matplotlib.axes.Axes.set_xscale
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xscale", lambda self, v, **k: scales.append(v) or real(self, v, **k))
    trace = pd.DataFrame([{"t": i + 1.0, "kind": "upload", "client": i, "start": float(i), "end": i + 1.0,
                           "rate_bps": r} for i, r in enumerate(rates)])
    assert report.link_rate_figure(trace, tmp_path / "r.png")
    assert (scales == ["log"]) is log


def test_freed_memory_is_released_only_before_reading_a_large_trace(tmp_path, monkeypatch):
    """A full collection costs about 0.15 s once torch is loaded: worth it before reading a large trace
    (its reading would otherwise stack on the simulation's freed pages), not before a small one."""
    import gc

    import fedsim.output.report as report

    (tmp_path / "trace.jsonl").write_text('{"t": 0.0, "kind": "dispatch", "client": 0}\n')
    calls: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(1) or 0)
    report._release_freed_memory(tmp_path)
    assert calls == []
    monkeypatch.setattr(report, "RELEASE_MIN_TRACE_BYTES", 10)
    report._release_freed_memory(tmp_path)
    assert calls == [1]
