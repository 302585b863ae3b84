"""The run figures written directly as SVG (fedsim/output/svg.py, svg_figures.py) against known truths.

Each SVG is parsed back (xml.etree): a line's points map back to the metrics it was drawn from, a
histogram's bars are ``np.histogram``'s counts, the timeline's server row paints the server's busy share,
every file is well-formed, degenerate data draws, and a deliberately broken drawing is caught."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedsim.output import digest as dg
from fedsim.output.report import PHASE_COLOURS
from fedsim.output.svg import Figure, log_ticks, nice_ticks, num
from fedsim.output.svg_figures import (accuracy_svg, energy_svg, link_rate_svg, rate_bins, server_queue_svg,
                                       submodel_svg, timeline_svg)

pytestmark = pytest.mark.fast

NS = "{http://www.w3.org/2000/svg}"


def parse(path: Path) -> ET.Element:
    """The SVG's root element (raises on malformed XML)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{NS}svg"
    return root


class Box:
    """An axes group's px <-> data mapping, read from its data attributes."""

    def __init__(self, g: ET.Element) -> None:
        self.left, self.top, self.width, self.height = map(float, g.get("data-box").split())
        self.xlim = tuple(map(float, g.get("data-xlim").split()))
        self.ylim = tuple(map(float, g.get("data-ylim").split()))
        self.xlog = g.get("data-xlog") == "1"

    def data_x(self, px: np.ndarray) -> np.ndarray:
        lo, hi = (np.log10(v) for v in self.xlim) if self.xlog else self.xlim
        v = lo + (np.asarray(px) - self.left) / self.width * (hi - lo)
        return 10 ** v if self.xlog else v

    def data_y(self, py: np.ndarray) -> np.ndarray:
        lo, hi = self.ylim
        return lo + (self.top + self.height - np.asarray(py)) / self.height * (hi - lo)

    def px_x(self) -> float:
        """Data units per px along x (linear axes)."""
        return (self.xlim[1] - self.xlim[0]) / self.width


def axes(root: ET.Element) -> list[tuple[Box, ET.Element]]:
    return [(Box(g), g) for g in root.iter(f"{NS}g") if g.get("class") == "axes"]


def rects(g: ET.Element, cls: str) -> list[ET.Element]:
    return [r for grp in g.iter(f"{NS}g") if grp.get("class") == cls for r in grp.iter(f"{NS}rect")]


def server_share(path: Path) -> float:
    """The share of the timeline's server row (the top row, 0.8 of a row high, the plot's whole width)
    painted by the server's busy-share bars: their area over the band's."""
    root = parse(path)
    box, g = axes(root)[0]
    row_px = box.height / (abs(box.ylim[0] - box.ylim[1]))
    area = sum(float(r.get("width")) * float(r.get("height")) for r in rects(g, "server-share"))
    return area / (0.8 * row_px * box.width)


def phase_areas(path: Path) -> dict[str, float]:
    """Area (px²) of each phase's rectangles in the timeline's client rows."""
    root = parse(path)
    _, g = axes(root)[0]
    out: dict[str, float] = {}
    for r in rects(g, "phases"):
        out[r.get("data-kind")] = out.get(r.get("data-kind"), 0.0) + float(r.get("width")) * float(r.get("height"))
    return out


# ---------------------------------------------------------------------------- primitives

def test_ticks_by_hand():
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0, 20, 4) == [0, 5, 10, 15, 20]
    assert nice_ticks(-3, 7, 5) == [-2, 0, 2, 4, 6]
    assert log_ticks(1.5, 45) == [2, 5, 10, 20]
    assert num(1.005) in ("1", "1.01") and num(-0.001) == "0" and num(12.5) == "12.5"


