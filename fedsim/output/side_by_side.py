"""``fedsim compare RUN_A RUN_B``: the two runs side by side in one ``report.html``, and what differs.

The page (static HTML and SVG, no script: cheap to write and to open) has

* **differences**: the scenario settings that differ (the two resolved ``scenario.yaml`` files, key by
  key), the headline numbers that differ (final and best accuracy, virtual time, bytes, server
  utilisation, mean staleness: from ``summary.json``), and every share of the per-client breakdown that
  moved by more than :data:`SHARE_THRESHOLD` (a label's share is its seconds summed over the clients over
  clients x run time, as :mod:`fedsim.output.panels` labels them);
* **the numbers** of both runs in one table;
* **timelines on one time axis**: each run's server and first clients, transfers and computation as bars,
  from 0 to the longer run's end, so the same instant is the same x in both;
* **per-client breakdowns** side by side: each client's bar in run A above its bar in run B.

The same differences go to ``differences.json`` (for a script, and for the tests).  Two runs whose settings
and outcome are equal (a run and its copy, or the same scenario and seed run twice) name none.
"""
from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import yaml

from fedsim.files import write_text
from fedsim.output.digest import merge_intervals
from fedsim.output.panels import BREAKDOWN, DRAW_ORDER, _panels
from fedsim.sim.trace import iter_blocks, trace_path

#: A breakdown share (percentage points of all clients' time) that moved by more than this is named.
SHARE_THRESHOLD = 0.02
#: Two headline numbers are equal when they differ by at most this, relative to the larger.
REL_TOL = 1e-9
#: Clients drawn per run in the timelines and the breakdown bars (the lowest ids).
ROWS = 16
#: The plots' width in pixels; intervals closer than a pixel are drawn as one bar.
PLOT_W = 860
_LEFT = 110

#: The headline numbers compared: summary.json key (or a derived one), label, how to write it.
NUMBERS: tuple[tuple[str, str, str], ...] = (
    ("final_accuracy", "final accuracy", "acc"),
    ("best_accuracy", "best accuracy", "acc"),
    ("virtual_time_s", "virtual time", "s"),
    ("bytes", "bytes moved (up + down)", "B"),
    ("bytes_up", "bytes up", "B"),
    ("bytes_down", "bytes down", "B"),
    ("utilisation", "server utilisation", "%"),
    ("mean_staleness", "mean staleness", "x"),
    ("versions", "model versions", "x"),
    ("dropped", "dropped tasks", "x"),
)
_PHASES = (("download", "#4c9be8"), ("compute", "#f28e2b"), ("upload", "#59a14f"), ("offline", "#333333"))
_SERVER = "#b07aa1"


def flat_settings(run: Path) -> dict[str, Any]:
    """The run's resolved scenario (``scenario.yaml``) as dotted keys (``algorithm.deadline_s``) to values
    ({} without one); lists stay whole values."""
    p = run / "scenario.yaml"
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8")) if p.exists() else None
    except (OSError, yaml.YAMLError):
        raw = None
    out: dict[str, Any] = {}

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict) and v:
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            out[prefix] = v

    if isinstance(raw, dict):
        walk("", raw)
    return out


