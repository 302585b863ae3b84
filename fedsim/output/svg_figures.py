"""A run's figures as SVG, written directly (:mod:`fedsim.output.svg`): what every run writes by default.

One drawer per run figure, taking what its matplotlib twin in :mod:`fedsim.output.report` takes
(``accuracy_figure``, ``timeline_figure``, ...) and drawing the same quantities with the same colours
and rules; the matplotlib versions are drawn for a paper on request (``fedsim figures RUN``).  Why two:
a run's default outputs must cost little next to a short simulation, and matplotlib's import and drawing
cost seconds.  This module never imports matplotlib.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedsim.output.digest import PAYLOADS, SERVER, TraceDigest, binned_queue, digest_trace, timeline_digest
from fedsim.output.style import (ENERGY_PARTS, PHASE_COLOURS, PNG_MAX_ROUND_LINES, QUEUE_STEP_MAX, TIMELINE_COLOURS,
                                 busy_share, fmt_seconds, linear_bins, submodel_table, timeline_codes)
from fedsim.output.svg import Figure, colour_map, nice_ticks, padded, text_width

#: Pixel columns of the timeline's plot: each is painted by the rule of :func:`timeline_svg`.
TIMELINE_COLUMNS = 800

#: Height of one timeline row in px.
TIMELINE_ROW_PX = 18.0

#: Tab-10 colours for the lines of several labelled runs on one accuracy figure.
LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf")


def accuracy_svg(metrics: dict[str, pd.DataFrame], path: Path, title: str = "", column: str = "accuracy") -> None:
    """Test accuracy (or another metrics column) against virtual time, one line per labelled run, dots
    at the evaluations (:func:`fedsim.output.report.accuracy_figure`'s figure)."""
    accuracy_drawing(metrics, title, column).save(path)


def accuracy_drawing(metrics: dict[str, pd.DataFrame], title: str = "", column: str = "accuracy") -> Figure:
    """:func:`accuracy_svg`'s drawing, unsaved (a folder's report embeds it without writing a file)."""
    series = {k: (pd.to_numeric(m["t"], errors="coerce").to_numpy(dtype=float),
                  pd.to_numeric(m[column], errors="coerce").to_numpy(dtype=float))
              for k, m in metrics.items() if len(m) and column in m and "t" in m}
    xs = np.concatenate([v[0] for v in series.values()]) if series else np.empty(0)
    ys = np.concatenate([v[1] for v in series.values()]) if series else np.empty(0)
    ok = np.isfinite(xs) & np.isfinite(ys)
    xlim = padded(float(xs[ok].min()), float(xs[ok].max())) if ok.any() else (0.0, 1.0)
    ylim = padded(float(ys[ok].min()), float(ys[ok].max())) if ok.any() else (0.0, 1.0)
    n = len(series)
    legend_h = 0 if n <= 8 else 14 * ((n + 2) // 3) + 10  # many runs: the legend below, in three columns
    fig = Figure(640, 420 + legend_h, name="accuracy")
    top = 40 if title else 20
    ax = fig.axes((72, top, 548, 420 - top - 60), xlim, ylim)
    for i, (name, (x, y)) in enumerate(series.items()):
        ax.line(x, y, LINE_COLOURS[i % len(LINE_COLOURS)], label=str(name), markers=True,
                dash="" if i < len(LINE_COLOURS) else "5 2")
    ax.frame(xlabel="virtual time (s)", ylabel=f"test {column}", title=title, grid=True)
    if n <= 8:
        ax.legend(where="lower right" if column == "accuracy" else "upper right")
    else:
        ax.legend(where="below", columns=3, size=9)
    return fig


def timeline_svg(trace: pd.DataFrame | TraceDigest, path: Path, *, max_clients: int = 30,
                 until: float | None = None, since: float = 0.0, rounds: dict[str, Any] | None = None,
                 workers: float = 1.0) -> None:
    """The per-client timeline (:func:`fedsim.output.report.timeline_figure`'s, same rules): the server on
    the top row drawn by its busy share per column (a bar as tall as the share of the column's time its
    ``workers`` were busy, so the row's painted area over its area is the utilisation), then one row per
    client, each of :data:`TIMELINE_COLUMNS` columns painted with the phase that covers most of it (or
    left empty where idle time wins).  Each rectangle carries its phase in ``data-kind``; split learning's
    payloads have their own colour; round starts, stragglers and drops are marked as in the PNG."""
    digest = timeline_digest(trace, since=since, until=until, max_clients=max_clients)
    all_clients = sorted(digest.clients)
    clients = all_clients[:max_clients]
    rows = [SERVER] + clients if (all_clients or digest.has_server) else []
    end = digest.timeline_end() if rows else since + 1.0
    if not end > since:
        end = since + 1e-9
    durations = digest.timeline_means() if rows else {}
    n_rows = max(len(rows), 1)
    label_w = max([text_width(f"client {c}", 10) for c in clients] + [40.0]) + 14
    left, top = label_w + 10, 58
    width = float(TIMELINE_COLUMNS)
    height = TIMELINE_ROW_PX * n_rows
    legend = list(PHASE_COLOURS) + [k for k in PAYLOADS if k in durations]
    names = {"download": "download", "compute": "compute", "upload": "upload", "wait": "queue wait",
             "server": "server", "offline": "offline", "activations": "activations (upload)",
             "gradients": "gradients (download)"}
    labels = [names[k] + (" (0 s: ideal link)" if durations.get(k) == 0 and k in ("download", "upload", *PAYLOADS)
                          else f" (mean {fmt_seconds(durations[k])})" if k in durations and k != "offline" else "")
              for k in legend]
    entries = [("box", TIMELINE_COLOURS[k], t) for k, t in zip(legend, labels)]
    fig = Figure(left + width + 20, top + height + 60 + 17 * ((len(entries) + 3) // 3 + 1), name="timeline")
    ax = fig.axes((left, top, width, height), (since, end), (n_rows - 0.5, -0.5))
    if rows:
        columns = TIMELINE_COLUMNS
        codes = timeline_codes(digest.png, digest.timeline_cover(), rows, since, end, columns)
        edges = np.linspace(since, end, columns + 1)
        kinds = list(TIMELINE_COLOURS)
        colours = list(TIMELINE_COLOURS.values())
        x0s: list[np.ndarray] = []
        x1s: list[np.ndarray] = []
        y0s: list[np.ndarray] = []
        ks: list[np.ndarray] = []
        for i in range(1, len(rows)):
            row = codes[i]
            starts = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]]))
            stops = np.concatenate([starts[1:], [columns]])
            keep = row[starts] != len(kinds)
            x0s.append(edges[starts[keep]])
            x1s.append(edges[stops[keep]])
            y0s.append(np.full(int(keep.sum()), float(i)))
            ks.append(row[starts[keep]])
        if x0s and sum(len(a) for a in x0s):
            k = np.concatenate(ks).tolist()
            y = np.concatenate(y0s)
            ax.rects(np.concatenate(x0s), np.concatenate(x1s), y - 0.4, y + 0.4, [colours[j] for j in k],
                     cls="phases", kinds=[kinds[j] for j in k])
        share = busy_share(digest.png.columns(("server", SERVER), since, end, columns), (end - since) / columns,
                           workers)
        h = np.round(share * 0.8, 4)  # a vector drawing: exact heights (to 0.005% of a row), no pixel rounding
        starts = np.flatnonzero(np.concatenate([[True], h[1:] != h[:-1]]))
        stops = np.concatenate([starts[1:], [columns]])
        keep = h[starts] > 0
        if keep.any():
            hs = h[starts[keep]]
            ax.rects(edges[starts[keep]], edges[stops[keep]], 0.4 - hs, np.full(len(hs), 0.4),
                     PHASE_COLOURS["server"], cls="server-share")
        if rounds:
            entries += _rounds(ax, rounds, clients, since, end)
    ax.frame(xlabel="virtual time (s)", yticks=list(range(len(rows))),
             yticklabels=["server"] + [f"client {c}" for c in clients] if rows else [], tick_size=10)
    title = "who computes, transmits and waits"
    if rows:
        shown = f"all {len(all_clients)} clients" if len(clients) == len(all_clients) else \
            f"clients {clients[0]}–{clients[-1]} ({len(clients)} of {len(all_clients)})"
        fig.text(left + width / 2, 18, title, size=13, anchor="middle", cls="title")
        fig.text(left + width / 2, 34, f"{shown}, virtual time {since:.4g}–{end:.4g} s; each column of a client "
                 "shows the phase that fills most of it,", size=10, anchor="middle")
        fig.text(left + width / 2, 47, "the server's bar height its busy share (utilisation)", size=10,
                 anchor="middle")
    else:
        fig.text(left + width / 2, 24, title + " (no client or server activity in the trace)", size=13,
                 anchor="middle", cls="title")
    ax.legend(where="below", columns=3, entries=entries)
    fig.save(path)