def test_same_data_same_bytes(tmp_path):
    m = {"run": pd.DataFrame({"t": [0.0, 1.5, 3.0], "accuracy": [0.1, 0.4, 0.45]})}
    accuracy_svg(m, tmp_path / "a.svg")
    accuracy_svg(m, tmp_path / "b.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


# ---------------------------------------------------------------------------- known truths

def test_accuracy_polyline_maps_back_to_the_metrics(tmp_path):
    t = np.array([0.0, 12.5, 30.0, 47.25, 80.0])
    acc = np.array([0.1, 0.55, 0.72, 0.8, 0.91])
    accuracy_svg({"a": pd.DataFrame({"t": t, "accuracy": acc}),
                  "b": pd.DataFrame({"t": t[:3], "accuracy": acc[:3] / 2})}, tmp_path / "acc.svg")
    root = parse(tmp_path / "acc.svg")
    (box, g), = axes(root)
    lines = {p.get("data-label"): p for p in g.iter(f"{NS}polyline") if p.get("class") == "line"}
    assert set(lines) == {"a", "b"}
    for name, (xs, ys) in (("a", (t, acc)), ("b", (t[:3], acc[:3] / 2))):
        pts = np.array([[float(v) for v in p.split(",")] for p in lines[name].get("points").split()])
        # 0.005 px of rounding, in data units
        assert box.data_x(pts[:, 0]) == pytest.approx(xs, abs=0.006 * box.px_x())
        assert box.data_y(pts[:, 1]) == pytest.approx(ys, abs=0.006 * (box.ylim[1] - box.ylim[0]) / box.height)
    # deliberately broken: a point moved by one px no longer maps back
    pts[2, 1] += 1.0
    assert box.data_y(pts[:, 1]) != pytest.approx(acc[:3] / 2, abs=0.006 * (box.ylim[1] - box.ylim[0]) / box.height)


def _rates_trace(up: np.ndarray, down: np.ndarray) -> pd.DataFrame:
    rows = [{"t": float(i + 1), "kind": "upload", "client": i % 3, "start": float(i), "end": float(i) + 0.5,
             "bytes": 1000, "rate_bps": float(r)} for i, r in enumerate(up)]
    rows += [{"t": float(i + 1), "kind": "download", "client": i % 3, "start": float(i), "end": float(i) + 0.2,
              "bytes": 1000, "rate_bps": float(r)} for i, r in enumerate(down)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("spread", ["linear", "log"])
def test_histogram_bars_are_numpys_counts(tmp_path, spread):
    rng = np.random.default_rng(0)
    if spread == "linear":
        up, down = rng.uniform(2e6, 8e6, 300), rng.uniform(5e6, 9e6, 200)
    else:
        up, down = 10 ** rng.uniform(5, 8, 300), 10 ** rng.uniform(6, 7, 200)
    assert link_rate_svg(_rates_trace(up, down), tmp_path / "r.svg")
    root = parse(tmp_path / "r.svg")
    (box, g), = axes(root)
    assert box.xlog == (spread == "log")
    edges, _ = rate_bins(np.concatenate([up, down]) / 1e6)
    bars = {grp.get("data-label").split(" ")[0]: list(grp.iter(f"{NS}rect")) for grp in g.iter(f"{NS}g")
            if grp.get("class") == "hist"}
    for kind, values in (("upload", up), ("download", down)):
        counts = np.histogram(values / 1e6, bins=edges)[0]
        heights = np.array([box.data_y(float(r.get("y"))) for r in bars[kind]])
        assert heights == pytest.approx(counts, abs=0.01 * counts.max())
        assert np.round(heights).sum() == len(values)
        lefts = box.data_x(np.array([float(r.get("x")) for r in bars[kind]]))
        assert lefts == pytest.approx(edges[:-1], rel=1e-3)


def _spread_server(util: float, n: int = 4000, period: float = 1e-3) -> pd.DataFrame:
    s = np.arange(n) * period
    rows = [{"t": e, "kind": "server", "client": 0, "start": a, "end": e, "wait": 0.0}
            for a, e in zip(s.tolist(), (s + util * period).tolist())]
    rows.append({"t": 1.0, "kind": "upload", "client": 0, "start": 0.5, "end": 1.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("util", [0.05, 0.35, 0.9])
def test_timeline_server_row_paints_its_busy_share(tmp_path, util):
    timeline_svg(_spread_server(util), tmp_path / "t.svg")
    assert server_share(tmp_path / "t.svg") == pytest.approx(util, abs=0.01)
    # the client row: client 0 uploads from 0.5 s to 1 s of a 4 s run (an eighth of the axis, at 0.8 high)
    areas = phase_areas(tmp_path / "t.svg")
    box, _ = axes(parse(tmp_path / "t.svg"))[0]
    assert set(areas) == {"upload"}
    assert areas["upload"] / (0.8 * box.height / 2 * box.width) == pytest.approx(0.5 / 4.0, abs=2 / box.width)


def test_server_share_check_catches_a_broken_drawing(tmp_path):
    timeline_svg(_spread_server(0.35), tmp_path / "t.svg")
    text = (tmp_path / "t.svg").read_text()
    # halve every server bar's height: the check must see 17.5%, not 35%
    root = ET.fromstring(text)
    for g in root.iter(f"{NS}g"):
        if g.get("class") == "server-share":
            for r in g.iter(f"{NS}rect"):
                r.set("height", str(float(r.get("height")) / 2))
    ET.ElementTree(root).write(tmp_path / "broken.svg")
    assert server_share(tmp_path / "broken.svg") == pytest.approx(0.175, abs=0.01)
    assert server_share(tmp_path / "broken.svg") != pytest.approx(0.35, abs=0.02)


def test_timeline_workers_divide_the_busy_share(tmp_path):
    timeline_svg(_spread_server(0.8), tmp_path / "t.svg", workers=2)
    assert server_share(tmp_path / "t.svg") == pytest.approx(0.4, abs=0.01)


def test_timeline_client_rows_follow_the_dominant_phase(tmp_path):
    # client 0: 1 s of upload split by 1000 compute bars of 1 µs: upload wins every column, compute none
    rows = [{"t": 1.0, "kind": "upload", "client": 0, "start": 0.0, "end": 1.0}]
    rows += [{"t": k / 1000 + 1e-6, "kind": "compute", "client": 0, "start": k / 1000, "end": k / 1000 + 1e-6}
             for k in range(1000)]
    timeline_svg(pd.DataFrame(rows), tmp_path / "t.svg")
    areas = phase_areas(tmp_path / "t.svg")
    assert set(areas) == {"upload"}
    fills = {r.get("fill") for _, g in axes(parse(tmp_path / "t.svg")) for r in rects(g, "phases")}
    assert fills == {PHASE_COLOURS["upload"]}


def test_queue_step_line_follows_the_queue(tmp_path):
    # one worker: request 1 served 0-2 s; request 2 arrives at 1 s, waits 1 s, served 2-3 s: one waiting 1-2 s
    rows = [{"t": 2.0, "kind": "server", "client": 0, "start": 0.0, "end": 2.0, "wait": 0.0},
            {"t": 3.0, "kind": "server", "client": 1, "start": 2.0, "end": 3.0, "wait": 1.0}]
    d = dg.digest_trace(pd.DataFrame(rows))
    q = d.queue()
    assert server_queue_svg(d, tmp_path / "q.svg")
    (box, g), = axes(parse(tmp_path / "q.svg"))
    step, = [p for p in g.iter(f"{NS}polyline") if p.get("class") == "step"]
    pts = np.array([[float(v) for v in p.split(",")] for p in step.get("points").split()])
    x, y = box.data_x(pts[:, 0]), box.data_y(pts[:, 1])
    # the value held from each change to the next: 1 waiting at 1.5 s, none at 2.5 s
    def at(t):
        i = np.flatnonzero(x <= t)[-1]
        return y[i]
    assert at(1.5) == pytest.approx(1.0, abs=0.01) and at(0.5) == pytest.approx(0.0, abs=0.01)
    assert at(2.5) == pytest.approx(0.0, abs=0.01)
    assert set(np.round(q["queue"]).tolist()) == {0.0, 1.0}
    # a server that never queued says so
    assert server_queue_svg(dg.digest_trace(pd.DataFrame(rows[:1])), tmp_path / "never.svg")
    assert "never queued" in "".join(parse(tmp_path / "never.svg").itertext())


def test_energy_bars_stack_to_the_totals(tmp_path):
    e = pd.DataFrame({"device": [0, 1, 2], "device_class": ["a", "a", "b"], "compute_j": [1.0, 2.0, 4.0],
                      "tx_j": [0.5, 0.5, 1.0], "rx_j": [0.25, 0.25, 0.0], "idle_j": [10.0, 10.0, 5.0]})
    assert energy_svg(e, tmp_path / "e.svg")
    (left, gl), (right, gr) = axes(parse(tmp_path / "e.svg"))
    tops = {}
    for r in rects(gl, "stack"):
        x = round(float(left.data_x(float(r.get("x")) + float(r.get("width")) / 2)))
        tops[x] = max(tops.get(x, 0.0), float(left.data_y(float(r.get("y")))))
    assert tops[0] == pytest.approx(24.5, rel=1e-3) and tops[1] == pytest.approx(10.0, rel=1e-3)


def test_submodel_cells_hold_the_kept_fractions(tmp_path):
    rows = [{"t": 0.0, "kind": "dispatch", "client": c, "version": 0, "submodel": {"kept": [1.0, f]}}
            for c, f in ((0, 0.5), (1, 0.25), (1, 0.75))]
    assert submodel_svg(pd.DataFrame(rows), tmp_path / "s.svg", classes={0: "nano", 1: "orin"})
    cells = [r for g in parse(tmp_path / "s.svg").iter(f"{NS}g") if g.get("class") == "heatmap"
             for r in g.iter(f"{NS}rect")]
    assert [float(c.get("data-value")) for c in cells] == [1.0, 1.0, 0.5, 0.5]


# ---------------------------------------------------------------------------- degenerate data draws

def test_degenerate_data_draws_well_formed_svg(tmp_path):
    one = pd.DataFrame({"t": [0.0], "accuracy": [0.5]})
    accuracy_svg({"x": one}, tmp_path / "one.svg")
    accuracy_svg({"x": pd.DataFrame({"t": [], "accuracy": []})}, tmp_path / "empty.svg")
    accuracy_svg({"x": pd.DataFrame({"t": [1.0, 2.0], "accuracy": [np.nan, np.nan]})}, tmp_path / "nan.svg")
    # one client, zero-length phases, a run of zero virtual time
    zero = pd.DataFrame([{"t": 0.0, "kind": k, "client": 0, "start": 0.0, "end": 0.0, "wait": 0.0, "bytes": 10,
                          "rate_bps": 2e6} for k in ("download", "compute", "upload", "server")])
    timeline_svg(zero, tmp_path / "zero.svg")
    server_queue_svg(zero, tmp_path / "zq.svg")
    # every link at one rate up to rounding
    assert link_rate_svg(_rates_trace(np.full(5, 2e6) + np.spacing(2e6) * np.arange(5), np.full(3, 2e6)),
                         tmp_path / "same.svg")
    timeline_svg(pd.DataFrame({"t": [], "kind": [], "client": [], "start": [], "end": []}), tmp_path / "none.svg")
    assert not link_rate_svg(pd.DataFrame({"t": [], "kind": [], "client": []}), tmp_path / "norate.svg")
    assert not energy_svg(pd.DataFrame(), tmp_path / "noenergy.svg")
    for f in sorted(tmp_path.glob("*.svg")):
        parse(f)
    assert len(list(tmp_path.glob("*.svg"))) == 7


def test_malformed_svg_is_caught(tmp_path):
    f = Figure(100, 100)
    f.text(10, 10, "a < b & c")  # escaped
    (tmp_path / "ok.svg").write_text(f.render())
    parse(tmp_path / "ok.svg")
    (tmp_path / "bad.svg").write_text(f.render().replace("&lt;", "<"))
    with pytest.raises(ET.ParseError):
        parse(tmp_path / "bad.svg")

