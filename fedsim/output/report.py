"""Figures every run writes: accuracy against virtual time, and the per-client timeline.

The timeline is the picture that teaches FL systems: one row per client, coloured bars for download,
compute, upload and server work, gaps where a client waits for the others.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # matplotlib is imported only where a matplotlib figure is drawn (never by a default run)
    from matplotlib.figure import Figure

from fedsim.output.digest import (INTERACTIVE_KINDS, PAYLOADS, SERVER, CoverGrid, TraceDigest, binned_queue, digest_trace,
                           dominant, queue_length, release_freed_memory)
from fedsim.files import BUILDING, write_text, writing
from fedsim.output.style import (ENERGY_PARTS, PHASE_COLOURS, PNG_MAX_ROUND_LINES, PURPOSE_BAR_COLOURS,  # noqa: F401
                                 QUEUE_STEP_MAX, TIMELINE_COLOURS, busy_share, fmt_seconds, submodel_table)
from fedsim.output.style import linear_bins as _linear_bins
from fedsim.output.style import timeline_codes as _timeline_codes
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
    params = dict(since=since, until=until, timeline_clients=max_clients)
    if isinstance(trace, TraceDigest):
        digest = trace
        got = dict(since=digest.since, until=digest.until, timeline_clients=digest.timeline_clients)
        if got != params:
            raise ValueError(f"the digest was read for the timeline {got}, not {params}")
    else:
        digest = digest_trace(trace, **params)
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


#: Exact bars report.html holds at most (the page stays small and responsive); past it, the bars of the
#: densest time tiles are left out (spread over the run, see :mod:`fedsim.output.digest`) and the page draws those
#: stretches aggregated, each pixel column showing the phase that fills most of it.
INTERACTIVE_MAX_BARS = 20000

#: Bars in view up to which report.html draws single bars (where it holds them all); past it, each pixel
#: column shows the phase that fills most of it.
INTERACTIVE_EXACT_BARS = 4000

#: Clients whose bars report.html holds at most (the lowest client ids); the page shows
#: :data:`INTERACTIVE_SHOWN_CLIENTS` of them at a time, picked in the browser.
INTERACTIVE_MAX_CLIENTS = 200

#: Client rows the interactive timeline shows at first (the per-client panel's picker changes them).
INTERACTIVE_SHOWN_CLIENTS = 40

#: Rounds and drops report.html's timeline marks at most (the first ones; the rounds panel lists them all).
INTERACTIVE_MAX_MARKS = 5000

#: the last run digest read, keyed by trace file, its size and time stamp, and the reading's parameters:
#: the figures and report.html of one run share a single pass over the trace
_DIGEST: dict[str, Any] = {}


def run_digest(run_dir: str | Path, *, since: float = 0.0, until: float | None = None, timeline_clients: int = 30,
               interactive_clients: int = INTERACTIVE_MAX_CLIENTS,
               interactive_bars: int = INTERACTIVE_MAX_BARS) -> TraceDigest:
    """The :class:`~fedsim.output.digest.TraceDigest` of a run's trace, read once for its figures and its report
    (the last one read is kept while its trace file is unchanged)."""
    path = trace_path(run_dir)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, interactive_clients, interactive_bars)
    params = dict(since=since, until=until, timeline_clients=timeline_clients,
                  interactive_clients=interactive_clients, interactive_bars=interactive_bars)
    held = _DIGEST.get("digest")
    if held is not None and _DIGEST.get("key") == key and _DIGEST.get("params") == params:
        return held
    from fedsim.output.panels import PanelStream

    panels = PanelStream()  # report.html's "what happened" panels are gathered in the same pass
    digest = digest_trace(path, also=[panels], **params)
    _DIGEST.update(key=key, params=params, digest=digest, panels=panels)
    return digest


def _report_digest(run_dir: Path, max_bars: int, max_clients: int) -> TraceDigest:
    """The digest report.html draws from: the one the run's figures just read when it fits, else a new one."""
    path = trace_path(run_dir)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, max_clients, max_bars)
    held = _DIGEST.get("digest")
    if held is not None and _DIGEST.get("key") == key:
        return held
    return run_digest(run_dir, interactive_clients=max_clients, interactive_bars=max_bars)


#: The standard figures of a run, by the name :func:`run_figures`'s ``only`` takes (``accuracy`` is
#: ``accuracy_vs_time.svg``, or ``loss_vs_time.svg`` for a regression task; SVG written directly, see
#: :mod:`fedsim.output.svg_figures`).
RUN_FIGURES = ("accuracy", "timeline", "link_rates", "server_queue", "submodel_heatmap", "energy")

#: The files each figure of :data:`RUN_FIGURES` (and the hierarchical network's ``topology``) may write: a
#: figure that fails has its file removed, so report.html never shows one left from an earlier build.
FIGURE_FILES: dict[str, tuple[str, ...]] = {
    "accuracy": ("accuracy_vs_time.svg", "loss_vs_time.svg"), "timeline": ("timeline.svg",),
    "link_rates": ("link_rates.svg",), "server_queue": ("server_queue.svg",),
    "submodel_heatmap": ("submodel_heatmap.svg",), "energy": ("energy.svg",), "topology": ("topology.png",)}

#: The tracebacks of a run's figures that failed to draw (the run's summary names them, one line each).
FIGURES_ERROR_FILE = "figures_error.txt"


def figure_failure(exc: BaseException) -> str:
    """The one line a failed figure is recorded with: the exception's type and message, cut at 300
    characters (its traceback goes to :data:`FIGURES_ERROR_FILE`)."""
    text = " ".join(str(exc).split())[:300] or "(no message)"
    return f"{type(exc).__name__}: {text}"