def _rounds(ax: Any, rounds: dict[str, Any], clients: list[int], t0: float, t1: float) -> list[tuple[str, str, str]]:
    """Round starts (dashed lines, up to :data:`~fedsim.output.style.PNG_MAX_ROUND_LINES`), each round's
    straggler finishing (▼) and drops (×), as ``timeline.png``'s; returns their legend entries."""
    row = {c: i + 1 for i, c in enumerate(clients)}
    out: list[tuple[str, str, str]] = []
    rs = [float(r["start"]) for r in rounds.get("rounds", []) if r["start"] is not None and t0 <= float(r["start"]) <= t1]
    if rs and len(rs) <= PNG_MAX_ROUND_LINES:
        ax.vlines(rs, "#556")
        out.append(("dash", "#556", "round start"))
    done = [(float(r["straggler_done"]), row.get(r["straggler"], 0)) for r in rounds.get("rounds", [])
            if r.get("straggler") is not None and r.get("straggler_done") is not None
            and t0 <= float(r["straggler_done"]) <= t1]
    if done:
        ax.points([d[0] for d in done], [d[1] for d in done], "v", "#c9a100")
        out.append(("v", "#c9a100", "round's straggler finishes"))
    drops = [(float(d["t"]), row.get(d["client"], 0)) for d in rounds.get("drops", [])
             if isinstance(d.get("t"), (int, float)) and t0 <= d["t"] <= t1]
    if drops:
        ax.points([d[0] for d in drops], [d[1] for d in drops], "x", "#d62728")
        out.append(("x", "#d62728", "dropped"))
    return out