def _summary(run: Path) -> dict[str, Any]:
    try:
        s = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def run_numbers(run: Path) -> dict[str, float | None]:
    """The headline numbers of :data:`NUMBERS` from the run's summary.json (None where it has none)."""
    s = _summary(run)

    def num(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    out = {k: num(s.get(k)) for k, _, _ in NUMBERS}
    up, down = num(s.get("bytes_up")), num(s.get("bytes_down"))
    out["bytes"] = None if up is None and down is None else (up or 0.0) + (down or 0.0)
    server = s.get("server") if isinstance(s.get("server"), dict) else {}
    out["utilisation"] = num(server.get("utilisation"))
    if isinstance(s.get("dropped"), (list, dict)):
        out["dropped"] = float(len(s["dropped"]))
    return out


def _differ(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) > REL_TOL * max(1.0, abs(a), abs(b))
    return a != b


def breakdown_shares(table: pd.DataFrame, t_end: float) -> dict[str, float]:
    """Each breakdown label's share of all clients' time: its seconds summed over clients / (clients x T)."""
    n = len(table)
    if not n or not t_end > 0:
        return {k: 0.0 for k in DRAW_ORDER}
    return {k: float(table[k].sum()) / (n * t_end) for k in DRAW_ORDER}


def differences(a: Path, b: Path, shares: tuple[dict[str, float], dict[str, float]] | None = None) -> dict[str, Any]:
    """What differs between runs ``a`` and ``b``: ``settings`` (key, a, b) of the resolved scenarios,
    ``numbers`` (key, label, a, b) of :data:`NUMBERS`, ``shares`` (key, label, a, b) of the breakdown that
    moved by more than ``threshold`` (:data:`SHARE_THRESHOLD`)."""
    sa, sb = flat_settings(a), flat_settings(b)
    settings = [{"key": k, "a": sa.get(k), "b": sb.get(k)} for k in sorted(set(sa) | set(sb))
                if k not in sa or k not in sb or _differ(sa[k], sb[k])]
    na, nb = run_numbers(a), run_numbers(b)
    numbers = [{"key": k, "label": lab, "a": na.get(k), "b": nb.get(k)} for k, lab, _ in NUMBERS
               if _differ(na.get(k), nb.get(k))]
    labels = {k: lab for k, lab, _ in BREAKDOWN}
    moved = []
    if shares is not None:
        for k in DRAW_ORDER:
            x, y = shares[0].get(k, 0.0), shares[1].get(k, 0.0)
            if abs(x - y) > SHARE_THRESHOLD:
                moved.append({"key": k, "label": labels[k], "a": x, "b": y})
    return {"settings": settings, "numbers": numbers, "shares": moved, "threshold": SHARE_THRESHOLD,
            "names": {"a": str(a), "b": str(b)}, "scenario_names": [sa.get("name"), sb.get("name")]}


# ---------------------------------------------------------------------------------------------- drawing

def _fmt(v: Any, unit: str) -> str:
    from fedsim.output.report import fmt_bytes, fmt_seconds

    if v is None:
        return "–"
    if unit == "acc":
        return f"{v:.4f}"
    if unit == "s":
        return fmt_seconds(v)
    if unit == "B":
        return fmt_bytes(v)
    if unit == "%":
        return f"{v:.1%}"
    return f"{v:.4g}"


def _intervals(run: Path, t_max: float) -> tuple[dict[tuple[int, str], tuple[np.ndarray, np.ndarray]],
                                                 tuple[np.ndarray, np.ndarray]]:
    """Per (client, phase) of the first :data:`ROWS` clients and for the server: the bars to draw, intervals
    closer than one pixel merged (so a page stays small however long the run)."""
    path = trace_path(run)
    parts: dict[tuple[int, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    srv: list[tuple[np.ndarray, np.ndarray]] = []
    if path.exists():
        for blk in iter_blocks(path, kinds=("download", "compute", "upload", "offline", "server"),
                               fields=("client", "start", "end")):
            if not len(blk):
                continue
            s, e = blk.num("start"), blk.num("end")
            if blk.kind == "server":
                ok = np.isfinite(s) & np.isfinite(e)
                srv.append((s[ok], e[ok]))
                continue
            c = blk.num("client")
            e = np.where(np.isfinite(e), e, t_max)  # (an offline spell that never ends)
            ok = np.isfinite(c) & (c < ROWS) & np.isfinite(s)
            for cl in np.unique(c[ok]).astype(int).tolist():
                m = ok & (c == cl)
                parts.setdefault((cl, blk.kind), []).append((s[m], e[m]))
    gap = t_max / PLOT_W if t_max > 0 else 0.0
    out = {}
    for key, lst in parts.items():
        out[key] = merge_intervals(np.concatenate([x for x, _ in lst]), np.concatenate([y for _, y in lst]), gap)
    ss = np.concatenate([x for x, _ in srv]) if srv else np.empty(0)
    se = np.concatenate([y for _, y in srv]) if srv else np.empty(0)
    return out, merge_intervals(ss, se, gap)


def _x(t: float, t_max: float) -> float:
    return _LEFT + (t / t_max * PLOT_W if t_max > 0 else 0.0)


def timelines_svg(runs: Sequence[tuple[str, Path, float]], t_max: float) -> str:
    """Both runs' timelines, one above the other, on the one time axis ``[0, t_max]``."""
    row, parts, y = 12, [], 18
    for name, run, t_end in runs:
        bars, (ss, se) = _intervals(run, t_max)
        clients = sorted({c for c, _ in bars})
        parts.append(f"<text x='4' y='{y + 9}' font-size='12' font-weight='bold'>{html.escape(name)}</text>")
        y += 14
        parts.append(f"<text x='{_LEFT - 6}' y='{y + 9}' font-size='10' text-anchor='end'>server</text>")
        for a, b in zip(ss.tolist(), se.tolist()):
            parts.append(f"<rect x='{_x(a, t_max):.2f}' y='{y + 1}' width='{max(_x(b, t_max) - _x(a, t_max), 0.5):.2f}' "
                         f"height='{row - 2}' fill='{_SERVER}'/>")
        y += row
        for c in clients:
            parts.append(f"<text x='{_LEFT - 6}' y='{y + 9}' font-size='10' text-anchor='end'>client {c}</text>")
            for phase, colour in _PHASES:
                s, e = bars.get((c, phase), (np.empty(0), np.empty(0)))
                for a, b in zip(s.tolist(), e.tolist()):
                    parts.append(f"<rect x='{_x(a, t_max):.2f}' y='{y + 1}' "
                                 f"width='{max(_x(b, t_max) - _x(a, t_max), 0.5):.2f}' height='{row - 2}' "
                                 f"fill='{colour}'><title>client {c}: {phase} {a:.6g}-{b:.6g} s</title></rect>")
            y += row
        end = _x(t_end, t_max)
        parts.append(f"<line x1='{end:.2f}' x2='{end:.2f}' y1='{y - row * (len(clients) + 1)}' y2='{y}' "
                     f"stroke='#e15759' stroke-dasharray='3,2'><title>{html.escape(name)} ends at {t_end:.6g} s"
                     "</title></line>")
        y += 10
    for f in (0, 0.25, 0.5, 0.75, 1.0):
        x = _x(f * t_max, t_max)
        parts.append(f"<line x1='{x:.2f}' x2='{x:.2f}' y1='{y}' y2='{y + 4}' stroke='#333'/>"
                     f"<text x='{x:.2f}' y='{y + 15}' font-size='10' text-anchor='middle'>{f * t_max:.4g} s</text>")
    y += 22
    return (f"<svg id='sbs-timelines' xmlns='http://www.w3.org/2000/svg' width='{_LEFT + PLOT_W + 20}' "
            f"height='{y}'>" + "".join(parts) + "</svg>")


def breakdown_svg(runs: Sequence[tuple[str, pd.DataFrame, float]]) -> str:
    """Each client's breakdown bar in each run, one under the other (shares of that run's own time)."""
    colours = {k: c for k, _, c in BREAKDOWN}
    labels = {k: lab for k, lab, _ in BREAKDOWN}
    ids = sorted(set().union(*[set(t.index[:ROWS].tolist()) for _, t, _ in runs]))[:ROWS]
    row, y, parts = 11, 4, []
    for c in ids:
        for i, (name, table, t_end) in enumerate(runs):
            label = f"client {c} · {'AB'[i] if len(runs) == 2 else name}"
            parts.append(f"<text x='{_LEFT - 6}' y='{y + 8}' font-size='9' text-anchor='end'>{html.escape(label)}</text>")
            x = float(_LEFT)
            if c in table.index and t_end > 0:
                for k in DRAW_ORDER:
                    v = float(table.loc[c, k])
                    if v <= 0:
                        continue
                    w = v / t_end * PLOT_W
                    parts.append(f"<rect x='{x:.2f}' y='{y + 1}' width='{max(w, 0.5):.2f}' height='{row - 2}' "
                                 f"fill='{colours[k]}'><title>{html.escape(name)}, client {c}: {labels[k]} "
                                 f"{v:.6g} s ({v / t_end:.1%})</title></rect>")
                    x += w
            y += row
        y += 4
    return (f"<svg id='sbs-breakdown' xmlns='http://www.w3.org/2000/svg' width='{_LEFT + PLOT_W + 20}' "
            f"height='{y + 4}'>" + "".join(parts) + "</svg>")


def _value(v: Any) -> str:
    return html.escape(json.dumps(v) if not isinstance(v, str) else v)


def side_by_side(a: tuple[str, Path], b: tuple[str, Path], out: Path) -> dict[str, Any]:
    """Write ``report.html`` and ``differences.json`` comparing run ``a`` with run ``b`` (each a name and a
    run folder) into ``out``; returns the differences."""
    runs = [a, b]
    tables, t_ends = [], []
    for _, d in runs:
        data, table = _panels(d) if trace_path(d).exists() else (None, None)
        t_end = float(data["t_end"]) if data else float(run_numbers(d).get("virtual_time_s") or 0.0)
        tables.append(table if table is not None else pd.DataFrame(columns=list(DRAW_ORDER)))
        t_ends.append(t_end)
    shares = (breakdown_shares(tables[0], t_ends[0]), breakdown_shares(tables[1], t_ends[1]))
    diff = differences(a[1], b[1], shares)
    diff["names"] = {"a": a[0], "b": b[0]}
    write_text(out / "differences.json", json.dumps(diff, indent=1, default=str) + "\n")
    t_max = max(t_ends) if max(t_ends) > 0 else 1.0

    def link(d: Path) -> str:
        """Its status (a run that did not finish says so) and a link to its own report."""
        status = _summary(d).get("status") or "no summary (killed, or still running)"
        rel = Path(os.path.relpath(d / "report.html", out)).as_posix()
        own = f", <a href='{html.escape(rel)}'>its report</a>" if (d / "report.html").exists() else ""
        return f" (status: {html.escape(str(status))}{own})"

    items = []
    for s in diff["settings"]:
        items.append(f"<li class='sbs-setting' data-key='{html.escape(s['key'])}'>setting <code>{html.escape(s['key'])}"
                     f"</code>: {_value(s['a'])} → {_value(s['b'])}</li>")
    units = {k: u for k, _, u in NUMBERS}
    for n in diff["numbers"]:
        change = ""
        if n["a"] not in (None, 0) and n["b"] is not None:
            change = f" ({(n['b'] - n['a']) / abs(n['a']):+.1%})"
        items.append(f"<li class='sbs-number' data-key='{n['key']}'>{html.escape(n['label'])}: "
                     f"{_fmt(n['a'], units[n['key']])} → {_fmt(n['b'], units[n['key']])}{change}</li>")
    for s in diff["shares"]:
        items.append(f"<li class='sbs-share' data-key='{s['key']}'>breakdown share “{html.escape(s['label'])}”: "
                     f"{s['a']:.1%} → {s['b']:.1%} ({100 * (s['b'] - s['a']):+.1f} points)</li>")
    listed = ("<ul id='sbs-differences'>" + "".join(items) + "</ul>") if items else \
        "<p id='sbs-differences' class='sbs-none'>No differences: the same settings and the same outcome.</p>"
    na, nb = run_numbers(a[1]), run_numbers(b[1])
    rows = "".join(f"<tr{' class=differ' if _differ(na.get(k), nb.get(k)) else ''}><th>{html.escape(lab)}</th>"
                   f"<td>{_fmt(na.get(k), u)}</td><td>{_fmt(nb.get(k), u)}</td></tr>" for k, lab, u in NUMBERS)
    labels = {k: lab for k, lab, _ in BREAKDOWN}
    colours = {k: c for k, _, c in BREAKDOWN}
    share_rows = "".join(
        f"<tr{' class=differ' if abs(shares[0][k] - shares[1][k]) > SHARE_THRESHOLD else ''}><th>"
        f"<i style='background:{colours[k]}'></i>{html.escape(labels[k])}</th><td>{shares[0][k]:.1%}</td>"
        f"<td>{shares[1][k]:.1%}</td><td>{100 * (shares[1][k] - shares[0][k]):+.1f}</td></tr>" for k in DRAW_ORDER)
    legend = "".join(f"<span><i style='background:{c}'></i>{p}</span>" for p, c in (*_PHASES, ("server busy", _SERVER)))
    name_a, name_b = html.escape(a[0]), html.escape(b[0])
    page = f"""<!doctype html><html><head><meta charset='utf-8'><title>fedsim compare: {name_a} vs {name_b}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1040px}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:2px 8px;text-align:right;font-size:13px}}th{{text-align:left;font-weight:normal}}
tr.differ td{{background:#fff3c4}}.hint{{color:#555;font-size:13px}}i{{display:inline-block;width:10px;height:10px;
margin:0 4px 0 8px}}svg{{display:block;margin:6px 0}}#sbs-differences li{{margin:2px 0}}</style></head><body>
<h1>{name_a} <span class='hint'>(A)</span> vs {name_b} <span class='hint'>(B)</span></h1>
<p class='hint'>A: <code>{html.escape(str(a[1]))}</code>{link(a[1])}<br>B: <code>{html.escape(str(b[1]))}</code>{link(b[1])}</p>
<h2 id='differences'>Differences</h2><p class='hint'>Settings: the two resolved scenario.yaml files, key by key.
Numbers: summary.json's, named when they differ. Breakdown shares: a label's seconds over all clients' time,
named when it moved by more than {SHARE_THRESHOLD:.0%} points. Also in differences.json.</p>{listed}
<h2 id='numbers'>The numbers</h2><table><tr><th></th><th>A</th><th>B</th></tr>{rows}</table>
<h2 id='timelines'>Timelines on one time axis</h2><p class='hint'>The server (busy) and the first {ROWS} clients of
each run, from 0 to the longer run's end ({t_max:.6g} s); a dashed line marks where each run ended. Bars closer
than a pixel are drawn as one; hover a bar for its times.</p><div>{legend}</div>
{timelines_svg([(a[0] + ' (A)', a[1], t_ends[0]), (b[0] + ' (B)', b[1], t_ends[1])], t_max)}
<h2 id='breakdown'>Per-client time breakdown</h2><p class='hint'>Where each client's time went, as in each run's own
report (each bar is that run's whole time); A above B for every client. Shares of all clients' time:</p>
<table><tr><th></th><th>A</th><th>B</th><th>B − A (points)</th></tr>{share_rows}</table>
{breakdown_svg([('A', tables[0], t_ends[0]), ('B', tables[1], t_ends[1])])}
</body></html>
"""
    write_text(out / "report.html", page)
    return diff
