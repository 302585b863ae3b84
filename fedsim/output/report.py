"""Figures every run writes: accuracy against virtual time, and the per-client timeline.

The timeline is the picture that teaches FL systems: one row per client, coloured bars for download,
compute, upload and server work, gaps where a client waits for the others.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # matplotlib is imported only where a matplotlib figure is drawn (never by a default run)
    from matplotlib.figure import Figure

from fedsim.output.digest import (INTERACTIVE_KINDS, PAYLOADS, SERVER, TraceDigest, binned_queue, digest_trace,
                                  dominant_rows, release_freed_memory, timeline_digest)
from fedsim.output.digest import queue_length  # noqa: F401  (re-exported: report.queue_length)
from fedsim.files import BUILDING, write_text, writing
from fedsim.output.style import (ENERGY_PARTS, PHASE_COLOURS, PNG_MAX_ROUND_LINES, PURPOSE_BAR_COLOURS,  # noqa: F401
                                 QUEUE_STEP_MAX, TIMELINE_COLOURS, busy_share, fmt_seconds, submodel_table)
from fedsim.output.style import linear_bins as _linear_bins
from fedsim.output.style import timeline_codes as _timeline_codes
from fedsim.output import static_text
from fedsim.output.figures import (INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS, OutputBuild, figure_files,
                                   register_run_figure, run_figures_registered)
from fedsim.sim.trace import trace_path

#: The paper style figures are drawn in (:func:`paper_style`), or None: a figure's width (inches) and dpi.
_PAPER: ContextVar[tuple[float, int] | None] = ContextVar("fedsim_paper_style", default=None)

#: Font sizes (pt) a paper figure's text is held to (:func:`save_figure` under :func:`paper_style`).
PAPER_FONT_PT = (7.0, 9.0)


@contextmanager
def paper_style(width_in: float, dpi: int = 300) -> Iterator[None]:
    """Draw figures for a paper while inside: each :func:`new_figure` is ``width_in`` inches wide (its
    height scaled with it), text is held to :data:`PAPER_FONT_PT`, fonts are embedded as TrueType in PDF
    and kept as text in SVG, and :func:`save_figure` writes the format its path's suffix names (PNG at
    ``dpi``).  Why a context: the same drawers draw a run's paper figures (``fedsim figures``) at a
    column's width without a size argument threaded through each."""
    import matplotlib

    token = _PAPER.set((float(width_in), int(dpi)))
    try:
        with matplotlib.rc_context({"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7,
                                    "xtick.labelsize": 7, "ytick.labelsize": 7, "pdf.fonttype": 42,
                                    "svg.fonttype": "none", "lines.linewidth": 1.0, "lines.markersize": 3}):
            yield
    finally:
        _PAPER.reset(token)


def paper_width() -> float | None:
    """The paper style's figure width in inches, or None outside :func:`paper_style`."""
    style = _PAPER.get()
    return None if style is None else style[0]


def new_figure(nrows: int = 1, ncols: int = 1, *, paper_height: float | None = None,
               **kwargs: Any) -> tuple[Figure, Any]:
    """A figure and its axes, made without pyplot: nothing is registered with a GUI backend (so importing
    fedsim never changes the backend of a notebook's ``plt.show()``), and nothing has to be closed.  Under
    :func:`paper_style`, at the paper's width and dpi, ``paper_height`` inches high (default: the height
    scaled by the same factor, at least 1.6 in)."""
    from matplotlib.figure import Figure

    style = _PAPER.get()
    if style is not None:
        w, h = kwargs.get("figsize", (6.4, 4.8))
        kwargs["figsize"] = (style[0], paper_height or max(h * style[0] / w, 1.6))
        kwargs["dpi"] = style[1]
    fig = Figure(**kwargs)
    return fig, fig.subplots(nrows, ncols)


def save_figure(fig: Figure, path: str | Path, *, tight: bool = True, dpi: int = 120) -> None:
    """Write ``fig`` as a PNG (120 dpi unless given), laid out once (``tight_layout`` unless ``tight=False``,
    for a figure laid out already).  ``tight_layout`` leaves a placeholder layout engine on the figure, and
    with any engine set ``savefig`` first runs a whole draw of its own (unrendered, but every text measured
    again) before the one it writes: about a third of a simple figure's cost, for a layout that is fixed by
    then.  Dropping the engine skips that pass; the PNG is the same, byte for byte.  Under
    :func:`paper_style`: the path's suffix picks the format (png, pdf, svg), PNG at the style's dpi, and
    every text is held to :data:`PAPER_FONT_PT` before the layout."""
    style = _PAPER.get()
    fmt = "png"
    if style is not None:
        from matplotlib.text import Text

        lo, hi = PAPER_FONT_PT
        for t in fig.findobj(Text):
            t.set_fontsize(min(max(float(t.get_fontsize()), lo), hi))
        dpi = style[1]
        if isinstance(path, (str, Path)):
            fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if tight:
        fig.tight_layout()
    fig.set_layout_engine(None)
    if isinstance(path, (str, Path)):  # a file: recorded in its run's manifest, renamed into place whole
        with writing(path, "wb") as fh:
            fig.savefig(fh, dpi=dpi, format=fmt)
    else:
        fig.savefig(path, dpi=dpi)


def accuracy_figure(metrics: dict[str, pd.DataFrame], path: Path, title: str = "", column: str = "accuracy") -> None:
    """Test accuracy (or another metrics column, e.g. the loss of a regression task) against virtual time,
    one line per labelled run."""
    fig, ax = new_figure(figsize=(6, 4))
    for label, m in metrics.items():
        if len(m):
            ax.plot(m["t"], m[column], marker=".", label=label)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"test {column}")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend()
    save_figure(fig, path)