def draw_figure(run_dir: Path, name: str, draw: Any, missing: dict[str, dict[str, str]] | None) -> Any:
    """``draw()`` for the figure ``name``; with ``missing`` (a dict), a failure is recorded there as
    ``{"error": one line, "traceback": text}``, its files removed, and None returned, so that one
    degenerate figure never costs the run its other figures and its report; without, it is raised.
    An interrupt is never a figure's failure: it propagates."""
    if missing is None:
        return draw()
    import traceback

    try:
        return draw()
    except Exception as exc:
        missing[name] = {"error": figure_failure(exc), "traceback": traceback.format_exc()}
        for f in FIGURE_FILES.get(name, ()):
            try:
                (run_dir / f).unlink(missing_ok=True)
            except OSError:  # not a file (what made it fail, perhaps): report.html passes it over
                pass
        return None


def run_figures(run_dir: str | Path, *, timeline_window: Sequence[float] | None = None,
                timeline_clients: int = 30, only: Sequence[str] | None = None,
                missing: dict[str, dict[str, str]] | None = None) -> list[Path]:
    """Write the standard figures of one run directory; returns their paths.

    ``timeline_window`` zooms the timeline on ``[start, end]`` seconds of virtual time (default: the whole
    run); ``timeline_clients`` is how many clients it shows (``output.timeline_window`` and
    ``output.timeline_clients`` of the scenario).  ``only``: these of :data:`RUN_FIGURES` (default: all),
    so that two processes can share the drawing.  ``missing``: a dict that collects the figures that
    failed (:func:`draw_figure`) while the others are still drawn; without it the first failure is
    raised.  Reading the run's files (metrics, trace) is not a figure's failure: it is raised."""
    from fedsim.output import svg_figures as svg  # the run's figures: SVG written directly, no matplotlib

    run_dir = Path(run_dir)
    want = set(RUN_FIGURES if only is None else only)
    _release_freed_memory(run_dir)
    written: list[Path] = []

    def figure(name: str, draw: Any) -> None:
        got = draw_figure(run_dir, name, draw, missing)
        if got:
            written.append(got)

    metrics_path = run_dir / "metrics.csv"
    if metrics_path.exists() and "accuracy" in want:
        m = pd.read_csv(metrics_path)

        def accuracy() -> Path | None:
            if len(m) and m["accuracy"].notna().any():
                p = run_dir / "accuracy_vs_time.svg"
                svg.accuracy_svg({run_dir.name: m}, p)
                return p
            if len(m) and m["loss"].notna().any():  # a regression task: the test loss is the curve
                p = run_dir / "loss_vs_time.svg"
                svg.accuracy_svg({run_dir.name: m}, p, column="loss")
                return p
            return None  # (systems-only runs have neither)

        figure("accuracy", accuracy)
    trace_file = trace_path(run_dir)
    if trace_file.exists() and want & {"timeline", "link_rates", "server_queue", "submodel_heatmap"}:
        since, until = _window(timeline_window)
        # one streamed pass keeps what the figures and the report draw (never the whole trace)
        digest = run_digest(run_dir, since=since, until=until, timeline_clients=timeline_clients)
        if digest.clients or digest.has_server:
            if "timeline" in want:  # the whole run by default, the phase that dominates each pixel column
                def timeline() -> Path:
                    p = run_dir / "timeline.svg"
                    panels = _DIGEST.get("panels")
                    svg.timeline_svg(digest, p, since=since, until=until, max_clients=timeline_clients,
                                    rounds=panels.round_table() if panels is not None else None,
                                    workers=_server_workers(run_dir))
                    return p

                figure("timeline", timeline)
            for name, fn in (("link_rates", svg.link_rate_svg), ("server_queue", svg.server_queue_svg)):
                if name in want:
                    p = run_dir / f"{name}.svg"
                    figure(name, lambda fn=fn, p=p: p if fn(digest, p) else None)
        if "submodel_heatmap" in want:
            p = run_dir / "submodel_heatmap.svg"
            figure("submodel_heatmap", lambda: p if svg.submodel_svg(digest, p, _device_classes(run_dir)) else None)
    energy_path = run_dir / "energy.csv"
    if "energy" in want and energy_path.exists():
        energy = pd.read_csv(energy_path)
        p = run_dir / "energy.svg"
        figure("energy", lambda: p if svg.energy_svg(energy, p) else None)
    return written


def _server_workers(run_dir: Path) -> int:
    """The server's workers (summary.json's), so its row draws utilisation: busy time over time x workers."""
    from fedsim.output.panels import _workers

    return _workers(run_dir)


def prepare_run_digest(run_dir: str | Path, *, timeline_window: Sequence[float] | None = None,
                       timeline_clients: int = 30) -> None:
    """Read the run's trace into the digest :func:`run_figures` (same arguments) and :func:`html_report`
    draw from, now (none for a run without a trace)."""
    if trace_path(run_dir).exists():
        since, until = _window(timeline_window)
        run_digest(run_dir, since=since, until=until, timeline_clients=timeline_clients)


def _window(timeline_window: Sequence[float] | None) -> tuple[float, float | None]:
    """``output.timeline_window`` as the digest's ``since`` and ``until`` (None: the whole run)."""
    return (0.0, None) if timeline_window is None else (float(timeline_window[0]), float(timeline_window[1]))


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


