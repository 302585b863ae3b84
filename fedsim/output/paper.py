"""A finished run's figures for a paper (``fedsim figures RUN``): matplotlib at a column's width.

Why apart from the run: a run writes its figures as SVG directly (:mod:`fedsim.output.svg_figures`), which
costs milliseconds; matplotlib's import and drawing cost seconds, so they are paid only when a paper
figure is asked for.  The drawers are the run figures' matplotlib versions in :mod:`fedsim.output.report`
(accuracy, timeline, link rates, server queue, sub-model heat map, energy), drawn inside
:func:`fedsim.output.report.paper_style`: single column 3.5 in or a page's two columns 7.16 in wide,
7-9 pt text, vector PDF and SVG, 300-dpi PNG.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from fedsim.errors import ConfigError
from fedsim.files import BUILDING
from fedsim.sim.trace import trace_path

#: Figure widths in inches: a single column and a page (two columns) of a two-column paper (IEEE's).
WIDTHS = {"column": 3.5, "page": 7.16}

#: The formats ``fedsim figures`` writes.
FORMATS = ("png", "pdf", "svg")

#: The resolution of the PNGs.
PNG_DPI = 300

#: Statuses of a run whose outputs can be drawn (its simulation ended and wrote what it had).
FINISHED = ("ok", "diverged", "interrupted", "outputs_failed", "outputs_interrupted", "error")


def finished_run(run_dir: str | Path) -> Path:
    """``run_dir`` if it is one finished run's folder; a :class:`~fedsim.errors.ConfigError` naming what is
    missing otherwise (no folder, no summary.json, a run still running or building its outputs, a folder
    of several runs, no trace and no metrics)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError("RUN", f"no run folder at '{run}'")
    summary = run / "summary.json"
    if not summary.exists():
        raise ConfigError("RUN", f"'{run}' has no summary.json: not a finished fedsim run (still running, or not a "
                                 "run folder)")
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError("RUN", f"'{summary}' cannot be read ({exc})") from None
    if isinstance(data, list):
        subs = sorted(d.name for d in run.iterdir() if (d / "summary.json").exists())
        raise ConfigError("RUN", f"'{run}' holds several runs; give one of them (e.g. {run / subs[0]})"
                          if subs else f"'{run}' holds several runs' summaries but no run folders")
    status = data.get("status") if isinstance(data, dict) else None
    if status not in FINISHED:
        what = "its outputs are still being built" if status == BUILDING else f"its status is {status!r}"
        raise ConfigError("RUN", f"'{run}' is not a finished run: {what} (allowed: a run whose summary says one "
                                 f"of {', '.join(FINISHED)})")
    if not trace_path(run).exists() and not (run / "metrics.csv").exists():
        raise ConfigError("RUN", f"'{run}' has neither a trace nor metrics.csv: nothing to draw")
    return run


def paper_figures(run_dir: str | Path, out: str | Path | None = None, *, formats: Sequence[str] = FORMATS,
                  width: str = "column", timeline_clients: int = 30) -> list[Path]:
    """Draw a finished run's figures for a paper into ``out`` (default ``RUN/figures``), each in every one
    of ``formats``, ``width`` (``column`` or ``page``, :data:`WIDTHS`) wide; returns the files written.  A
    figure the run has nothing for (no server, no sub-models) is left out."""
    from fedsim.output import report
    from fedsim.output.figures import OutputBuild

    run = finished_run(run_dir)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError("--format", f"got {' '.join(bad) or 'nothing'} (allowed: {', '.join(FORMATS)})")
    if width not in WIDTHS:
        raise ConfigError("--width", f"got {width!r} (allowed: {', '.join(WIDTHS)})")
    dest = Path(out) if out is not None else run / "figures"
    dest.mkdir(parents=True, exist_ok=True)
    build = OutputBuild(run, timeline_clients=timeline_clients)  # the run's inputs, each read once
    drawers: list[tuple[str, Callable[[Path], object]]] = []
    m = build.metrics
    if m is not None:
        for column, name in (("accuracy", "accuracy_vs_time"), ("loss", "loss_vs_time")):
            if column in m and len(m) and m[column].notna().any():
                drawers.append((name, lambda p, column=column: report.accuracy_figure({run.name: m}, p, column=column)))
                break
    digest, panels = build.digest, build.panels
    if digest is not None:
        if digest.clients or digest.has_server:
            drawers.append(("timeline", lambda p: report.timeline_figure(
                digest, p, max_clients=timeline_clients, rounds=panels.round_table() if panels is not None else None,
                workers=build.workers)))
        drawers += [("link_rates", lambda p: report.link_rate_figure(digest, p)),
                    ("server_queue", lambda p: report.server_queue_figure(digest, p)),
                    ("submodel_heatmap", lambda p: report.submodel_figure(digest, p, build.device_classes))]
    energy = build.energy
    if energy is not None:
        drawers.append(("energy", lambda p: report.energy_figure(energy, p)))
    written: list[Path] = []
    with report.paper_style(WIDTHS[width], PNG_DPI):
        for name, draw in drawers:
            for fmt in formats:
                p = dest / f"{name}.{fmt}"
                if draw(p) is False:
                    break  # nothing to draw for this run
                written.append(p)
    return written