def timeline_figure(trace: pd.DataFrame | TraceDigest, path: Path, *, max_clients: int = 30,
                    until: float | None = None, since: float = 0.0, rounds: dict[str, Any] | None = None,
                    workers: float = 1.0) -> None:
    """Per-client timeline of download / compute / upload, queue wait at the server and the server's
    service: the server on the top row, then one row per client.

    ``trace``: a trace DataFrame, or the :class:`~fedsim.output.digest.TraceDigest` of one read with the same
    window and client count (what :func:`run_figures` passes, so a long trace is never held in memory).
    The window is ``[since, until]`` (default: the whole run).  Each pixel column of a client's row is
    painted with the phase that covers most of its time, or left empty where the row is mostly idle
    (:func:`fedsim.output.digest.dominant`, the rule report.html's timeline follows too): a bar is never widened,
    so 7 µs of compute cannot paint over 29 ms of upload, and a phase that takes a large share of the time
    takes a like share of the pixels.  The server's row is drawn by its busy share instead
    (:func:`busy_share`): each column a bar as tall as the share of its time the server's ``workers`` were
    busy, because a server serves many short requests, and one busy 35% of the time, spread evenly, would
    win no column by the dominant rule and look idle.  The rows are one collection of rectangles, drawn in
    one call.  ``workers``: the server's workers (summary.json's; its row's share is busy worker-seconds
    over the column's time x workers).  Split learning's activations and gradients (transfers whose
    ``what`` names them) are phases of their own, in :data:`PURPOSE_BAR_COLOURS` as in report.html at
    every zoom.  The legend gives each phase's mean duration ("0 s: ideal link" for transfers that take
    none).  ``rounds``: the rounds and drops to mark (:meth:`fedsim.output.panels.PanelStream.round_table`),
    see :func:`_draw_rounds`."""
    digest = timeline_digest(trace, since=since, until=until, max_clients=max_clients)
    from matplotlib.patches import Rectangle

    n_rows = min(max_clients, 30) + 1
    # at the dpi it is saved at, so that a column (and a row's height) measured here is one pixel of the PNG
    fig, ax = new_figure(figsize=(9, 0.25 * n_rows + 1.75), dpi=120, paper_height=0.12 * n_rows + 1.9)
    durations: dict[str, float] = {}
    marks: list[Any] = []
    note = ""
    all_clients = sorted(digest.clients)
    rows: list[int] = []
    end = since
    if all_clients or digest.has_server:
        clients = all_clients[:max_clients]
        rows = [SERVER] + clients
        end = digest.timeline_end()
        if not end > since:
            end = since + 1e-9
        durations = digest.timeline_means()
        ax.set_xlim(since, end)
        ax.set_ylim(len(clients) + 0.5, -0.5)  # the server on top, as in report.html
        ax.set_yticks(range(len(clients) + 1))
        ax.set_yticklabels(["server"] + [f"client {c}" for c in clients], fontsize=7)
        marks = _draw_rounds(ax, rounds, clients, since, end) if rounds else []
        shown = f"all {len(all_clients)} clients" if len(clients) == len(all_clients) else \
            f"clients {clients[0]}–{clients[-1]} ({len(clients)} of {len(all_clients)})"
        note = (f"\n{shown}, virtual time {since:.4g}–{end:.4g} s; each pixel column of a client shows the "
                f"phase that fills most of it,\nthe server's bar height its busy share (utilisation)")
    # split learning's payloads have their own colour (a legend entry when the shown rows carry them)
    legend = list(PHASE_COLOURS) + [k for k in PAYLOADS if k in durations]
    handles = [Rectangle((0, 0), 1, 1, color=TIMELINE_COLOURS[k]) for k in legend]
    names = {"download": "download", "compute": "compute", "upload": "upload", "wait": "queue wait",
             "server": "server", "offline": "offline", "activations": "activations (upload)",
             "gradients": "gradients (download)"}
    labels = [names[k] + ("\n(0 s: ideal link)" if durations.get(k) == 0 and k in ("download", "upload", *PAYLOADS)
                          else f"\n(mean {fmt_seconds(durations[k])})" if k in durations and k != "offline" else "")
              for k in legend]
    for handle, label in marks:
        handles.append(handle)
        labels.append(label)
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.12),
              ncol=min(len(handles), 2 if (paper_width() or 9.0) < 5 else 6), fontsize=8,
              frameon=False)
    ax.set_xlabel("virtual time (s)")
    if (paper_width() or 9.0) < 5:  # a paper's column: the note wrapped to its width
        import textwrap

        note = "\n" + textwrap.fill(" ".join(note.split()), 50)
    ax.set_title("who computes, transmits and waits" + note, fontsize=10)
    fig.tight_layout()  # once, with every label in place: the axes' final width sets the pixel columns
    if rows:
        box = ax.get_window_extent()
        columns = max(int(round(box.width)), 1)  # one column per pixel
        codes = _timeline_codes(digest.png, digest.timeline_cover(), rows, since, end, columns)
        codes[0] = len(TIMELINE_COLOURS)  # the server's row: its busy share
        share = busy_share(digest.png.columns(("server", SERVER), since, end, columns), (end - since) / columns,
                           workers)
        _draw_runs(ax, codes, since, end, _share_boxes(share, since, end, 0.8 * box.height / len(rows)))
    save_figure(fig, path, tight=False)  # laid out above, before the pixel columns were counted


def _draw_rounds(ax: Any, rounds: dict[str, Any], clients: Sequence[int], t0: float, t1: float) -> list[Any]:
    """Round structure on timeline.png: a dashed line where each synchronous round starts (up to
    :data:`PNG_MAX_ROUND_LINES` in the window), each round's straggler's finish (▼ on its row, on the
    server's when its row is not drawn) and each drop (× on its client's row).  Returns legend entries."""
    from matplotlib.lines import Line2D

    row = {c: i + 1 for i, c in enumerate(clients)}
    rs = [r for r in rounds.get("rounds", []) if r["start"] is not None and t0 <= float(r["start"]) <= t1]
    out: list[Any] = []
    if rs and len(rs) <= PNG_MAX_ROUND_LINES:
        ax.vlines([float(r["start"]) for r in rs], -0.5, len(clients) + 0.5, colors="#556", linestyles=(0, (2, 3)),
                  linewidth=0.6, zorder=3)
        out.append((Line2D([], [], color="#556", linestyle=(0, (2, 3)), linewidth=0.8), "round start"))
    done = [(float(r["straggler_done"]), row.get(r["straggler"], 0)) for r in rounds.get("rounds", [])
            if r.get("straggler") is not None and r.get("straggler_done") is not None
            and t0 <= float(r["straggler_done"]) <= t1]
    if done:
        ax.scatter([d[0] for d in done], [d[1] for d in done], marker="v", s=14, color="#c9a100", edgecolors="#5a4800",
                   linewidths=0.4, zorder=4)
        out.append((Line2D([], [], marker="v", color="#c9a100", linestyle=""), "round's straggler finishes"))
    drops = [(float(d["t"]), row.get(d["client"], 0)) for d in rounds.get("drops", [])
             if isinstance(d.get("t"), (int, float)) and t0 <= d["t"] <= t1]
    if drops:
        ax.scatter([d[0] for d in drops], [d[1] for d in drops], marker="x", s=16, color="#d62728", linewidths=1.2,
                   zorder=4)
        out.append((Line2D([], [], marker="x", color="#d62728", linestyle=""), "dropped"))
    return out


def diffuse(heights: np.ndarray) -> np.ndarray:
    """Whole-pixel heights whose running sum stays within half a pixel of the exact heights' (each column's
    rounding error carried to the next), so the drawn area is the true area whatever the row's pixel
    height: plain rounding of a 0.4-pixel sliver to 0 in every column would draw nothing."""
    out = np.empty(len(heights))
    carry = 0.0
    for i, h in enumerate(np.asarray(heights, dtype=float).tolist()):
        out[i] = np.floor(h + carry + 0.5)
        carry += h - out[i]
    return out


def _share_boxes(share: np.ndarray, t0: float, t1: float, row_px: float, row: int = 0) -> np.ndarray:
    """Row ``row`` as bars rising from its bottom edge, as tall as ``share`` of the row (0.8 units high,
    ``row_px`` pixels) in each column, as rectangles' corners; equal neighbouring columns are one."""
    none = np.zeros((0, 4, 2))
    if not len(share) or row_px <= 0:
        return none
    px = diffuse(share * row_px)
    h = px / row_px * 0.8
    columns = len(h)
    edges = np.linspace(t0, t1, columns + 1)
    starts = np.flatnonzero(np.concatenate([[True], h[1:] != h[:-1]]))
    stops = np.concatenate([starts[1:], [columns]])
    keep = h[starts] > 0
    a, b, top = edges[starts[keep]], edges[stops[keep]], row + 0.4 - h[starts[keep]]
    if not len(a):
        return none
    bottom = np.full_like(a, row + 0.4)
    return np.stack([np.stack([a, bottom], 1), np.stack([a, top], 1), np.stack([b, top], 1),
                     np.stack([b, bottom], 1)], 1)


