"""The figures and report.html read the trace in one streamed pass (fedsim.digest) and give what the
whole trace in memory gave: the same interactive bars, the same timeline bars when merging starts while
reading, a second pass when the clients' order forces one, and the compact reader's columns equal the
full loader's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedsim import digest as dg
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


def _reference_bars(trace: pd.DataFrame, max_clients: int, max_bars: int) -> pd.DataFrame:
    """report.html's bars computed on the whole trace in memory (the order the page draws them in)."""
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
    table = pd.concat(parts, ignore_index=True).sort_values(["start", "row"], kind="stable")
    return table.iloc[:max_bars].reset_index(drop=True)


@pytest.mark.parametrize("block_lines", [7, 100000])
def test_streamed_interactive_bars_equal_the_in_memory_ones(run, block_lines, monkeypatch):
    monkeypatch.setattr(dg, "_PRUNE_SLACK", 0)  # cut the candidates back after (almost) every block
    trace = load_trace(run)
    want = _reference_bars(trace, max_clients=4, max_bars=25)
    blocks = list(iter_blocks(run, kinds=dg.DIGEST_KINDS, fields=dg.DIGEST_FIELDS, block_lines=block_lines))
    d = dg.digest_blocks(blocks, interactive_clients=4, interactive_bars=25)
    table, total = d.interactive_table()
    assert len(table) == 25 < total
    assert table["row"].tolist() == want["row"].tolist()
    assert np.array_equal(table["start"], want["start"]) and np.array_equal(table["end"], want["end"])


def test_merging_while_reading_gives_the_bars_of_merging_at_the_end(run, monkeypatch):
    plain = dg.digest_trace(run, timeline_bars=10)
    monkeypatch.setattr(dg, "_COMPRESS_AT", 1)  # merge after every block
    early = dg.digest_trace(run, timeline_bars=10)
    assert early.merged_while_reading and early.timeline_merged()
    gap = (plain.timeline_end() - 0.0) / 900.0
    for key, rows in plain.timeline_rows().items():
        a = dg.merge_intervals(*rows.arrays(), gap)
        b = dg.merge_intervals(*early.timeline_rows()[key].arrays(), gap)
        assert np.allclose(a[0], b[0]) and np.allclose(a[1], b[1])
        assert rows.count == early.timeline_rows()[key].count


def test_clients_arriving_in_descending_order_are_read_twice_and_exactly(monkeypatch):
    rows = []
    for k, c in enumerate(range(9, -1, -1)):  # the lowest ids come last
        for j in range(30):
            s = 100.0 * k + j
            rows.append({"t": s + 0.5, "kind": "upload", "client": c, "start": s, "end": s + 0.5, "wait": 0.0})
    trace = pd.DataFrame(rows)
    monkeypatch.setattr(dg, "_COMPRESS_AT", 1)
    monkeypatch.setattr(dg, "_PRUNE_SLACK", 0)
    blocks = [dg.Block("upload", ["client", "start", "end", "wait"], np.arange(i, i + 30),
                       cols={f: trace[f].to_numpy(float)[i:i + 30] for f in ("t", "client", "start", "end", "wait")})
              for i in range(0, len(trace), 30)]
    monkeypatch.setattr(dg, "frame_blocks", lambda _: iter(blocks))
    d = dg.digest_trace(trace, timeline_clients=3, timeline_bars=5, interactive_clients=3, interactive_bars=10)
    assert d.known_clients == list(range(10))  # the second pass
    assert sorted(c for _, c in d.timeline_rows()) == [0, 1, 2]
    table, total = d.interactive_table()
    want = _reference_bars(trace, max_clients=3, max_bars=10)
    assert total == 90 and table["start"].tolist() == want["start"].tolist()


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

    from fedsim import report

    scales = []
    real = matplotlib.axes.Axes.set_xscale
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xscale", lambda self, v, **k: scales.append(v) or real(self, v, **k))
    trace = pd.DataFrame([{"t": i + 1.0, "kind": "upload", "client": i, "start": float(i), "end": i + 1.0,
                           "rate_bps": r} for i, r in enumerate(rates)])
    assert report.link_rate_figure(trace, tmp_path / "r.png")
    assert (scales == ["log"]) is log