def rate_bins(positive: np.ndarray, n: int = 40) -> tuple[np.ndarray, bool]:
    """The link-rate histogram's bin edges over the positive rates and whether the axis is logarithmic:
    geometric bins where the rates span more than a decade, else ``n`` linear bins (or one bar 10% wide
    around rates that are one value up to rounding, :func:`fedsim.output.style.linear_bins`)."""
    lo, hi = float(positive.min()), float(positive.max())
    if hi > 10.0 * lo:
        return np.geomspace(lo, hi * (1 + 1e-9), n + 1), True
    bins = linear_bins(positive, n)
    return (np.histogram_bin_edges(positive, bins) if isinstance(bins, int) else np.asarray(bins)), False


def link_rate_svg(trace: pd.DataFrame | TraceDigest, path: Path) -> bool:
    """Distribution of the achieved rate of every transfer (bits / airtime), per direction, on shared bins
    (:func:`rate_bins`); False (nothing drawn) when no transfer records a rate."""
    digest = trace if isinstance(trace, TraceDigest) else digest_trace(trace)
    if not digest.has_rates:
        return False
    rates = {k: v / 1e6 for k, v in digest.link_rates().items()}
    positive = np.concatenate([v[v > 0] for v in rates.values()])
    if not len(positive):
        return False
    edges, log = rate_bins(positive)
    counts = {k: np.histogram(v[v > 0], bins=edges)[0] for k, v in rates.items()}
    top = max(float(c.max()) for c in counts.values() if len(c)) if counts else 1.0
    fig = Figure(640, 420, name="link_rates")
    ax = fig.axes((72, 36, 548, 320), (float(edges[0]), float(edges[-1])), (0.0, max(top, 1.0) * 1.05), xlog=log)
    for kind in ("upload", "download"):
        r = rates[kind]
        r = r[r > 0]
        if len(r):
            ax.hist(r, edges, PHASE_COLOURS[kind], label=f"{kind} ({len(r)} transfers)")
    ax.frame(xlabel="achieved rate (Mbit/s" + (", log scale)" if log else ")"), ylabel="transfers",
             title="link-rate distribution", yticks=[t for t in nice_ticks(0, max(top, 1.0) * 1.05) if t == int(t)])
    ax.legend()
    fig.save(path)
    return True