def _draw_runs(ax: Any, codes: np.ndarray, t0: float, t1: float, server: np.ndarray | None = None) -> None:
    """The timeline's rows as one collection of rectangles, one per run of equal columns (row ``i`` at
    ``y = i``): a vector drawing of a few thousand rectangles, where an image would be resampled through a
    float64 copy of the whole figure (40 MB at this size).  ``server``: the server's busy-share bars
    (:func:`_share_boxes`), drawn in the same collection."""
    from matplotlib.collections import PolyCollection

    n_rows, columns = codes.shape
    idle = len(TIMELINE_COLOURS)
    colours = list(TIMELINE_COLOURS.values())
    edges = np.linspace(t0, t1, columns + 1)
    verts, faces = [], []
    for i in range(n_rows):
        row = codes[i]
        starts = np.flatnonzero(np.concatenate([[True], row[1:] != row[:-1]]))
        stops = np.concatenate([starts[1:], [columns]])
        keep = row[starts] != idle
        a, b, k = edges[starts[keep]], edges[stops[keep]], row[starts[keep]]
        y0, y1 = i - 0.4, i + 0.4
        box = np.stack([np.stack([a, np.full_like(a, y0)], 1), np.stack([a, np.full_like(a, y1)], 1),
                        np.stack([b, np.full_like(a, y1)], 1), np.stack([b, np.full_like(a, y0)], 1)], 1)
        verts.append(box)
        faces += [colours[j] for j in k.tolist()]
    if server is not None and len(server):
        verts.append(server)
        faces += [PHASE_COLOURS["server"]] * len(server)
    if faces:
        ax.add_collection(PolyCollection(np.concatenate(verts), facecolors=faces, edgecolors="none", linewidths=0,
                                         antialiaseds=False))


def link_rate_figure(trace: pd.DataFrame | TraceDigest, path: Path) -> bool:
    """Distribution of the achieved rate of every transfer (bits / airtime), per direction.  Rates that
    span more than a decade (a mixed population, or an implausible unit) are binned on a log axis, so
    neither end collapses into one bar."""
    digest = trace if isinstance(trace, TraceDigest) else digest_trace(trace)
    if not digest.has_rates:
        return False
    rates = {k: v / 1e6 for k, v in digest.link_rates().items()}
    positive = np.concatenate([v[v > 0] for v in rates.values()])
    log = len(positive) > 0 and float(positive.max()) > 10.0 * float(positive.min())
    fig, ax = new_figure(figsize=(6, 4))
    drawn = False
    bins: Any = 40
    if log:
        bins = np.geomspace(float(positive.min()), float(positive.max()) * (1 + 1e-9), 41)
    elif len(positive):
        bins = _linear_bins(positive, 40)
    for kind, colour in (("upload", PHASE_COLOURS["upload"]), ("download", PHASE_COLOURS["download"])):
        r = rates[kind]
        if log:
            r = r[r > 0]  # a zero rate has no place on a log axis (none is recorded: a transfer takes time)
        if len(r):
            ax.hist(r, bins=bins, alpha=0.6, color=colour, label=f"{kind} ({len(r)} transfers)")
            drawn = True
    if not drawn:
        return False
    if log:
        from matplotlib.ticker import LogFormatter

        ax.set_xscale("log")  # plain numbers on the ticks (0.1, 1, 10; 2, 5 between them over few decades)
        ax.xaxis.set_major_formatter(LogFormatter())
        ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
    ax.set_xlabel("achieved rate (Mbit/s" + (", log scale)" if log else ")"))
    ax.set_ylabel("transfers")
    ax.set_title("link-rate distribution")
    ax.legend()
    save_figure(fig, path)
    return True