def _device_classes(run_dir: Path) -> dict[int, str] | None:
    """Client → device class from the run's ``energy.csv`` (written for every run), if present."""
    path = run_dir / "energy.csv"
    if not path.exists():
        return None
    e = pd.read_csv(path)
    if "device" not in e or "device_class" not in e:
        return None
    return {int(c): str(d) for c, d in zip(e["device"], e["device_class"])}


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
                     max_clients: int = INTERACTIVE_MAX_CLIENTS) -> dict[str, Any] | None:
    """What report.html's interactive timeline draws, from the run's trace and metrics: one bar per
    download, compute, upload and offline interval of the shown clients, per server request (server row)
    and per request that queued (its client's row), each with client, phase, times, bytes, link rate and
    the staleness of the update its task delivered; the server queue length; the accuracy curve.
    None when the run has no trace."""
    run_dir = Path(run_dir)
    trace_file = trace_path(run_dir)
    if not trace_file.exists():
        return None
    digest = _report_digest(run_dir, max_bars, max_clients)
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
    marks = _round_marks()
    return {"t_end": end_t, "rows": ["server"] + [f"client {c}" for c in shown], "clients": [int(c) for c in shown],
            "shown": INTERACTIVE_SHOWN_CLIENTS, "rounds": marks["rounds"], "drops": marks["drops"],
            "clients_total": len(digest.clients), "kinds": list(INTERACTIVE_KINDS),
            "colours": [PHASE_COLOURS[k] for k in INTERACTIVE_KINDS], "bars": cols, "bars_total": total,
            "whats": digest.what_names(), "purpose_colours": PURPOSE_BAR_COLOURS,
            "agg": _aggregate_levels(digest, shown, end_t, _server_workers(run_dir)), "tiles": {"width": tw, "exact": exact},
            "exact_max": INTERACTIVE_EXACT_BARS,
            "queue": {"t": clean(q["t"]), "q": clean(q["queue"], 4), "note": queue_note},
            "curve": {**acc, "measure": measure}}


def _round_marks() -> dict[str, list[Any]]:
    """The synchronous rounds (start, end, straggler, its finish, the clients dropped at the deadline) and
    the drops the timeline marks: the report panels' (:class:`fedsim.output.panels.PanelStream`, gathered
    in the same pass as the digest), at most :data:`INTERACTIVE_MAX_MARKS` of each."""
    stream = _DIGEST.get("panels")
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
    chars = np.array([str(i) for i in range(len(kinds))] + ["."])
    levels = []
    f = 1
    while True:
        nb = -(-used // f)
        rows = []
        for c in [SERVER, *shown]:
            per = {}
            for key, h in cover.items():
                if key[1] == c:
                    x = np.zeros(nb * f)
                    x[:used] = h[:used]
                    per[key] = x.reshape(nb, f).sum(axis=1)
            keys, best = dominant(per, grid.width * f)
            codes = np.array([kinds.index(k[0]) for k in keys] + [len(kinds)])
            idx = codes[best] if keys else np.full(nb, len(kinds))  # (-1, idle: the last)
            rows.append("".join(chars[idx].tolist()))
        busy = np.zeros(nb * f)
        if ("server", SERVER) in cover:
            busy[:used] = cover[("server", SERVER)][:used]
        q = np.rint(busy_share(busy.reshape(nb, f).sum(axis=1), grid.width * f, workers) * (len(SHARE_DIGITS) - 1))
        levels.append({"f": f, "rows": rows, "share": "".join(np.array(list(SHARE_DIGITS))[q.astype(int)].tolist())})
        if nb <= AGG_MIN_BINS:
            break
        f *= 2
    present = sorted({k[0] for k in cover if k[0] in PAYLOADS})
    return {"t0": grid.origin, "bin": grid.width, "levels": levels, "kinds": list(kinds),
            "colours": [TIMELINE_COLOURS[k] for k in kinds], "payloads": present}


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


def html_report(run_dir: str | Path, missing: dict[str, str] | None = None) -> Path:
    """``report.html``: one self-contained page that opens in any browser without the run folder's other
    files and without a network: the summary with units, links to the reports of the runs it holds (per
    algorithm, per seed), an interactive timeline (zoom and pan over virtual time; hover a bar for client,
    phase, bytes, link rate and staleness) with the server queue and accuracy on the same time axis (plain
    SVG and a little inlined JavaScript), the check/probe tables when present, and every figure as PNG data.
    ``missing``: the figures that failed to draw, by name, with their one-line reason (listed on the page)."""
    return finish_html_report(html_report_body(run_dir), missing)


class ReportBody:
    """report.html up to its figures (:func:`html_report_body`): built while the figures are drawn
    elsewhere, then finished with them (:func:`finish_html_report`)."""

    def __init__(self, run_dir: Path, parts: list[str], link_up_later: bool) -> None:
        self.run_dir, self.parts, self.link_up_later = run_dir, parts, link_up_later


def html_report_body(run_dir: str | Path) -> ReportBody:
    """Everything of report.html but its figures (it reads no PNG)."""
    import html
    import json

    from fedsim.output.panels import (PANELS_CSS, ideal_links_note, nav_html, panels_html, server_summary_rows,
                                      with_formats)

    run_dir = Path(run_dir)
    link_up_later = False
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fedsim: {html.escape(run_dir.name)}</title>",
             "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:left}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}" + _INTERACTIVE_CSS + TABLE_CSS +
             PANELS_CSS +
             "</style></head><body>",
             f"<h1>fedsim run: {html.escape(run_dir.name)}</h1>"]
    stream = queue = None
    if trace_path(run_dir).exists():  # one streamed pass for the timeline and the panels
        _release_freed_memory(run_dir)
        digest = _report_digest(run_dir, INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS)
        stream = _DIGEST.get("panels")
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
    data = interactive_data(run_dir)
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