def server_queue_svg(trace: pd.DataFrame | TraceDigest, path: Path) -> bool:
    """Requests waiting at the server against virtual time (:func:`fedsim.output.report.server_queue_figure`'s
    rules: the step function up to :data:`~fedsim.output.style.QUEUE_STEP_MAX` changes, else per bin the
    time average as a line and the largest length as a band; the run's time average dashed; a server that
    never queued says so).  False when the trace has no server."""
    digest = trace if isinstance(trace, TraceDigest) else digest_trace(trace)
    if not digest.has_server:
        return False
    server = digest.server_frame()
    q = digest.queue()
    t0 = 0.0
    t1 = digest.server_end_max if np.isfinite(digest.server_end_max) else 0.0
    t1 = max(t1, float(q["t"].max()) if len(q) else 0.0, t0 + 1e-9)
    top = max(float(q["queue"].max()) if len(q) else 0.0, 1.0)
    fig = Figure(700, 330, name="server_queue")
    ax = fig.axes((64, 52, 616, 220), (t0, t1), (-0.05 * top, top * 1.1))
    colour = PHASE_COLOURS["server"]
    _, mean_all, _ = binned_queue(q, t0, t1, bins=1)
    how = ""
    if len(q) <= QUEUE_STEP_MAX:
        xs = np.concatenate([q["t"].to_numpy(dtype=float), [t1]]) if len(q) else np.array([t0, t1])
        ys = np.concatenate([q["queue"].to_numpy(dtype=float), q["queue"].to_numpy(dtype=float)[-1:]]) if len(q) \
            else np.zeros(2)
        ax.step(xs, ys, colour, label="requests waiting")
    else:
        edges, mean, peak = binned_queue(q, t0, t1)
        ax.band(edges, peak, colour, label="largest in the bin")
        ax.line((edges[:-1] + edges[1:]) / 2, mean, colour, width=1.2, label="time average in the bin")
        how = f" ({len(q):,} changes in bins of {fmt_seconds((t1 - t0) / len(mean))})"
    ax.hline(float(mean_all[0]), "#000", label=f"time average over the run: {float(mean_all[0]):.3g}")
    step = max(1, int(np.ceil(top / 6)))
    waits = server["wait"].to_numpy(dtype=float)
    ax.frame(xlabel="virtual time (s)", ylabel="requests waiting", yticks=list(range(0, int(top) + 1, step)),
             title=f"server queue{how}\nmean wait {fmt_seconds(float(np.nanmean(waits)) if len(waits) else 0.0)}, "
                   f"max {fmt_seconds(float(np.nanmax(waits, initial=0.0)))}, {len(server):,} requests")
    if not np.nanmax(waits, initial=0.0) > 0:
        ax.note(f"the server never queued: each of the {len(server):,} requests\nwas served on arrival "
                "(no request waited)", size=10)
    else:  # the legend where the queue is low: a busy run's steps fill the upper right
        right = q["t"].to_numpy(dtype=float) >= t0 + 0.6 * (t1 - t0)
        busy_right = bool(right.any()) and float(q["queue"].to_numpy(dtype=float)[right].max()) > 0.6 * top
        ax.legend(size=9, where="lower right" if busy_right else "upper right")
    fig.save(path)
    return True