def count_axis(ax: Any, values: Any) -> None:
    """A y axis for counts: integer ticks from 0, and a readable range when the series is constant
    (a flat zero queue is drawn on 0..1, not on ±0.04)."""
    from matplotlib.ticker import MaxNLocator

    vals = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    top = float(vals.max()) if len(vals) else 0.0
    ax.set_ylim(-0.05 * max(top, 1.0), max(top, 1.0) * 1.1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def server_queue_figure(trace: pd.DataFrame | TraceDigest, path: Path) -> bool:
    """Requests waiting at the server against virtual time.  A few hundred changes: the step function
    itself.  More (a solid block as a step plot): per bin of 1/200 of the run, the time-averaged length
    as a line and the bin's largest length as a light band.  A dashed line is the time average over the
    run; a server that never queued says so instead of drawing a bare line at zero."""
    digest = trace if isinstance(trace, TraceDigest) else digest_trace(trace)
    if not digest.has_server:
        return False
    server = digest.server_frame()
    q = digest.queue()
    t0 = 0.0
    t1 = digest.server_end_max if np.isfinite(digest.server_end_max) else 0.0
    t1 = max(t1, float(q["t"].max()) if len(q) else 0.0, t0 + 1e-9)
    fig, ax = new_figure(figsize=(7, 3), paper_height=2.4)
    colour = PHASE_COLOURS["server"]
    _, mean_all, _ = binned_queue(q, t0, t1, bins=1)
    if len(q) <= QUEUE_STEP_MAX:
        ax.step(q["t"], q["queue"], where="post", color=colour, label="requests waiting")
        how = ""
    else:
        edges, mean, peak = binned_queue(q, t0, t1)
        mid = (edges[:-1] + edges[1:]) / 2
        ax.fill_between(edges[:-1], 0, peak, step="post", color=colour, alpha=0.25, lw=0,
                        label="largest in the bin")
        ax.plot(mid, mean, color=colour, lw=1.2, label="time average in the bin")
        how = f" ({len(q):,} changes in bins of {fmt_seconds((t1 - t0) / len(mean))})"
    ax.axhline(mean_all[0], color="black", ls="--", lw=1, label=f"time average over the run: {mean_all[0]:.3g}")
    ax.set_xlim(t0, t1)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("requests waiting")
    count_axis(ax, q["queue"])
    waits = server["wait"].to_numpy(dtype=float)
    if not np.nanmax(waits, initial=0.0) > 0:
        ax.text(0.5, 0.55, f"the server never queued: each of the {len(server):,} requests\nwas served on arrival "
                "(no request waited)", transform=ax.transAxes, ha="center", va="center", fontsize=9,
                bbox={"facecolor": "white", "edgecolor": "#999999"})
    else:
        ax.legend(fontsize=7, loc="best")
    ax.set_title(f"server queue{how}\nmean wait {fmt_seconds(float(np.nanmean(waits)))}, "
                 f"max {fmt_seconds(float(np.nanmax(waits)))}, {len(server):,} requests", fontsize=9)
    save_figure(fig, path)
    return True


def energy_figure(energy: pd.DataFrame, path: Path) -> bool:
    """Joules per device class.  Left: totals split into compute, transmit, receive and idle.  Right, on
    its own axis: the active part alone (compute, transmit, receive), which idle power (often ~99% of a
    bar) would otherwise hide."""
    if energy.empty or "device_class" not in energy:
        return False
    cols = [c for c in ENERGY_PARTS if c in energy]
    per = energy.groupby("device_class")[cols].sum()  # totals, as summary.json's energy_j_by_device_class
    counts = energy.groupby("device_class").size()
    active = [c for c in cols if c != "idle_j"]
    narrow = (paper_width() or 10.0) < 5  # a paper's column: the two panels one above the other
    fig, axes = new_figure(2 if narrow else 1, 1 if narrow else 2, figsize=(10, 4.2), paper_height=5.2)
    ticks = [f"{c}\n({int(counts[c])} devices)" for c in per.index]
    for ax, which, title in ((axes[0], cols, "all energy (totals)"), (axes[1], active, "active energy only")):
        bottom = np.zeros(len(per))
        for c in which:
            ax.bar(range(len(per)), per[c], bottom=bottom, label=ENERGY_PARTS[c][0], color=ENERGY_PARTS[c][1])
            bottom += per[c].to_numpy()
        ax.set_xticks(range(len(per)), ticks, rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    total = per[cols].to_numpy().sum(axis=1)
    act = per[active].to_numpy().sum(axis=1) if active else np.zeros(len(per))
    for i, (a, t) in enumerate(zip(act, total)):
        axes[1].annotate(f"{a / t:.1%} of total" if t > 0 else "", (i, a), ha="center", va="bottom", fontsize=7,
                         xytext=(0, 2), textcoords="offset points")
    axes[0].set_ylabel("energy, all devices of the class (J)")
    axes[1].set_ylabel("active energy (J)")
    if len(act) and act.max() > 0:
        axes[1].set_ylim(0, act.max() * 1.15)  # room for the share labels
    idle_share = float(per["idle_j"].sum() / total.sum()) if "idle_j" in per and total.sum() > 0 else 0.0
    fig.suptitle(f"energy per device class: idle is {idle_share:.1%} of the total", fontsize=10)
    save_figure(fig, path)
    return True


def topology_figure(world: "object", path: Path) -> bool:
    """The network tree with each link's rate (access links at the client's nominal uplink rate); False
    (nothing drawn) for a star network."""
    from fedsim.system.topology import rate_graph

    graph = rate_graph(world)
    if graph is None:
        return False
    topology_graph_figure(graph[0], graph[1], path)
    return True


def topology_graph_figure(graph: "object", root: "object", path: Path) -> None:
    """``topology.png`` from :func:`fedsim.system.topology.rate_graph`'s graph and root."""
    from fedsim.system.topology import draw_topology

    save_figure(draw_topology(graph, root=root), path, tight=False)


def submodel_figure(trace: pd.DataFrame | TraceDigest, path: Path, classes: dict[int, str] | None = None) -> bool:
    """Heat map of which part of the model each client trains: blocks (rows) × clients (columns), colour =
    kept fraction of the block's entries (mean over the client's tasks; 0 for a removed block).
    ``classes`` labels clients by device class."""
    table = trace.submodel_table() if isinstance(trace, TraceDigest) else submodel_table(trace)
    if table.empty:
        return False
    grid = table.T  # blocks × clients
    n_blocks, n_clients = grid.shape
    fig, ax = new_figure(figsize=(min(16.0, 2.5 + 0.32 * n_clients), 2.2 + 0.35 * n_blocks))
    im = ax.imshow(grid.to_numpy(), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    step = max(1, n_clients // 60)
    cols = list(grid.columns)
    ax.set_xticks(range(0, n_clients, step))
    ax.set_xticklabels([f"{c}" + (f" {classes[c]}" if classes and c in classes else "") for c in cols[::step]],
                       rotation=90, fontsize=6)
    ax.set_yticks(range(n_blocks))
    ax.set_yticklabels(grid.index, fontsize=7)
    ax.set_xlabel("client (device class)")
    fig.colorbar(im, ax=ax, label="kept fraction", fraction=0.04, pad=0.02)
    ax.set_title("which part of the model each client trains (kept fraction per block)", fontsize=9)
    save_figure(fig, path)
    return True


# INTERACTIVE_MAX_BARS and INTERACTIVE_MAX_CLIENTS (imported above) are defined beside the figure registry,
# whose builds read the digest with them.

#: Bars in view up to which report.html draws single bars (where it holds them all); past it, each pixel
#: column shows the phase that fills most of it.
INTERACTIVE_EXACT_BARS = 4000

#: Client rows the interactive timeline shows at first (the per-client panel's picker changes them).
INTERACTIVE_SHOWN_CLIENTS = 40

#: Rounds and drops report.html's timeline marks at most (the first ones; the rounds panel lists them all).
INTERACTIVE_MAX_MARKS = 5000


# The built-in run figures, each behind one registry entry (the registry is fedsim.output.figures): written
# directly as SVG (fedsim.output.svg_figures, no matplotlib), the same quantities as the matplotlib drawers
# above, which draw them for a paper (``fedsim figures``, fedsim.output.paper).  To draw one another way,
# change its ``draw`` here.

def draw_accuracy(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """Accuracy against virtual time, or the test loss for a regression task; None without either."""
    from fedsim.output import svg_figures as svg

    m = inputs.metrics
    if len(m) and m["accuracy"].notna().any():
        p = run_dir / "accuracy_vs_time.svg"
        svg.accuracy_svg({run_dir.name: m}, p)
        return p
    if len(m) and m["loss"].notna().any():  # a regression task: the test loss is the curve
        p = run_dir / "loss_vs_time.svg"
        svg.accuracy_svg({run_dir.name: m}, p, column="loss")
        return p
    return None  # (systems-only runs have neither)


def _active(digest: TraceDigest) -> bool:
    return bool(digest.clients or digest.has_server)


def draw_timeline(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """The per-client timeline (the whole run by default; the phase that dominates each column, the
    server's row its busy share)."""
    from fedsim.output import svg_figures as svg

    digest, panels = inputs.digest, inputs.panels
    if not _active(digest):
        return None
    p = run_dir / "timeline.svg"
    svg.timeline_svg(digest, p, since=inputs.since, until=inputs.until, max_clients=inputs.timeline_clients,
                     rounds=panels.round_table() if panels is not None else None, workers=inputs.workers)
    return p


def draw_link_rates(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """Histograms of the uplink and downlink rates the transfers got."""
    from fedsim.output import svg_figures as svg

    p = run_dir / "link_rates.svg"
    return p if _active(inputs.digest) and svg.link_rate_svg(inputs.digest, p) else None


def draw_server_queue(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """The server's queue length over time."""
    from fedsim.output import svg_figures as svg

    p = run_dir / "server_queue.svg"
    return p if _active(inputs.digest) and svg.server_queue_svg(inputs.digest, p) else None


def draw_submodel_heatmap(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """Which sub-model each device class trained (sub-model runs only)."""
    from fedsim.output import svg_figures as svg

    p = run_dir / "submodel_heatmap.svg"
    return p if svg.submodel_svg(inputs.digest, p, inputs.device_classes) else None


def draw_energy(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """Energy per device, by what it was spent on."""
    from fedsim.output import svg_figures as svg

    p = run_dir / "energy.svg"
    return p if svg.energy_svg(inputs.energy, p) else None


def draw_topology(inputs: OutputBuild, run_dir: Path) -> Path | None:
    """A hierarchical network's graph (from the run's world, handed over before it was dropped; drawn with
    matplotlib and networkx, for hierarchical networks only)."""
    graph, root = inputs.topology
    p = run_dir / "topology.png"
    topology_graph_figure(graph, root, p)
    return p


register_run_figure("topology", ("topology.png",), ("topology",), draw_topology)
register_run_figure("accuracy", ("accuracy_vs_time.svg", "loss_vs_time.svg"), ("metrics",), draw_accuracy)
register_run_figure("timeline", ("timeline.svg",), ("digest", "panels"), draw_timeline)
register_run_figure("link_rates", ("link_rates.svg",), ("digest",), draw_link_rates, forked=True)
register_run_figure("server_queue", ("server_queue.svg",), ("digest",), draw_server_queue, forked=True)
register_run_figure("submodel_heatmap", ("submodel_heatmap.svg",), ("digest",), draw_submodel_heatmap)
register_run_figure("energy", ("energy.svg",), ("energy",), draw_energy, forked=True)


def run_digest(run_dir: str | Path, *, since: float = 0.0, until: float | None = None, timeline_clients: int = 30,
               interactive_clients: int = INTERACTIVE_MAX_CLIENTS,
               interactive_bars: int = INTERACTIVE_MAX_BARS) -> TraceDigest:
    """The :class:`~fedsim.output.digest.TraceDigest` of a run's trace, read now (a build of the run's
    outputs reads it once for its figures and report through its :class:`~fedsim.output.figures.OutputBuild`)."""
    return digest_trace(trace_path(run_dir), since=since, until=until, timeline_clients=timeline_clients,
                        interactive_clients=interactive_clients, interactive_bars=interactive_bars)


#: The tracebacks of a run's figures that failed to draw (the run's summary names them, one line each).
FIGURES_ERROR_FILE = "figures_error.txt"


def figure_failure(exc: BaseException) -> str:
    """The one line a failed figure is recorded with: the exception's type and message, cut at 300
    characters (its traceback goes to :data:`FIGURES_ERROR_FILE`)."""
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return f"{type(exc).__name__}: {text}"


def draw_figure(run_dir: Path, name: str, draw: Any, missing: dict[str, dict[str, str]] | None) -> Any:
    """``draw()`` for the figure ``name``; with ``missing`` (a dict), a failure is recorded there as
    ``{"error": one line, "traceback": text}``, its files (the registry's, :mod:`fedsim.output.figures`)
    removed, and None returned, so that one degenerate figure never costs the run its other figures and
    its report; without, it is raised.  An interrupt is never a figure's failure: it propagates."""
    if missing is None:
        return draw()
    import traceback

    try:
        return draw()
    except Exception as exc:
        missing[name] = {"error": figure_failure(exc), "traceback": traceback.format_exc()}
        for f in figure_files().get(name, ()):
            try:
                (run_dir / f).unlink(missing_ok=True)
            except OSError:  # not a file (what made it fail, perhaps): report.html passes it over
                pass
        return None


def run_figures(run_dir: str | Path, *, timeline_window: Sequence[float] | None = None,
                timeline_clients: int = 30, only: Sequence[str] | None = None,
                missing: dict[str, dict[str, str]] | None = None, build: OutputBuild | None = None) -> list[Path]:
    """Write the run figures of one run directory (every figure of the registry,
    :func:`fedsim.output.figures.run_figures_registered`, whose inputs the run has); returns their paths.

    ``timeline_window`` zooms the timeline on ``[start, end]`` seconds of virtual time (default: the whole
    run); ``timeline_clients`` is how many clients it shows (``output.timeline_window`` and
    ``output.timeline_clients`` of the scenario).  ``build``: the build's inputs, read once for its figures
    and its report (when given, it holds those two settings; default: a new one).  ``only``: these
    figures by name (default: all), so that two processes can share the drawing.  ``missing``: a dict
    that collects the figures that failed (:func:`draw_figure`) while the others are still drawn; without
    it the first failure is raised.  Reading the run's files (metrics, trace) is not a figure's failure:
    it is raised."""
    run_dir = Path(run_dir)
    if build is None:
        build = OutputBuild(run_dir, timeline_window=timeline_window, timeline_clients=timeline_clients)
    _release_freed_memory(run_dir)
    written: list[Path] = []
    for figure in run_figures_registered():
        if only is not None and figure.name not in only:
            continue
        if not all(build.has(r) for r in figure.reads):
            continue
        for r in figure.reads:  # read before drawing: a run file that does not read is not the figure's failure
            build.read(r)
        got = draw_figure(run_dir, figure.name, lambda figure=figure: figure.draw(build, run_dir), missing)
        if got:
            written.append(Path(got))
    return written


#: below this trace size (bytes), building the outputs skips :func:`_release_freed_memory`: reading such a
#: trace adds a few tens of MB at most, while a full collection costs about 0.15 s once torch is loaded
RELEASE_MIN_TRACE_BYTES = 32 << 20


def _release_freed_memory(run_dir: Path) -> None:
    """Hand the memory a finished simulation freed back to the system before the outputs of a large trace
    are built (glibc keeps freed heap pages, so the outputs' reading would otherwise add to the run's peak
    on top of them).  A no-op for a small trace, and where the C library has no ``malloc_trim``."""
    path = trace_path(run_dir)
    if not path.exists() or path.stat().st_size < RELEASE_MIN_TRACE_BYTES:
        return
    import gc

    gc.collect()
    release_freed_memory()


def comparison_figure(out: Path, labels: Sequence[str]) -> Path:
    """Accuracy against virtual time for several variants of one scenario."""
    metrics = {}
    for label in labels:
        path = out / label / "metrics.csv"
        if path.exists():
            metrics[label] = pd.read_csv(path)
    from fedsim.output.svg_figures import accuracy_svg

    p = out / "accuracy_vs_time.svg"
    accuracy_svg(metrics, p, title="same world, different algorithms")
    return p



#: Kinds drawn as bars, in the order of ``kind`` codes in the page's data (``wait`` is a server request's
#: queueing, drawn on its client's row): :data:`fedsim.output.digest.INTERACTIVE_KINDS`.


def interactive_data(run_dir: str | Path, *, max_bars: int = INTERACTIVE_MAX_BARS,
                     max_clients: int = INTERACTIVE_MAX_CLIENTS, build: OutputBuild | None = None
                     ) -> dict[str, Any] | None:
    """What report.html's interactive timeline draws, from the run's trace and metrics: one bar per
    download, compute, upload and offline interval of the shown clients, per server request (server row)
    and per request that queued (its client's row), each with client, phase, times, bytes, link rate and
    the staleness of the update its task delivered; the server queue length; the accuracy curve.
    None when the run has no trace.  ``build``: the build whose digest it draws from (default: a new one)."""
    run_dir = Path(run_dir)
    trace_file = trace_path(run_dir)
    if not trace_file.exists():
        return None
    if build is None:
        build = OutputBuild(run_dir)
    digest = build.digest_for(max_bars, max_clients)
    shown = digest.shown(max_clients)
    table, total = digest.interactive_table()
    # staleness of the update a task delivered: the first apply of the client at or after the bar's end
    stale = np.full(len(table), np.nan)
    for c, (ts, st) in digest.staleness_of().items():
        sel = np.flatnonzero(table["client"].to_numpy(dtype=float) == c)
        if len(sel):
            i = np.searchsorted(ts, table["end"].to_numpy(dtype=float)[sel] - 1e-12, side="left")
            ok = i < len(ts)
            stale[sel[ok]] = st[i[ok]]
    stale[(table["kind"] == INTERACTIVE_KINDS.index("offline")).to_numpy()] = np.nan
    def clean(a: Any, digits: int | None = None) -> list[Any]:
        """JSON numbers (None for NaN/inf); times keep full precision so the last one is inside the run."""
        arr = np.asarray(a, dtype=float)
        out = (arr if digits is None else np.round(arr, digits)).tolist()
        for i in np.flatnonzero(~np.isfinite(arr)).tolist():
            out[i] = None
        return out

    cols = [table["row"].astype(int).tolist(), table["kind"].astype(int).tolist(), clean(table["start"]),
            clean(table["end"]), clean(table["client"], 0), clean(table["bytes"], 0), clean(table["rate"], 1),
            clean(table["wait"]), clean(stale, 0),
            table["what"].fillna(-1).astype(int).tolist() if "what" in table else [-1] * len(table)]
    end_t = float(digest.t_end) if np.isfinite(digest.t_end) else 0.0
    q = digest.queue() if digest.server_start else pd.DataFrame({"t": [], "queue": []})
    queue_note = ""
    if len(q) > 4000:  # a path of at most 4000 points: the time average in 2000 bins
        edges, mean, _ = binned_queue(q, 0.0, max(end_t, 1e-9), bins=2000)
        q = pd.DataFrame({"t": edges[:-1], "queue": mean})
        queue_note = "time average in 2000 bins"
    metrics_path = run_dir / "metrics.csv"
    acc: dict[str, list[Any]] = {"t": [], "y": []}
    measure = "accuracy"
    if metrics_path.exists():
        m = pd.read_csv(metrics_path)
        # the curve is accuracy, else (a regression task: accuracy all missing) the test loss; the measure's
        # own column is read, never renamed onto another (a loss-only run still has an empty accuracy column)
        if len(m) and "accuracy" in m and m["accuracy"].notna().any():
            measure = "accuracy"
        elif len(m) and "loss" in m and m["loss"].notna().any():
            measure = "loss"
        else:
            measure = ""
        curve = m.dropna(subset=[measure])[["t", measure]] if measure else pd.DataFrame({"t": [], "y": []})
        acc = {"t": clean(curve["t"]), "y": clean(curve.iloc[:, 1], 6)}
        measure = measure or "accuracy"
        if len(curve):
            end_t = max(end_t, float(curve["t"].max()))  # the last evaluation may follow the last interval
    tw = digest.tile_width()
    exact = "".join("1" if x else "0" for x in digest.exact_tiles()) if tw > 0 else ""
    marks = _round_marks(build.panels_for(max_bars, max_clients))
    return {"t_end": end_t, "rows": ["server"] + [f"client {c}" for c in shown], "clients": [int(c) for c in shown],
            "shown": INTERACTIVE_SHOWN_CLIENTS, "rounds": marks["rounds"], "drops": marks["drops"],
            "clients_total": len(digest.clients), "kinds": list(INTERACTIVE_KINDS),
            "colours": [PHASE_COLOURS[k] for k in INTERACTIVE_KINDS], "bars": cols, "bars_total": total,
            "whats": digest.what_names(), "purpose_colours": PURPOSE_BAR_COLOURS,
            "agg": _aggregate_levels(digest, shown, end_t, build.workers), "tiles": {"width": tw, "exact": exact},
            "exact_max": INTERACTIVE_EXACT_BARS,
            "queue": {"t": clean(q["t"]), "q": clean(q["queue"], 4), "note": queue_note},
            "curve": {**acc, "measure": measure}}


def _round_marks(stream: Any) -> dict[str, list[Any]]:
    """The synchronous rounds (start, end, straggler, its finish, the clients dropped at the deadline) and
    the drops the timeline marks: the report panels' (:class:`fedsim.output.panels.PanelStream`, gathered
    in the same pass as the digest), at most :data:`INTERACTIVE_MAX_MARKS` of each."""
    if stream is None:
        return {"rounds": [], "drops": []}
    table = stream.round_table()

    def num(v: Any) -> Any:
        return float(v) if isinstance(v, (int, float)) and np.isfinite(v) else None

    rounds = [{"round": r["round"], "start": num(r["start"]), "end": num(r["end"]), "straggler": r["straggler"],
               "done": num(r["straggler_done"]), "dropped": r["dropped"]} for r in table["rounds"][:INTERACTIVE_MAX_MARKS]]
    drops = [{"t": num(d["t"]), "client": d["client"], "reason": d["reason"]}
             for d in table["drops"][:INTERACTIVE_MAX_MARKS] if num(d["t"]) is not None]
    return {"rounds": rounds, "drops": drops}


#: The phases of report.html's aggregated rows, by code: the bars' kinds, then split learning's payloads
#: (an activations upload is red at every zoom, as its single bar is).
AGG_KINDS = (*INTERACTIVE_KINDS, *PAYLOADS)

#: The characters of the server's busy share per bin in report.html's data: 0 (idle) to 1 (the last).
SHARE_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

#: Bins of report.html's coarsest aggregated level at least (each finer level has twice as many).
AGG_MIN_BINS = 256

#: Rows of report.html's aggregated timeline computed at a time (their keys' bins held at once).
AGG_ROWS = 32


def _aggregate_levels(digest: TraceDigest, shown: Sequence[int], end_t: float,
                      workers: float = 1.0) -> dict[str, Any] | None:
    """report.html's aggregated timeline: for the server and each shown client, the phase that fills
    most of each bin (:func:`fedsim.output.digest.dominant`, the PNG's rule), at the coverage grid's resolution
    and at 2, 4, 8 ... times coarser, down to :data:`AGG_MIN_BINS` bins; the page draws each pixel column
    from the level whose bins are just narrower than a pixel.  A row is a string, one character per bin:
    the phase's index in ``kinds`` (:data:`AGG_KINDS`, coloured by ``colours``), or ``.`` where idle time is the largest share.  ``share``: the
    server's busy share of each bin (:func:`busy_share`, one character of :data:`SHARE_DIGITS`, its index
    over ``len - 1``), which the page draws the server's row by, as timeline.png does."""
    grid = digest.web
    if grid.width is None or end_t <= 0:
        return None
    used = int(min(grid.bins, np.ceil((end_t - grid.origin) / grid.width)))
    cover = digest.web_cover()
    kinds = AGG_KINDS
    chars = np.frombuffer(("".join(str(i) for i in range(len(kinds))) + ".").encode("ascii"), dtype=np.uint8)
    # every row's keys, in the cover's order (stacked below 32 rows at a time, zero-padded to the most keys)
    rows_of: dict[int, list[tuple[str, int]]] = {c: [] for c in [SERVER, *shown]}
    for key in cover:
        if key[1] in rows_of:
            rows_of[key[1]].append(key)
    order = [SERVER, *shown]
    width = max((len(v) for v in rows_of.values()), default=0)
    codes = np.full((len(order), width + 1), len(kinds))  # (row, position) -> kind code; the last: idle
    for i, c in enumerate(order):
        codes[i, :len(rows_of[c])] = [kinds.index(key[0]) for key in rows_of[c]]
    nbs, f = [], 1  # the levels: bins summed per bin of the level, and its bins
    while True:
        nbs.append((f, -(-used // f)))
        if nbs[-1][1] <= AGG_MIN_BINS:
            break
        f *= 2
    text: list[list[str]] = [[] for _ in nbs]
    for lo in range(0, len(order), AGG_ROWS):  # a few rows at a time: the temporaries stay a few MB
        part = order[lo:lo + AGG_ROWS]
        stack = np.zeros((width, len(part), used))  # (position, row, bin): a row's keys, zero-padded
        for i, c in enumerate(part):
            for j, key in enumerate(rows_of[c]):
                stack[j, i] = cover[key][:used]
        for level, (f, nb) in enumerate(nbs):
            sums = _level_sums(stack.reshape(width * len(part), used), f, nb).reshape(width, len(part), nb)
            best = dominant_rows(sums, grid.width * f)  # (-1, idle: the last code)
            idx = np.take_along_axis(codes[lo:lo + AGG_ROWS], np.where(best < 0, width, best), axis=1)
            text[level].extend(r.tobytes().decode("ascii") for r in chars[idx])
    levels = []
    for (f, nb), rows in zip(nbs, text):
        busy = np.zeros(nb * f)
        if ("server", SERVER) in cover:
            busy[:used] = cover[("server", SERVER)][:used]
        q = np.rint(busy_share(busy.reshape(nb, f).sum(axis=1), grid.width * f, workers) * (len(SHARE_DIGITS) - 1))
        levels.append({"f": f, "rows": rows, "share": "".join(np.array(list(SHARE_DIGITS))[q.astype(int)].tolist())})
    present = sorted({k[0] for k in cover if k[0] in PAYLOADS})
    return {"t0": grid.origin, "bin": grid.width, "levels": levels, "kinds": list(kinds),
            "colours": [TIMELINE_COLOURS[k] for k in kinds], "payloads": present}


def _level_sums(stack: np.ndarray, f: int, nb: int) -> np.ndarray:
    """Each row of ``stack`` summed over runs of ``f`` bins (zero-padded to ``nb * f``): the same floats as
    ``x.reshape(nb, f).sum(axis=1)`` of each padded row, which is what the levels were drawn from; rows
    at once for one and two bins (a bin as it is, a pair added), numpy's own sum of each row past that
    (its summation order for longer runs is its own, so it is kept rather than copied)."""
    used = stack.shape[1]
    if f == 1:
        return stack
    if f == 2:
        out = stack[:, 0::2].copy()
        out[:, :used // 2] += stack[:, 1::2]
        return out
    out = np.empty((len(stack), nb))
    x = np.zeros(nb * f)
    for i, row in enumerate(stack):
        x[:used] = row
        out[i] = x.reshape(nb, f).sum(axis=1)
    return out


#: Units of the summary fields report.html shows, and how their numbers are written.
SUMMARY_FORMATS: dict[str, Any] = {
    "final_accuracy": lambda v: f"{v:.4f}", "best_accuracy": lambda v: f"{v:.4f}", "final_loss": lambda v: f"{v:.4g}",
    "virtual_time_s": lambda v: fmt_seconds(v), "wall_time_s": lambda v: fmt_seconds(v),
    "versions": lambda v: f"{int(v):,}", "updates_applied": lambda v: f"{int(v):,}",
    "mean_staleness": lambda v: f"{v:.2f} versions", "max_staleness": lambda v: f"{int(v):,} versions",
    "bytes_up": lambda v: fmt_bytes(v), "bytes_down": lambda v: fmt_bytes(v), "energy_j": lambda v: f"{v:,.1f} J",
    "num_clients": lambda v: f"{int(v):,}", "dropped": lambda v: f"{int(v):,}",
}


def fmt_summary(key: str, value: Any) -> str:
    """A summary.json value for people: ``bytes_up 10964800`` → ``10.96 MB``, ``wall_time_s 12.0743`` → ``12.1 s``."""
    if value is None:
        return ""
    f = SUMMARY_FORMATS.get(key)
    if f is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f(value)
    return _fmt(value)


def html_report(run_dir: str | Path, missing: dict[str, str] | None = None, build: OutputBuild | None = None) -> Path:
    """``report.html``: one self-contained page that opens in any browser without the run folder's other
    files and without a network: the summary with units, links to the reports of the runs it holds (per
    algorithm, per seed), an interactive timeline (zoom and pan over virtual time; hover a bar for client,
    phase, bytes, link rate and staleness) with the server queue and accuracy on the same time axis (plain
    SVG and a little inlined JavaScript), the check/probe tables when present, and every figure as PNG data.
    ``missing``: the figures that failed to draw, by name, with their one-line reason (listed on the page).
    ``build``: the build whose inputs it draws from, shared with the run's figures (default: a new one)."""
    return finish_html_report(html_report_body(run_dir, build), missing)


class ReportBody:
    """report.html up to its figures (:func:`html_report_body`): built while the figures are drawn
    elsewhere, then finished with them (:func:`finish_html_report`)."""

    def __init__(self, run_dir: Path, parts: list[str], link_up_later: bool) -> None:
        self.run_dir, self.parts, self.link_up_later = run_dir, parts, link_up_later


def html_report_body(run_dir: str | Path, build: OutputBuild | None = None) -> ReportBody:
    """Everything of report.html but its figures (it reads no figure file); ``build`` as
    :func:`html_report`'s."""
    import html
    import json

    from fedsim.output.panels import ideal_links_note, nav_html, panels_html, server_summary_rows, with_formats

    run_dir = Path(run_dir)
    if build is None:
        build = OutputBuild(run_dir)
    link_up_later = False
    parts: list[str] = []  # the page's body, one part a line; the frame is PAGE_TEMPLATE
    stream = queue = None
    if trace_path(run_dir).exists():  # one streamed pass for the timeline and the panels
        _release_freed_memory(run_dir)
        digest = build.digest_for(INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS)
        stream = build.panels_for(INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS)
        queue = digest.queue() if digest.server_start else None
    panels = panels_html(run_dir, stream, queue)  # the "what happened" panels (fedsim.output.panels)
    parts.append(nav_html(run_dir, [("fs-title", "timeline")] * int(trace_path(run_dir).exists()) +
                          [("fp-breakdown-title", "time per client"), ("fp-server-title", "server"),
                           ("fp-rounds-title", "rounds"), ("fp-stale-title", "staleness")] * ("fp-title" in panels)))
    subs = sorted(d for d in run_dir.iterdir() if d.is_dir() and (d / "summary.json").exists())
    if subs:
        parts.append("<h2>Runs in this folder</h2><ul class='runs'>" + "".join(
            f"<li><a href='{html.escape(d.name)}/report.html'>{html.escape(d.name)}</a>"
            + ("" if (d / "report.html").exists() else " (no report written)") + "</li>" for d in subs) + "</ul>")
        link_up_later = True
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        data = json.loads(summary_path.read_text(encoding="utf-8"))
        runs = data if isinstance(data, list) else [data]
        # drawn while summary.json says the outputs are being built: this page is the last of them, so it
        # is read whole only once they are, and the run's status is the simulation's, ``ok``
        runs = [{**r, "status": "ok"} if isinstance(r, dict) and r.get("status") == BUILDING else r for r in runs]
        keys = ["label", "status", "stop_reason", "final_accuracy", "best_accuracy", "final_loss", "virtual_time_s",
                "wall_time_s", "versions", "updates_applied", "mean_staleness", "max_staleness", "bytes_up",
                "bytes_down", "energy_j", "num_clients"]
        parts.append("<h2>Summary</h2><table><tr><th>field</th>" +
                     "".join(f"<th>{html.escape(str(r.get('label', '')))}</th>" for r in runs) + "</tr>")
        for k in keys:
            if any(k in r for r in runs):
                cells = "".join(f"<td>{html.escape(fmt_summary(k, r.get(k)))}</td>" for r in runs)
                parts.append(f"<tr><th>{k}</th>{cells}</tr>")
        for name, cells in server_summary_rows(data, fmt_seconds):
            parts.append(f"<tr><th>{name}</th>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        parts.append("</table>")
    data = interactive_data(run_dir, build=build)
    if data is not None and (data["bars"][0] or data["agg"]):
        shown = len(data["bars"][0])
        notes = [f"{data['bars_total']:,} bars"]
        if data["bars_total"] > shown:
            notes.append(f"{shown:,} of them held exactly, spread over the run; where they are dense, each pixel "
                         "column of a client shows the phase that fills most of it, and the server's row its busy "
                         "share, until you zoom in")
        if data["clients_total"] > len(data["rows"]) - 1:
            notes.append(f"clients {html.escape(data['rows'][1])[7:]}–{html.escape(data['rows'][-1])[7:]} of "
                         f"{data['clients_total']:,} held")
        if len(data["rows"]) - 1 > data["shown"]:
            notes.append(f"{data['shown']} client rows shown at a time")
        payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
        ideal = ideal_links_note(stream.traffic) if stream is not None else ""
        ideal = f"<p class='hint' id='fs-ideal'>{html.escape(ideal)}</p>" if ideal else ""
        parts.append("<h2 id='fs-title'>Interactive timeline</h2><p class='hint'>Scroll to zoom, drag to pan, double-click to "
                     "see the whole run; hover a bar for its client, phase, what it carries or asks (the trace's "
                     "<code>what</code>), bytes, link rate, the link latency and airtime that make up a "
                     "transfer, the staleness of the update it delivered; hover a "
                     "round's line, a straggler's ▼ or a drop's × for the round. The per-client panel's picker "
                     "below picks the client rows. The queue and accuracy curves share the time axis. "
                     f"({'; '.join(notes)})</p>" + ideal + _INTERACTIVE_HTML +
                     f"<script type='application/json' id='fedsim-data'>{payload}</script>"
                     f"<script>{with_formats(_INTERACTIVE_JS)}</script>")
    parts.append(panels)
    for name, title in (("check.csv", "Theory check (fedsim check)"), ("probes.csv", "Probes"),
                        ("probes_live.csv", "Live probes"), ("seeds_summary.csv", "Across seeds")):
        path = run_dir / name
        if path.exists():
            table = pd.read_csv(path)
            parts.append(f"<h2>{title}</h2>" + (table_html(table) if name == "seeds_summary.csv" else
                                                table.head(200).to_html(index=False, float_format=lambda v: f"{v:.4g}")))
    scenario = run_dir / "scenario.yaml"
    if scenario.exists():
        parts.append("<h2>Scenario</h2><details><summary>resolved scenario.yaml</summary><pre>" +
                     html.escape(scenario.read_text(encoding="utf-8")) + "</pre></details>")
    return ReportBody(run_dir, parts, link_up_later)


#: The figure files report.html shows, by suffix, and how it embeds them.
FIGURE_MEDIA_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}


def shown_figures(run_dir: Path) -> list[Path]:
    """The figures report.html shows, by file name: the files of the registered run figures
    (:mod:`fedsim.output.figures`) that exist, and any other PNG or SVG at the top of the folder (a
    multi-algorithm run's comparison, a sweep's): a figure's file left from an earlier build is removed
    when it fails, so what is shown is this build's."""
    names = {f for files in figure_files().values() for f in files if Path(f).suffix.lower() in FIGURE_MEDIA_TYPES}
    found = {run_dir / n for n in names} | set(run_dir.glob("*.png")) | set(run_dir.glob("*.svg"))
    return sorted(p for p in found if p.is_file())


def finish_html_report(body: ReportBody, missing: dict[str, str] | None = None) -> Path:
    """Write report.html: ``body`` and every figure of the run folder, as PNG data, then "Figures not
    drawn" for each of ``missing`` (figure name → the one-line reason it failed), so that a reader sees
    a figure is absent and why instead of wondering."""
    import base64
    import html

    from fedsim.output.panels import PANELS_CSS, link_up

    run_dir, parts = body.run_dir, list(body.parts)
    figures = shown_figures(run_dir)
    if figures:
        parts.append("<h2>Figures</h2>")
    for fig in figures:
        data64 = base64.b64encode(fig.read_bytes()).decode("ascii")
        kind = FIGURE_MEDIA_TYPES[fig.suffix.lower()]
        parts.append(f"<h3>{html.escape(fig.stem.replace('_', ' '))}</h3><img alt='{html.escape(fig.name)}' "
                     f"src='data:{kind};base64,{data64}'>")
    if missing:
        parts.append("<h2 id='figures-missing'>Figures not drawn</h2><p class='hint'>These figures failed to draw; "
                     f"the rest of the run's outputs are complete (tracebacks in {FIGURES_ERROR_FILE}).</p><ul>" +
                     "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(reason)}</li>"
                             for name, reason in sorted(missing.items())) + "</ul>")
    page = Template(PAGE_TEMPLATE).substitute(title=html.escape(run_dir.name), body="\n".join(parts),
                                              style=PAGE_CSS + _INTERACTIVE_CSS + TABLE_CSS + PANELS_CSS)
    out = run_dir / "report.html"
    write_text(out, page)
    if body.link_up_later:  # the runs listed above link up to this page, now that it exists
        link_up(run_dir)
    return out


#: The reports' page style (``static/page.css``), shared with the folder reports.
PAGE_CSS = static_text("page.css")

#: The interactive timeline's style, markup and script (``static/report.css``, ``timeline.html``,
#: ``report.js``; the script's ``//@format`` line takes :data:`fedsim.output.panels.JS_FORMAT`).  Plain SVG
#: and DOM calls, no library: the page works offline and from a file.
_INTERACTIVE_CSS = static_text("report.css")
_INTERACTIVE_HTML = static_text("timeline.html")
_INTERACTIVE_JS = static_text("report.js")

#: The style of :func:`table_html`'s tables (a run's, a sweep's and a seeds folder's pages).
TABLE_CSS = static_text("table.css")

#: report.html's frame (``static/report.html``): ``${title}``, ``${style}`` and ``${body}`` filled in.
PAGE_TEMPLATE = static_text("report.html")


def fmt_bytes(n: float) -> str:
    """Bytes for people, in SI units: 10964800 → ``10.96 MB``."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def fmt_number(v: Any) -> str:
    """A table's number for people, never in scientific notation unless tiny: ``10964800`` → ``10,964,800``,
    ``0.81234567`` → ``0.8123``, ``1234.5678`` → ``1,234.6``; a missing one is ``–``."""
    if v is None or isinstance(v, bool):
        return "" if v is None else str(v)
    v = float(v)
    if not np.isfinite(v):
        return "–" if np.isnan(v) else ("∞" if v > 0 else "-∞")
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 1000:
        return f"{v:,.1f}"
    if abs(v) >= 1e-3:
        return f"{v:.4g}"
    return f"{v:.3g}"


def _cell(col: str, v: Any, reached: Any = None) -> str:
    """One cell of a sweep or seeds table, by its column's unit (``bytes_*`` in SI bytes, ``*_s`` in
    seconds, ``energy_j`` in joules, accuracies to 4 decimals); a time to target that was never reached
    says so instead of ``inf`` or ``NaN``."""
    if isinstance(v, str):
        return v
    missing = v is None or (isinstance(v, float) and not np.isfinite(v))
    if col.startswith("time_to_target") and missing and not col.endswith("_std"):
        return "not reached" if reached is None or not reached or (isinstance(v, float) and np.isinf(v)) else "–"
    if missing or isinstance(v, bool):
        return fmt_number(v)
    if col.startswith("bytes_"):
        return fmt_bytes(v)
    if col.endswith("_s") or col.endswith("_s_mean") or col.endswith("_s_std"):
        return fmt_seconds(v)
    if col.startswith("energy_j"):
        return f"{float(v):,.1f} J"
    if "accuracy" in col:
        return f"{float(v):.4f}"
    return fmt_number(v)


def table_html(frame: pd.DataFrame, max_rows: int = 500) -> str:
    """A sweep's or seeds' table for people (the CSV keeps every column at full precision): a mean and
    its std (``x`` and ``x_std``, or ``x_mean`` and ``x_std``) share one cell, ``mean ± std``; columns
    with no value at all are left out (no target: no target columns); numbers carry units and are never
    in scientific notation; headers break at underscores, so the table fits the page instead of being
    cut at ``bytes_up``."""
    import html

    frame = frame.head(max_rows)
    cols = [c for c in frame.columns if not frame[c].isna().all()]
    reached = frame["reached_target"] if "reached_target" in frame else None
    shown: list[tuple[str, str, str | None]] = []  # (header, value column, std column)
    for c in cols:
        if c.endswith("_std"):
            base = c[:-4]
            if base in cols or f"{base}_mean" in cols:
                continue
        base = c[:-5] if c.endswith("_mean") else c
        std = f"{base}_std" if f"{base}_std" in cols else None
        shown.append((base, c, std))
    head = "".join(f"<th>{html.escape(h).replace('_', '_<wbr>')}" +
                   (" (mean ± std)" if std else " (mean)" if c.endswith("_mean") else "") + "</th>"
                   for h, c, std in shown)
    body = []
    for i in range(len(frame)):
        row = frame.iloc[i]
        got = None if reached is None else row["reached_target"]
        cells = []
        for _, c, std in shown:
            text = html.escape(_cell(c, row[c], got))
            if std is not None and text not in ("not reached", "–", "") and pd.notna(row[std]):
                text += " <small>± " + html.escape(_cell(std, row[std])) + "</small>"
            cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='fs-table'><table><tr>{head}</tr>" + "".join(body) + "</table></div>")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