def finish_html_report(body: ReportBody, missing: dict[str, str] | None = None) -> Path:
    """Write report.html: ``body`` and every figure of the run folder, as PNG data, then "Figures not
    drawn" for each of ``missing`` (figure name → the one-line reason it failed), so that a reader sees
    a figure is absent and why instead of wondering."""
    import base64
    import html

    from fedsim.output.panels import link_up

    run_dir, parts = body.run_dir, list(body.parts)
    media = {".svg": "image/svg+xml", ".png": "image/png"}  # the run's figures, and a topology's PNG
    figures = sorted(p for p in run_dir.iterdir() if p.suffix in media and p.is_file())
    if figures:
        parts.append("<h2>Figures</h2>")
    for fig in figures:
        data64 = base64.b64encode(fig.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(fig.stem.replace('_', ' '))}</h3><img alt='{html.escape(fig.name)}' "
                     f"src='data:{media[fig.suffix]};base64,{data64}'>")
    if missing:
        parts.append("<h2 id='figures-missing'>Figures not drawn</h2><p class='hint'>These figures failed to draw; "
                     f"the rest of the run's outputs are complete (tracebacks in {FIGURES_ERROR_FILE}).</p><ul>" +
                     "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(reason)}</li>"
                             for name, reason in sorted(missing.items())) + "</ul>")
    parts.append("</body></html>")
    out = run_dir / "report.html"
    write_text(out, "\n".join(parts))
    if body.link_up_later:  # the runs listed above link up to this page, now that it exists
        link_up(run_dir)
    _DIGEST.clear()  # the run's outputs are written: its digest is not needed any more
    return out


_INTERACTIVE_CSS = (
    ".fs-wrap{position:relative;user-select:none}.fs-wrap svg{display:block;background:#fff;cursor:grab}"
    ".fs-wrap svg.drag{cursor:grabbing}.fs-tip{position:absolute;pointer-events:none;background:#222;color:#fff;"
    "font-size:12px;padding:4px 7px;border-radius:3px;white-space:pre;display:none;z-index:2}"
    ".fs-bar:hover{stroke:#000;stroke-width:1}.fs-tools button{margin-right:4px}.hint{font-size:13px;color:#555}"
    ".fs-legend span{display:inline-block;margin-right:12px;font-size:12px}.fs-legend i{display:inline-block;"
    "width:12px;height:10px;margin-right:4px;vertical-align:middle}")

#: The style of :func:`table_html`'s tables (a run's, a sweep's and a seeds folder's pages).
TABLE_CSS = (".fs-table{overflow-x:auto;max-width:100%}.fs-table table{font-size:12px}"
             ".fs-table th{white-space:normal}.fs-table td small{white-space:nowrap;color:#555}")

_INTERACTIVE_HTML = (
    "<div class='fs-tools'><button id='fs-in' type='button'>zoom in</button><button id='fs-out' type='button'>"
    "zoom out</button><button id='fs-reset' type='button'>whole run</button> <span id='fs-range' class='hint'>"
    "</span></div><div class='fs-legend' id='fs-legend'></div><div class='fs-wrap' id='fs-wrap'>"
    "<svg id='fs-timeline' xmlns='http://www.w3.org/2000/svg'></svg><svg id='fs-queue' "
    "xmlns='http://www.w3.org/2000/svg'></svg><svg id='fs-curve' xmlns='http://www.w3.org/2000/svg'></svg>"
    "<div class='fs-tip' id='fs-tip'></div></div>")

