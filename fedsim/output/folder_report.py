"""report.html of a sweep or ``--seeds`` folder: the grid's or the seeds' table, their figures, every run's
accuracy curve on one virtual-time axis and a link to every run's report (which links back up).

Above both :mod:`fedsim.output.report` (its table style; the accuracy figure is :mod:`fedsim.output.svg_figures`'s) and :mod:`fedsim.output.panels` (the glossary, the
page's style and the "up" links) in the import graph; :mod:`fedsim.sweep` calls it when a sweep or a
``--seeds`` command finishes.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from fedsim.files import write_text
from fedsim.output.report import PAGE_CSS, TABLE_CSS, table_html
from fedsim.output.panels import PANELS_CSS, glossary_html, link_up


#: The figure files a folder's report embeds, by suffix: their media type.
MEDIA = {".png": "image/png", ".svg": "image/svg+xml"}


def folder_report(out: str | Path, kind: str) -> Path:
    """``report.html`` of a sweep (``kind='sweep'``) or ``--seeds`` (``kind='seeds'``) folder: its table with
    a link to every run's report, its figures (the grid's heat maps or line plot, the seeds' curves), the
    accuracy curves of every run on one virtual-time axis, and the glossary.  Self-contained like a run's."""
    import base64
    from urllib.parse import quote

    out = Path(out)
    title = {"sweep": "fedsim sweep", "seeds": "fedsim --seeds"}[kind]
    runs = sorted({p.parent for p in out.glob("**/summary.json") if p.parent != out and (p.parent / "report.html").exists()}
                  | {p.parent for p in out.glob("**/report.html") if p.parent != out})
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}: {html.escape(out.name)}</title>",
             "<style>" + PAGE_CSS + TABLE_CSS + PANELS_CSS + "</style></head><body>",
             f"<h1>{title}: {html.escape(out.name)}</h1>",
             "<nav class='fp-nav'><a href='#fp-runs'>runs</a> · <a href='#fp-figures'>figures</a> · "
             "<a href='#glossary'>glossary</a></nav>"]
    csv = out / ("sweep.csv" if kind == "sweep" else "seeds_summary.csv")
    if csv.exists():
        table = pd.read_csv(csv)
        parts.append(f"<h2>{'Grid' if kind == 'sweep' else 'Across seeds'} ({csv.name})</h2>" + table_html(table))
    parts.append("<h2 id='fp-runs'>Every run</h2><ul class='runs'>")
    for r in runs:
        rel = r.relative_to(out).as_posix()
        parts.append(f"<li><a href='{html.escape(quote(rel))}/report.html'>{html.escape(rel)}</a>" +
                     _run_line(r) + "</li>")
    parts.append("</ul>")
    curves = {}
    for r in runs:
        m = r / "metrics.csv"
        if m.exists():
            frame = pd.read_csv(m)
            if len(frame) and "accuracy" in frame and frame["accuracy"].notna().any():
                curves[r.relative_to(out).as_posix()] = frame
    figs: list[tuple[str, str, bytes]] = [(f.stem, MEDIA[f.suffix], f.read_bytes()) for f in sorted(out.iterdir())
                                          if f.suffix in MEDIA and f.is_file()]
    if curves and len(curves) <= 40:  # drawn in memory as SVG: the folder gets no file besides report.html
        from fedsim.output.svg_figures import accuracy_drawing

        text = accuracy_drawing(curves, title="every run: test accuracy against virtual time").render()
        figs.insert(0, ("every run's accuracy", MEDIA[".svg"], text.encode("utf-8")))
    if figs:
        parts.append("<h2 id='fp-figures'>Figures</h2>")
    for name, media, data in figs:
        data64 = base64.b64encode(data).decode("ascii")
        parts.append(f"<h3>{html.escape(name.replace('_', ' '))}</h3><img alt='{html.escape(name)}' "
                     f"src='data:{media};base64,{data64}'>")
    parts.append(glossary_html() + "</body></html>")
    path = out / "report.html"
    write_text(path, "\n".join(parts))
    # every run's page links up to the nearest folder page above it (a multi-algorithm run's, or this one)
    for r in runs:
        up = r.parent
        while up != out and not (up / "report.html").exists():
            up = up.parent
        link_up(up, [r / "report.html"])
    return path


def _run_line(run: Path) -> str:
    p = run / "summary.json"
    if not p.exists():
        return ""
    try:
        s = json.loads(p.read_text(encoding="utf-8"))
    except ValueError:
        return ""
    rows = s if isinstance(s, list) else [s]
    bits = []
    for r in rows:
        if not isinstance(r, dict):
            continue
        acc = r.get("final_accuracy")
        bits.append(f"{html.escape(str(r.get('label', '')))} {r.get('status', '')}" +
                    (f", final accuracy {acc:.4f}" if isinstance(acc, (int, float)) else ""))
    return (": " + "; ".join(bits)) if bits else ""