def energy_svg(energy: pd.DataFrame, path: Path) -> bool:
    """Joules per device class (:func:`fedsim.output.report.energy_figure`'s): left, totals stacked by
    compute, transmit, receive and idle; right, the active part alone with its share of the total over
    each bar.  False for no energy table."""
    if energy.empty or "device_class" not in energy:
        return False
    cols = [c for c in ENERGY_PARTS if c in energy]
    per = energy.groupby("device_class")[cols].sum()
    counts = energy.groupby("device_class").size()
    active = [c for c in cols if c != "idle_j"]
    total = per[cols].to_numpy().sum(axis=1)
    act = per[active].to_numpy().sum(axis=1) if active else np.zeros(len(per))
    ticks = [f"{c} ({int(counts[c])} devices)" for c in per.index]
    n = len(per)
    fig = Figure(980, 430, name="energy")
    x = np.arange(n, dtype=float)
    for i, (which, title, ylabel, tops) in enumerate(((cols, "all energy (totals)", "energy, all devices of the class (J)",
                                                       total),
                                                      (active, "active energy only", "active energy (J)", act))):
        ymax = float(np.max(tops, initial=0.0))
        ymax = (ymax * (1.3 if i else 1.05)) if ymax > 0 else 1.0
        ax = fig.axes((160 + i * 440, 56, 330, 250), (-0.6, n - 0.4), (0.0, ymax))
        bottom = np.zeros(n)
        for c in which:
            v = per[c].to_numpy(dtype=float)
            ax.rects(x - 0.4, x + 0.4, bottom, bottom + v, ENERGY_PARTS[c][1], label=ENERGY_PARTS[c][0], cls="stack")
            bottom = bottom + v
        if i:
            for j, (a, t) in enumerate(zip(act.tolist(), total.tolist())):
                if t > 0:
                    ax.front.append(fig.text_svg(float(ax.x(j)), float(ax.y(a)) - 3, f"{a / t:.1%} of total", size=9,
                                                 anchor="middle", cls="share"))
        ax.frame(ylabel=ylabel, title=title, xticks=list(range(n)), xticklabels=ticks, xtick_rotate=20, tick_size=9)
        if not i:  # one legend: the right plot's colours are the left's
            ax.legend(size=9)
    idle_share = float(per["idle_j"].sum() / total.sum()) if "idle_j" in per and total.sum() > 0 else 0.0
    fig.text(490, 20, f"energy per device class: idle is {idle_share:.1%} of the total", size=13, anchor="middle",
             cls="title")
    fig.save(path)
    return True


def submodel_svg(trace: pd.DataFrame | TraceDigest, path: Path, classes: dict[int, str] | None = None) -> bool:
    """Heat map of the kept fraction of each block (rows) per client (columns), mean over the client's
    tasks, on viridis from 0 to 1 with its colour bar (:func:`fedsim.output.report.submodel_figure`'s).
    False when no dispatch carried a sub-model."""
    table = trace.submodel_table() if isinstance(trace, TraceDigest) else submodel_table(trace)
    if table.empty:
        return False
    grid = table.T  # blocks x clients
    n_blocks, n_clients = grid.shape
    cell = max(6.0, min(24.0, 760.0 / n_clients))
    label_w = max(text_width(str(b), 10) for b in grid.index) + 16
    width = cell * n_clients
    height = 22.0 * n_blocks
    cols = list(grid.columns)
    names = [f"{c}" + (f" {classes[c]}" if classes and c in classes else "") for c in cols]
    tick_h = max(text_width(s, 8) for s in names) + 14
    fig = Figure(label_w + width + 110, 40 + height + tick_h + 30, name="submodel_heatmap")
    ax = fig.axes((label_w, 40, width, height), (-0.5, n_clients - 0.5), (n_blocks - 0.5, -0.5))
    ax.heatmap(grid.to_numpy(dtype=float))
    step = max(1, n_clients // 60)
    ax.frame(xticks=list(range(0, n_clients, step)), xticklabels=names[::step], xtick_rotate=90, tick_size=8,
             yticks=list(range(n_blocks)), yticklabels=[str(b) for b in grid.index])
    fig.text(label_w + width / 2, 40 + height + tick_h + 18, "client (device class)", size=11, anchor="middle")
    fig.text(label_w + width / 2, 22, "which part of the model each client trains (kept fraction per block)",
             size=12, anchor="middle", cls="title")
    bar = fig.axes((label_w + width + 20, 40, 14, height), (0.0, 1.0), (0.0, 1.0))
    levels = np.linspace(0.0, 1.0, 51)
    bar.rects(np.zeros(50), np.ones(50), levels[:-1], levels[1:], colour_map((levels[:-1] + levels[1:]) / 2),
              cls="colourbar")
    bar.frame(xticks=[], yticks=[0.0, 0.25, 0.5, 0.75, 1.0], tick_size=9, yticks_right=True)
    x = label_w + width + 76
    fig.parts_text.append(f"<text x='{x:.2f}' y='{40 + height / 2:.2f}' font-size='10' text-anchor='middle' "
                          f"transform='rotate(-90 {x:.2f} {40 + height / 2:.2f})'>kept fraction</text>")
    fig.save(path)
    return True


__all__ = ["accuracy_svg", "timeline_svg", "link_rate_svg", "server_queue_svg", "energy_svg", "submodel_svg",
           "rate_bins", "accuracy_drawing"]