# Plain SVG and DOM calls, no library: the page works offline and from a file.
_INTERACTIVE_JS = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("fedsim-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 940, L = 80, R = 12, PW = W - L - R, ROW = 14, EXACT_MAX = D.exact_max;
  var full = [0, Math.max(D.t_end, 1e-9)], view = [full[0], full[1]];
  // the zoom's floor: a millionth of the run (tick labels still differ there)
  var FLOOR = Math.min(full[1] - full[0], Math.max((full[1] - full[0]) * 1e-6, 1e-9));
  var B = D.bars, n = B[0].length, A = D.agg, T = D.tiles;
  var WH = D.whats || [], PC = D.purpose_colours || {};
  function whatOf(j) { return B[9] && B[9][j] !== null && B[9][j] >= 0 ? WH[B[9][j]] : null; }
  // what a transfer carries: split learning's activations (up) and gradients (down), else a model
  function purpose(j) {
    var k = D.kinds[B[1][j]], w = whatOf(j);
    if (k !== "download" && k !== "upload") return null;
    if (w === null) return "model";
    var low = w.toLowerCase();
    if (low.indexOf("activ") >= 0 || low.indexOf("smash") >= 0 || low.indexOf("feature") >= 0) return "activations";
    if (low.indexOf("grad") >= 0) return "gradients";
    return w;
  }
  function barColour(j) { var p = purpose(j); return (p && PC[p]) || D.colours[B[1][j]]; }
  // the rows shown, top to bottom, as indices of the page's rows (0: the server); the per-client panel's
  // picker changes them (window.fedsimTimeline.setRows)
  var disp = [0], rowPos = {}, dataRow = {}, rowsDirty = true;
  for (var r0 = 1; r0 < D.rows.length && r0 <= (D.shown || 40); r0++) disp.push(r0);
  (D.clients || []).forEach(function (c, i) { dataRow[c] = i + 1; });
  function indexRows() { rowPos = {}; disp.forEach(function (d, i) { rowPos[d] = i; }); }
  indexRows();
  function rowOf(c) { var d = dataRow[c]; return d === undefined || rowPos[d] === undefined ? -1 : rowPos[d]; }
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function sx(t) { return L + (t - view[0]) / (view[1] - view[0]) * PW; }
  //@format
  function ticks(a, b) {
    var span = b - a, step = Math.pow(10, Math.floor(Math.log10(span / 8)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 8) { step *= m; return true; } return false; });
    var out = [], k0 = Math.ceil(a / step - 1e-9),
        dec = Math.max(0, Math.min(15, -Math.floor(Math.log10(step) + 1e-9)));  // the step's decimals
    for (var k = k0; k * step <= b + step * 1e-9; k++) out.push({t: k * step, label: String(+(k * step).toFixed(dec))});
    return out;
  }
  // the three charts: timeline (rows), queue, accuracy; one x axis (view) for all
  var tl = document.getElementById("fs-timeline"), qs = document.getElementById("fs-queue"),
      cs = document.getElementById("fs-curve"), tip = document.getElementById("fs-tip");
  var TH = disp.length * ROW + 34, CH = 120;
  [[tl, TH], [qs, CH], [cs, CH]].forEach(function (p) {
    p[0].setAttribute("width", W); p[0].setAttribute("height", p[1]);
    p[0].setAttribute("viewBox", "0 0 " + W + " " + p[1]);
    var clip = el("clipPath", {id: p[0].id + "-clip"}, el("defs", {}, p[0]));
    el("rect", {x: L, y: 0, width: PW, height: p[1]}, clip);
  });
  var rowsG = el("g", {id: "fs-rows"}, tl);
  function drawRows() {
    clear(rowsG);
    TH = disp.length * ROW + 34;
    tl.setAttribute("height", TH); tl.setAttribute("viewBox", "0 0 " + W + " " + TH);
    tl.querySelector("clipPath rect").setAttribute("height", TH);
    cursors[0].setAttribute("y2", TH);
    disp.forEach(function (d, i) {
      el("text", {x: L - 6, y: 4 + i * ROW + ROW / 2 + 3, "text-anchor": "end", "font-size": 10}, rowsG).textContent = D.rows[d];
      if (i % 2 === 0) el("rect", {x: L, y: 4 + i * ROW, width: PW, height: ROW, fill: "#f7f7f7"}, rowsG);
    });
    rowsDirty = false;
  }
  var legend = document.getElementById("fs-legend");
  function swatch(colour, label, mark) {
    var s = document.createElement("span"), sw = document.createElement("i");
    if (mark) { sw.textContent = mark; sw.style.color = colour; sw.style.fontStyle = "normal"; sw.style.width = "auto"; }
    else sw.style.background = colour;
    s.appendChild(sw); s.appendChild(document.createTextNode(label)); legend.appendChild(s);
  }
  D.kinds.forEach(function (k, i) { swatch(D.colours[i], k === "wait" ? "queue wait" : k); });
  var carried = {};
  for (var jj = 0; jj < n; jj++) { var pj = purpose(jj); if (pj && PC[pj]) carried[pj] = true; }
  ((A && A.payloads) || []).forEach(function (p) { carried[p] = true; });  // (also where no single bar is held)
  Object.keys(carried).sort().forEach(function (p) { swatch(PC[p], p + (p === "gradients" ? " (download)" : " (upload)")); });
  var RD = D.rounds || [], DR = D.drops || [];
  if (RD.length) { swatch("#556", "round start", "┆"); swatch("#c9a100", "round's straggler finishes", "▼"); }
  if (DR.length) swatch("#d62728", "dropped", "×");
  var barsG = el("g", {"clip-path": "url(#fs-timeline-clip)", id: "fs-bars"}, tl);
  var marksG = el("g", {"clip-path": "url(#fs-timeline-clip)", id: "fs-marks"}, tl);
  function clear(g) { while (g.firstChild) g.removeChild(g.firstChild); }
  // Where the page holds every bar (a tile kept whole) and the view has few enough of them, the bars are
  // drawn exactly, at their true width; everywhere else each pixel column shows the phase that fills most
  // of it (the aggregated levels, the PNG's rule): never a widened bar, never a silent gap.
  function tileExact(t) {
    if (!T || !(T.width > 0)) return false;
    var i = Math.floor(t / T.width);
    return i >= 0 && i < T.exact.length && T.exact.charAt(i) === "1";
  }
  function level(px) {
    var best = A.levels[0];
    A.levels.forEach(function (lv) { if (A.bin * lv.f <= px) best = lv; });
    return best;
  }
  // the server's busy share of each pixel column (the time-weighted mean of its bins' shares)
  var SD = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  function shareColumns(lv, px) {
    var s = lv.share || "", bw = A.bin * lv.f, out = new Array(PW);
    for (var x = 0; x < PW; x++) {
      var ta = view[0] + x * px - A.t0, tb = ta + px, ia = Math.max(0, Math.floor(ta / bw)),
          ib = Math.min(s.length - 1, Math.floor(tb / bw)), sum = 0;
      for (var k = ia; k <= ib; k++) {
        var o = Math.min(tb, (k + 1) * bw) - Math.max(ta, k * bw);
        if (o > 0) sum += o * SD.indexOf(s.charAt(k)) / (SD.length - 1);
      }
      out[x] = sum / px;
    }
    return out;
  }
  function aggColumns(row, lv, px) {
    var s = lv.rows[row], bw = A.bin * lv.f, out = new Array(PW);
    for (var x = 0; x < PW; x++) {
      var ta = view[0] + x * px - A.t0, tb = ta + px, ia = Math.max(0, Math.floor(ta / bw)),
          ib = Math.min(s.length - 1, Math.floor(tb / bw)), w = {}, best = ".", bestW = 0;
      for (var k = ia; k <= ib; k++) {
        var c = s.charAt(k), o = Math.min(tb, (k + 1) * bw) - Math.max(ta, k * bw);
        if (o <= 0) continue;
        w[c] = (w[c] || 0) + o;
        if (w[c] > bestW) { bestW = w[c]; best = c; }
      }
      out[x] = best;
    }
    return out;
  }
  var shownBars = 0, shownAgg = 0;
  function drawBars() {
    clear(barsG);
    var px = (view[1] - view[0]) / PW, inView = [], j, x;
    for (j = 0; j < n; j++) if (B[3][j] >= view[0] && B[2][j] <= view[1] && rowPos[B[0][j]] !== undefined) inView.push(j);
    var few = inView.length <= EXACT_MAX, exactCol = new Array(PW), anyExact = false;
    for (x = 0; x < PW; x++) {
      exactCol[x] = few && tileExact(view[0] + (x + 0.5) * px);
      anyExact = anyExact || exactCol[x];
    }
    shownAgg = 0;
    if (A) {
      var lv = level(px);
      // the server's row: a bar per pixel column as tall as its busy share (whole pixels, each column's
      // rounding carried to the next, so the drawn area is the utilisation); a client's: its dominant phase
      var sh = shareColumns(lv, px), H = ROW - 3, carry = 0, y0 = 4 + 1.5;
      for (x = 0; x < PW;) {
        var hx = exactCol[x] ? 0 : Math.floor(sh[x] * H + carry + 0.5);
        carry = exactCol[x] ? 0 : carry + sh[x] * H - hx;
        var x2 = x + 1, tot = sh[x];
        while (x2 < PW && !exactCol[x2] && !exactCol[x]) {
          var h2 = Math.floor(sh[x2] * H + carry + 0.5);
          if (h2 !== hx) break;
          carry += sh[x2] * H - h2; tot += sh[x2]; x2++;
        }
        if (hx > 0)
          el("rect", {"class": "fs-agg fs-share", x: L + x, y: y0 + H - hx, width: x2 - x, height: hx,
                      fill: D.colours[D.kinds.indexOf("server")], "data-r": 0, "data-share": (tot / (x2 - x)).toFixed(4),
                      "data-a": view[0] + x * px, "data-b": view[0] + x2 * px, "shape-rendering": "crispEdges"}, barsG);
        if (hx > 0) shownAgg++;
        x = x2;
      }
      for (var ri = 1; ri < disp.length; ri++) {
        var r = disp[ri], cols = aggColumns(r, lv, px);
        for (x = 0; x < PW;) {
          var c = exactCol[x] ? "." : cols[x], x1 = x + 1;
          while (x1 < PW && (exactCol[x1] ? "." : cols[x1]) === c) x1++;
          if (c !== ".") {
            el("rect", {"class": "fs-agg", x: L + x, y: 4 + ri * ROW + 1.5, width: x1 - x, height: ROW - 3,
                        fill: A.colours[+c], "data-r": r, "data-c": c, "data-a": view[0] + x * px,
                        "data-b": view[0] + x1 * px}, barsG);
            shownAgg++;
          }
          x = x1;
        }
      }
    }
    shownBars = 0;
    if (!anyExact && A) return;
    inView.forEach(function (j) {
      var x0 = sx(B[2][j]), x1 = sx(B[3][j]);
      var mid = Math.floor(((Math.max(x0, L) + Math.min(x1, L + PW)) / 2) - L);
      if (A && !exactCol[Math.max(0, Math.min(PW - 1, mid))] && !tileExact(B[2][j])) return;
      el("rect", {"class": "fs-bar", x: x0.toFixed(2), width: Math.max(0, x1 - x0).toFixed(2),
                  y: 4 + rowPos[B[0][j]] * ROW + 1.5, height: ROW - 3, fill: barColour(j), "data-i": j}, barsG);
      shownBars++;
    });
  }
  var tAxis = el("g", {}, tl), qAxis = el("g", {}, qs), cAxis = el("g", {}, cs);
  var qPath = el("path", {fill: "none", stroke: D.colours[4], "stroke-width": 1.2, "clip-path": "url(#fs-queue-clip)"}, qs);
  var cPath = el("path", {fill: "none", stroke: "#1f77b4", "stroke-width": 1.5, "clip-path": "url(#fs-curve-clip)"}, cs);
  var cDots = el("g", {"clip-path": "url(#fs-curve-clip)"}, cs);
  var cursors = [tl, qs, cs].map(function (svg) {
    return el("line", {y1: 0, y2: svg.getAttribute("height"), stroke: "#888", "stroke-dasharray": "3,3",
                       visibility: "hidden", "pointer-events": "none"}, svg);
  });
  var qMax = Math.max.apply(null, [1].concat(D.queue.q.filter(function (v) { return v !== null; })));
  var cy = D.curve.y.filter(function (v) { return v !== null; });
  var cMin = D.curve.measure === "accuracy" ? 0 : Math.min.apply(null, cy.concat([0])),
      cMax = D.curve.measure === "accuracy" ? 1 : Math.max.apply(null, cy.concat([1e-12]));
  function yq(v) { return CH - 22 - v / qMax * (CH - 34); }
  function yc(v) { return CH - 22 - (v - cMin) / (cMax - cMin) * (CH - 34); }
  function axis(g, h, label, yTicks, yOf, fmtY) {
    while (g.firstChild) g.removeChild(g.firstChild);
    el("line", {x1: L, x2: L + PW, y1: h - 22, y2: h - 22, stroke: "#333"}, g);
    ticks(view[0], view[1]).forEach(function (tk) {
      var x = sx(tk.t);
      el("line", {x1: x, x2: x, y1: h - 22, y2: h - 18, stroke: "#333"}, g);
      el("text", {x: x, y: h - 7, "text-anchor": "middle", "font-size": 10, "class": "fs-tick"}, g)
        .textContent = tk.label;
    });
    el("text", {x: L + PW, y: h - 24, "text-anchor": "end", "font-size": 10, fill: "#555"}, g).textContent = label;
    (yTicks || []).forEach(function (v) {
      el("text", {x: L - 6, y: yOf(v) + 3, "text-anchor": "end", "font-size": 10}, g).textContent = fmtY(v);
      el("line", {x1: L, x2: L + PW, y1: yOf(v), y2: yOf(v), stroke: "#eee"}, g);
    });
  }
  function stepPath(ts, vs, yOf, step) {
    var d = "", started = false, lo = view[0], hi = view[1];
    for (var i = 0; i < ts.length; i++) {
      if (ts[i] === null || vs[i] === null) continue;
      var next = i + 1 < ts.length ? ts[i + 1] : full[1];
      if (next < lo || ts[i] > hi) { if (ts[i] > hi) break; continue; }
      var x = Math.max(L - 2, Math.min(L + PW + 2, sx(ts[i]))), y = yOf(vs[i]);
      if (!started) { d += "M" + x.toFixed(1) + "," + y.toFixed(1); started = true; }
      else if (step) d += "V" + y.toFixed(1);
      else d += "L" + x.toFixed(1) + "," + y.toFixed(1);
      if (step) d += "H" + Math.max(L - 2, Math.min(L + PW + 2, sx(Math.min(next, full[1])))).toFixed(1);
    }
    return d;
  }
  // round structure: a dashed line where each round starts, the straggler's finish (▼ on its row, or the
  // server's when its row is not shown), drops (× where they happen)
  var shownMarks = 0;
  function roundTip(r) {
    return "round " + r.round + ": " + fmtS(r.start) + " → " + fmtS(r.end) + " (" + fmtS(r.end - r.start) + ")" +
      (r.straggler !== null ? "\nstraggler: client " + r.straggler + ", finished at " + fmtS(r.done) : "") +
      (r.dropped.length ? "\ndropped at the deadline: clients " + r.dropped.join(", ") : "");
  }
  function drawMarks() {
    clear(marksG);
    shownMarks = 0;
    var rs = RD.filter(function (r) { return r.start !== null && r.end !== null && r.end >= view[0] && r.start <= view[1]; });
    var lines = rs.length <= 400;  // (more: the rounds panel below shows them as bands)
    rs.forEach(function (r) {
      var tip = roundTip(r);
      if (lines && r.start >= view[0]) {
        var x = sx(r.start);
        el("line", {x1: x, x2: x, y1: 2, y2: TH - 22, stroke: "#556", "stroke-dasharray": "2,3", "pointer-events": "none"}, marksG);
        el("rect", {"class": "fs-round", x: x - 3, y: 0, width: 6, height: 4 + ROW, fill: "transparent", "data-tip": tip}, marksG);
        shownMarks++;
      }
      if (r.straggler !== null && r.done !== null && r.done >= view[0] && r.done <= view[1]) {
        var pos = Math.max(rowOf(r.straggler), 0), xs = sx(r.done), y = 4 + pos * ROW;
        el("path", {"class": "fs-straggler", d: "M" + (xs - 4) + "," + (y + 1) + "L" + (xs + 4) + "," + (y + 1) + "L" + xs +
                    "," + (y + ROW - 2) + "Z", fill: "#c9a100", stroke: "#5a4800", "stroke-width": 0.6, "data-tip": tip}, marksG);
        shownMarks++;
      }
    });
    DR.forEach(function (d) {
      if (d.t < view[0] || d.t > view[1]) return;
      var pos = d.client === null ? 0 : Math.max(rowOf(d.client), 0), x = sx(d.t), y = 4 + pos * ROW + ROW / 2;
      el("path", {d: "M" + (x - 4) + "," + (y - 4) + "L" + (x + 4) + "," + (y + 4) + "M" + (x + 4) + "," + (y - 4) + "L" +
                  (x - 4) + "," + (y + 4), stroke: "#d62728", "stroke-width": 2, "pointer-events": "none"}, marksG);
      el("rect", {"class": "fs-drop", x: x - 5, y: y - 5, width: 10, height: 10, fill: "transparent",
                  "data-tip": "client " + d.client + " dropped at " + fmtS(d.t) + (d.reason ? " (" + d.reason + ")" : "")}, marksG);
      shownMarks++;
    });
  }
  var pending = false;
  function render() {
    pending = false;
    if (rowsDirty) drawRows();
    drawBars();
    drawMarks();
    axis(tAxis, TH, "virtual time (s)");
    axis(qAxis, CH, "server queue, requests waiting" + (D.queue.note ? " (" + D.queue.note + ")" : ""),
         [0, qMax], yq, function (v) { return +v.toPrecision(3); });
    axis(cAxis, CH, "test " + D.curve.measure, [cMin, cMax], yc, function (v) { return +v.toPrecision(3); });
    qPath.setAttribute("d", stepPath(D.queue.t, D.queue.q, yq, true));
    cPath.setAttribute("d", stepPath(D.curve.t, D.curve.y, yc, false));
    while (cDots.firstChild) cDots.removeChild(cDots.firstChild);
    D.curve.t.forEach(function (t, i) {
      if (t === null || D.curve.y[i] === null || t < view[0] || t > view[1]) return;
      el("circle", {cx: sx(t), cy: yc(D.curve.y[i]), r: 2, fill: "#1f77b4"}, cDots);
    });
    document.getElementById("fs-range").textContent =
      "showing " + fmtS(view[0]) + " – " + fmtS(view[1]) + " of " + fmtS(full[1]);
    window.fedsimView = {start: view[0], end: view[1], bars: shownBars, aggregated: shownAgg, floor: FLOOR,
                         marks: shownMarks, rows: disp.slice(1).map(function (d) { return D.clients[d - 1]; })};
  }
  function schedule() { if (!pending) { pending = true; window.requestAnimationFrame(render); } }
  function setView(a, b) {
    var span = Math.max(b - a, FLOOR);
    span = Math.min(span, full[1] - full[0]);
    a = Math.max(full[0], Math.min(a, full[1] - span));
    view = [a, a + span];
    schedule();
  }
  function zoom(factor, centreT) {
    var c = centreT === undefined ? (view[0] + view[1]) / 2 : centreT;
    setView(c - (c - view[0]) * factor, c + (view[1] - c) * factor);
  }
  function tAt(svg, ev) {
    var box = svg.getBoundingClientRect();
    return view[0] + ((ev.clientX - box.left) * W / box.width - L) / PW * (view[1] - view[0]);
  }
  var drag = null;
  [tl, qs, cs].forEach(function (svg) {
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      zoom(Math.exp(ev.deltaY * 0.002), tAt(svg, ev));
    }, {passive: false});
    svg.addEventListener("mousedown", function (ev) {
      drag = {x: ev.clientX, view: view.slice(), w: svg.getBoundingClientRect().width};
      svg.classList.add("drag");
    });
    svg.addEventListener("dblclick", function () { setView(full[0], full[1]); });
    svg.addEventListener("mousemove", function (ev) {
      var box = svg.getBoundingClientRect(), x = (ev.clientX - box.left) * W / box.width;
      cursors.forEach(function (c) {
        c.setAttribute("x1", x); c.setAttribute("x2", x);
        c.setAttribute("visibility", x >= L && x <= L + PW ? "visible" : "hidden");
      });
    });
    svg.addEventListener("mouseleave", function () {
      cursors.forEach(function (c) { c.setAttribute("visibility", "hidden"); });
    });
  });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return;
    var dt = -(ev.clientX - drag.x) * W / drag.w / PW * (drag.view[1] - drag.view[0]);
    setView(drag.view[0] + dt, drag.view[1] + dt);
  });
  window.addEventListener("mouseup", function () {
    drag = null;
    [tl, qs, cs].forEach(function (svg) { svg.classList.remove("drag"); });
  });
  var wrap = document.getElementById("fs-wrap");
  function placeTip(ev) {  // beside the pointer, flipped to stay inside the window
    var box = wrap.getBoundingClientRect(), vw = document.documentElement.clientWidth || window.innerWidth,
        vh = window.innerHeight, w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + 12, y = ev.clientY + 12;
    if (x + w > vw - 4) x = ev.clientX - 12 - w;
    if (y + h > vh - 4) y = ev.clientY - 12 - h;
    tip.style.left = (Math.max(4, x) - box.left) + "px";
    tip.style.top = (Math.max(4, y) - box.top) + "px";
  }
  function kindName(k) { return k === "wait" ? "queue wait at the server" : k; }
  barsG.addEventListener("mouseover", function (ev) {
    var t = ev.target, i = t.getAttribute && t.getAttribute("data-i");
    if (t.getAttribute && t.getAttribute("data-share") !== null) {
      tip.textContent = "server: busy " + (100 * +t.getAttribute("data-share")).toFixed(1) + "% of " +
        fmtS(+t.getAttribute("data-a")) + " → " + fmtS(+t.getAttribute("data-b")) +
        "\nthe server's bar is as tall as the share of each pixel column's time its workers were busy\n" +
        "(its mean over the run is the utilisation); zoom in to see single requests";
      tip.style.display = "block";
      placeTip(ev);
      return;
    }
    if (t.getAttribute && t.getAttribute("data-c") !== null) {
      tip.textContent = D.rows[+t.getAttribute("data-r")] + ": mostly " + kindName(A.kinds[+t.getAttribute("data-c")]) +
        "\n" + fmtS(+t.getAttribute("data-a")) + " → " + fmtS(+t.getAttribute("data-b")) +
        "\neach pixel column shows the phase that fills most of it;\nzoom in to see single intervals";
      tip.style.display = "block";
      placeTip(ev);
      return;
    }
    if (i === null || i === undefined) return;
    i = +i;
    var kind = D.kinds[B[1][i]], lines = [];
    lines.push((B[0][i] === 0 ? (B[4][i] === null ? "server, a request of no single client (e.g. an aggregation)"
                                 : "server, request of client " + B[4][i]) : "client " + B[4][i]) + ": " +
               (kind === "wait" ? "queue wait at the server" : kind));
    lines.push(fmtS(B[2][i]) + " → " + fmtS(B[3][i]) + "  (" + fmtS(B[3][i] - B[2][i]) + ")");
    if (kind === "download" || kind === "upload") {
      lines.push("bytes " + fmtB(B[5][i]) + ", link rate " + fmtRate(B[6][i]));
      // the bar's length: the link's latency, any wait for a shared medium, and the airtime (bits / rate)
      var dur = B[3][i] - B[2][i], air = B[6][i] > 0 && B[5][i] !== null ? B[5][i] * 8 / B[6][i] : null,
          qw = B[7][i] || 0;
      if (air !== null)
        lines.push("link latency " + fmtS(Math.max(dur - qw - air, 0)) + " + " + (qw > 0 ? "wait " + fmtS(qw) + " + " : "") +
                   "airtime " + fmtS(air) + " = " + fmtS(dur));
      else if (dur <= 0) lines.push("0 s: an ideal link (no latency, no airtime)");
    }
    var w = whatOf(i), p = purpose(i);
    if (p !== null) lines.push("carries " + p + (w !== null && w !== p ? " (the trace's what: " + w + ")" : ""));
    else if (kind === "server" || kind === "wait") lines.push("request: " + (w === null ? "not named in the trace" : w));
    else if (w !== null) lines.push("what: " + w);
    if (kind === "server" && B[7][i] !== null) lines.push("waited " + fmtS(B[7][i]) + " in the queue");
    if (kind !== "offline" && kind !== "server" && kind !== "wait")
      lines.push("staleness of the update " + (B[8][i] === null ? "– (not applied)" : B[8][i] + " versions"));
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    placeTip(ev);
  });
  barsG.addEventListener("mousemove", placeTip);
  barsG.addEventListener("mouseout", function () { tip.style.display = "none"; });
  marksG.addEventListener("mouseover", function (ev) {
    var text = ev.target.getAttribute && ev.target.getAttribute("data-tip");
    if (!text) return;
    tip.textContent = text;
    tip.style.display = "block";
    placeTip(ev);
  });
  marksG.addEventListener("mousemove", placeTip);
  marksG.addEventListener("mouseout", function () { tip.style.display = "none"; });
  window.fedsimTimeline = {
    // show these clients' rows (those the page holds), in this order, under the server's
    setRows: function (ids) {
      var next = [0];
      ids.forEach(function (c) { var d = dataRow[c]; if (d !== undefined && next.indexOf(d) < 0) next.push(d); });
      disp = next; indexRows(); rowsDirty = true; schedule();
      return disp.slice(1).map(function (d) { return D.clients[d - 1]; });
    }
  };
  document.getElementById("fs-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("fs-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("fs-reset").addEventListener("click", function () { setView(full[0], full[1]); });
  render();
})();
"""


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
