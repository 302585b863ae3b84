"""Figures every run writes: accuracy against virtual time, and the per-client timeline.

The timeline is the picture that teaches FL systems: one row per client, coloured bars for download,
compute, upload and server work, gaps where a client waits for the others.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedsim.sim.trace import load_trace, trace_path  # noqa: E402

#: Bars drawn at most on a timeline (a readable picture, and a fast one for million-event traces).
TIMELINE_MAX_EVENTS = 3000

#: The narrowest timeline bar, in pixels: compute of a few ms next to seconds of upload stays visible.
MIN_BAR_PX = 2

#: Above this many queue-length changes the server-queue figure is binned (a step plot becomes a solid block).
QUEUE_STEP_MAX = 400

PHASE_COLOURS = {
    "download": "#4c9be8",
    "compute": "#f28e2b",
    "upload": "#59a14f",
    "wait": "#d3d3d3",
    "server": "#b07aa1",
    "offline": "#333333",
}


def accuracy_figure(metrics: dict[str, pd.DataFrame], path: Path, title: str = "", column: str = "accuracy") -> None:
    """Test accuracy (or another metrics column, e.g. the loss of a regression task) against virtual time,
    one line per labelled run."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, m in metrics.items():
        if len(m):
            ax.plot(m["t"], m[column], marker=".", label=label)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"test {column}")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def timeline_figure(trace: pd.DataFrame, path: Path, *, max_clients: int = 30, until: float | None = None,
                    since: float = 0.0, max_bars: int = 3000) -> None:
    """Per-client Gantt chart of download / compute / upload, plus server service and queue wait.

    The window is ``[since, until]`` (default: the whole run).  When it holds more than ``max_bars`` bars,
    each client's bars of one phase closer than a pixel-width apart are merged (so every phase stays
    visible at the scale of the whole run); the title says the window, the clients shown and whether
    bars were merged.  Every bar is at least ``MIN_BAR_PX`` pixels wide and compute is drawn last, so a
    phase far shorter than the window (compute next to seconds of upload) still shows; the legend gives
    each phase's mean duration, so a widened bar is not mistaken for a long one."""
    fig, ax = plt.subplots(figsize=(9, 0.25 * min(max_clients, 30) + 2))
    durations: dict[str, float] = {}
    note = ""
    if len(trace) and "client" in trace:
        kinds = trace["kind"].to_numpy(dtype=object)
        client = trace["client"].to_numpy(dtype=float, na_value=np.nan)
        phase = np.isin(kinds, ["download", "compute", "upload", "offline"])
        present = client[phase]
        all_clients = sorted(int(c) for c in np.unique(present[~np.isnan(present)]))
        del present
        clients = all_clients[:max_clients]
        row = {c: i + 1 for i, c in enumerate(clients)}
        end = float(trace["t"].max()) if until is None else until
        # numpy masks and index arrays over the columns: a trace of millions of records is never copied
        s0 = trace["start"].to_numpy(dtype=float, na_value=np.nan)
        e0 = trace["end"].to_numpy(dtype=float, na_value=np.nan)
        visible = np.flatnonzero(phase & (e0 >= since) & (s0 <= end) & np.isin(client, clients))
        merged = len(visible) > max_bars
        pixel = (end - since) / 900.0  # about one pixel of the 9-inch axis at 120 dpi
        gap = pixel if merged else 0.0
        present_kinds = set(kinds[visible].tolist())
        # compute last: drawn over its neighbours, so its narrow bars are never covered by a widened transfer
        for kind in sorted(present_kinds, key=lambda k: (k == "compute", k)):  # phases, then clients
            idx = visible[kinds[visible] == kind]
            durations[kind] = float(np.nanmean(e0[idx] - s0[idx])) if len(idx) else 0.0
            idx = idx[np.argsort(client[idx], kind="stable")]
            cuts = np.flatnonzero(np.diff(client[idx])) + 1
            for part in np.split(idx, cuts):
                _bars(ax, s0[part], e0[part], gap, row[int(client[part[0]])], PHASE_COLOURS[kind],
                      min_width=MIN_BAR_PX * pixel)
        del visible, s0, e0, client, kinds, phase
        server = trace.loc[(trace["kind"] == "server") & (trace["end"] >= since) & (trace["start"] <= end),
                           [c for c in ("client", "start", "end", "wait") if c in trace]]
        if len(server):
            durations["server"] = float((server["end"] - server["start"]).mean())
            # one call per row (a call per request made a run with 10^5 server requests take minutes)
            _bars(ax, server["start"], server["end"], gap, 0, PHASE_COLOURS["server"], min_width=MIN_BAR_PX * pixel)
            if "client" in server:
                # a request's queueing is drawn on the row of the client whose update waits
                waits = server[(server["wait"] > 0) & server["client"].isin(clients)]
                if len(waits):
                    durations["wait"] = float(waits["wait"].mean())
                for c, g in waits.groupby("client"):
                    _bars(ax, g["start"] - g["wait"], g["start"], gap, row[int(c)], PHASE_COLOURS["wait"],
                          min_width=MIN_BAR_PX * pixel)
        ax.set_yticks([0] + [row[c] for c in clients])
        ax.set_yticklabels(["server"] + [f"client {c}" for c in clients], fontsize=7)
        ax.set_xlim(since, end)
        shown = f"all {len(all_clients)} clients" if len(clients) == len(all_clients) else \
            f"clients {clients[0]}–{clients[-1]} ({len(clients)} of {len(all_clients)})"
        note = (f"\n{shown}, virtual time {since:.4g}–{end:.4g} s" + (", nearby bars merged" if merged else "")
                + f"; bars at least {MIN_BAR_PX} px wide")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PHASE_COLOURS.values()]
    names = {"download": "download", "compute": "compute", "upload": "upload", "wait": "queue wait",
             "server": "server", "offline": "offline"}
    labels = [names[k] + (f"\n(mean {fmt_seconds(durations[k])})" if k in durations and k != "offline" else "")
              for k in PHASE_COLOURS]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=6, fontsize=8, frameon=False)
    ax.set_xlabel("virtual time (s)")
    ax.set_title("who computes, transmits and waits" + note, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _bars(ax: Any, starts: Any, ends: Any, gap: float, y: float, colour: str, min_width: float = 0.0) -> None:
    """One row of a Gantt chart: intervals closer than ``gap`` merged, each at least ``max(gap, min_width)``
    wide (a bar narrower than a pixel or two is widened, so short phases remain visible), drawn in one call.  Merged in
    numpy (sorted by start, then end): a new bar begins where a start lies more than ``gap`` past every
    earlier end, and ends at the largest end of its intervals."""
    s = np.asarray(pd.to_numeric(starts), dtype=float)
    e = np.asarray(pd.to_numeric(ends), dtype=float)
    if not len(s):
        return
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.concatenate([[True], s[1:] - reach[:-1] > gap]))
    b0, b1 = s[first], np.maximum.reduceat(e, first)
    ax.broken_barh(list(zip(b0.tolist(), np.maximum(b1 - b0, max(gap, min_width)).tolist())), (y - 0.4, 0.8),
                   facecolors=colour)


def link_rate_figure(trace: pd.DataFrame, path: Path) -> bool:
    """Distribution of the achieved rate of every transfer (bits / airtime), per direction."""
    if "rate_bps" not in trace:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for kind, colour in (("upload", PHASE_COLOURS["upload"]), ("download", PHASE_COLOURS["download"])):
        r = pd.to_numeric(trace.loc[trace["kind"] == kind, "rate_bps"], errors="coerce").dropna() / 1e6
        if len(r):
            ax.hist(r, bins=40, alpha=0.6, color=colour, label=f"{kind} ({len(r)} transfers)")
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("achieved rate (Mbit/s)")
    ax.set_ylabel("transfers")
    ax.set_title("link-rate distribution")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def count_axis(ax: Any, values: Any) -> None:
    """A y axis for counts: integer ticks from 0, and a readable range when the series is constant
    (a flat zero queue is drawn on 0..1, not on ±0.04)."""
    from matplotlib.ticker import MaxNLocator

    vals = pd.to_numeric(pd.Series(values), errors="coerce").dropna()
    top = float(vals.max()) if len(vals) else 0.0
    ax.set_ylim(-0.05 * max(top, 1.0), max(top, 1.0) * 1.1)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def queue_length(server: pd.DataFrame) -> pd.DataFrame:
    """Server queue length (requests waiting, not in service) as a step function of time: one row per
    instant at which it changes, the length after every arrival and start of service at that instant."""
    start = server["start"].to_numpy(dtype=float, na_value=np.nan)
    arrive = start - server["wait"].to_numpy(dtype=float, na_value=np.nan)
    t = np.concatenate([arrive, start])
    d = np.repeat(np.array([1, -1], dtype=np.int64), len(start))
    keep = ~np.isnan(t)  # a request without times adds nothing
    t, d = t[keep], d[keep]
    order = np.lexsort((d, t))
    t, queue = t[order], np.cumsum(d[order])
    last = np.flatnonzero(np.append(t[1:] != t[:-1], True))
    return pd.DataFrame({"t": t[last], "queue": queue[last]})


def binned_queue(q: pd.DataFrame, t0: float, t1: float, bins: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queue-length step function ``q`` (from :func:`queue_length`) over ``bins`` equal bins of
    ``[t0, t1]``: bin edges, the time-averaged length in each bin and its largest value in the bin."""
    t = q["t"].to_numpy(dtype=float)
    y = q["queue"].to_numpy(dtype=float)
    edges = np.linspace(t0, t1, bins + 1)
    if not len(t):
        return edges, np.zeros(bins), np.zeros(bins)
    seg = np.diff(np.append(t, max(t1, t[-1])))
    area = np.concatenate([[0.0], np.cumsum(y * seg)])  # integral of the queue up to each change

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        ok = i >= 0
        ic = np.clip(i, 0, None)
        return np.where(ok, area[ic] + y[ic] * (x - t[ic]), 0.0)

    mean = np.diff(integral(edges)) / np.diff(edges)
    first = np.clip(np.searchsorted(t, edges[:-1], side="right") - 1, 0, None)
    last = np.maximum(np.searchsorted(t, edges[1:], side="left"), first + 1)
    peak = np.array([y[a:b].max() for a, b in zip(first, last)])
    return edges, mean, peak


def server_queue_figure(trace: pd.DataFrame, path: Path) -> bool:
    """Requests waiting at the server against virtual time.  A few hundred changes: the step function
    itself.  More (a solid block as a step plot): per bin of 1/200 of the run, the time-averaged length
    as a line and the bin's largest length as a light band.  A dashed line is the time average over the
    run; a server that never queued says so instead of drawing a bare line at zero."""
    is_server = (trace["kind"] == "server").to_numpy()
    if not is_server.any():
        return False
    server = pd.DataFrame({c: trace[c].to_numpy()[is_server] for c in ("start", "wait", "end")}, copy=False)
    q = queue_length(server)
    t0 = 0.0
    t1 = float(np.nanmax(server["end"].to_numpy(dtype=float))) if len(server) else 0.0
    t1 = max(t1, float(q["t"].max()) if len(q) else 0.0, t0 + 1e-9)
    fig, ax = plt.subplots(figsize=(7, 3))
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
        ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"server queue{how}\nmean wait {fmt_seconds(float(np.nanmean(waits)))}, "
                 f"max {fmt_seconds(float(np.nanmax(waits)))}, {len(server):,} requests", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def energy_figure(energy: pd.DataFrame, path: Path) -> bool:
    """Joules per device class.  Left: totals split into compute, transmit, receive and idle.  Right, on
    its own axis: the active part alone (compute, transmit, receive), which idle power (often ~99% of a
    bar) would otherwise hide."""
    if energy.empty or "device_class" not in energy:
        return False
    cols = [c for c in ("compute_j", "tx_j", "rx_j", "idle_j") if c in energy]
    per = energy.groupby("device_class")[cols].sum()  # totals, as summary.json's energy_j_by_device_class
    counts = energy.groupby("device_class").size()
    colours = {"compute_j": "#f28e2b", "tx_j": "#59a14f", "rx_j": "#4c9be8", "idle_j": "#d3d3d3"}
    names = {"compute_j": "compute", "tx_j": "transmit", "rx_j": "receive", "idle_j": "idle"}
    active = [c for c in cols if c != "idle_j"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    ticks = [f"{c}\n({int(counts[c])} devices)" for c in per.index]
    for ax, which, title in ((axes[0], cols, "all energy (totals)"), (axes[1], active, "active energy only")):
        bottom = np.zeros(len(per))
        for c in which:
            ax.bar(range(len(per)), per[c], bottom=bottom, label=names[c], color=colours[c])
            bottom += per[c].to_numpy()
        ax.set_xticks(range(len(per)), ticks)
        plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def topology_figure(world: "object", path: Path) -> bool:
    """The network tree with each link's rate (access links at the client's nominal uplink rate)."""
    topo = getattr(world, "topology", None)
    if topo is None:
        return False
    from fedsim.system.topology import draw_topology

    g = topo.graph.copy()
    for u, v, attrs in g.edges(data=True):
        if attrs.get("rate_bps") is None:
            client = u if g.nodes[u].get("role") == "client" else v
            attrs["rate_bps"] = world.uplink_bps(int(client))
    fig = draw_topology(g, root=topo.root)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _kept_per_block(summary: object) -> list[float] | None:
    """Kept fraction per block from a dispatch event's ``submodel`` summary (``SubModel.summary``)."""
    if not isinstance(summary, dict):
        return None
    kept = summary.get("blocks", summary.get("kept"))
    if isinstance(kept, dict):
        kept = list(kept.values())
    if not isinstance(kept, (list, tuple)):
        return None
    states = summary.get("states")
    out = [float(k) for k in kept]
    if isinstance(states, (str, list, tuple)) and len(states) == len(out):
        out = [0.0 if s in ("r", "removed") else v for v, s in zip(out, states)]
    return out


def submodel_table(trace: pd.DataFrame) -> pd.DataFrame:
    """Per client (rows) and block (columns): the mean kept fraction over the client's dispatches.

    Reads the ``submodel`` field of ``dispatch`` events; a dispatch without one (the whole model) counts
    as 1 for every block.  Empty when no dispatch of the run carried a sub-model."""
    if "submodel" not in trace or "kind" not in trace:
        return pd.DataFrame()
    disp = trace[trace["kind"] == "dispatch"]
    rows = [(int(c), _kept_per_block(s)) for c, s in zip(disp["client"], disp["submodel"])]
    n_blocks = max((len(k) for _, k in rows if k), default=0)
    if not n_blocks:
        return pd.DataFrame()
    table = pd.DataFrame([k if k else [1.0] * n_blocks for _, k in rows], columns=range(n_blocks))
    table["client"] = [c for c, _ in rows]
    out = table.groupby("client").mean().sort_index()
    out.columns = [f"block {b}" for b in out.columns]
    return out


def submodel_figure(trace: pd.DataFrame, path: Path, classes: dict[int, str] | None = None) -> bool:
    """Heat map of which part of the model each client trains: blocks (rows) × clients (columns), colour =
    kept fraction of the block's entries (mean over the client's tasks; 0 for a removed block).
    ``classes`` labels clients by device class."""
    table = submodel_table(trace)
    if table.empty:
        return False
    grid = table.T  # blocks × clients
    n_blocks, n_clients = grid.shape
    fig, ax = plt.subplots(figsize=(min(16.0, 2.5 + 0.32 * n_clients), 2.2 + 0.35 * n_blocks))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def run_figures(run_dir: str | Path, *, timeline_window: Sequence[float] | None = None,
                timeline_clients: int = 30) -> list[Path]:
    """Write the standard figures of one run directory; returns their paths.

    ``timeline_window`` zooms the timeline on ``[start, end]`` seconds of virtual time (default: the whole
    run); ``timeline_clients`` is how many clients it shows (``output.timeline_window`` and
    ``output.timeline_clients`` of the scenario)."""
    run_dir = Path(run_dir)
    written = []
    metrics_path = run_dir / "metrics.csv"
    if metrics_path.exists():
        m = pd.read_csv(metrics_path)
        if len(m) and m["accuracy"].notna().any():
            p = run_dir / "accuracy_vs_time.png"
            accuracy_figure({run_dir.name: m}, p)
            written.append(p)
        elif len(m) and m["loss"].notna().any():  # a regression task: the test loss is the curve
            p = run_dir / "loss_vs_time.png"
            accuracy_figure({run_dir.name: m}, p, column="loss")
            written.append(p)  # (systems-only runs have neither)
    trace_file = trace_path(run_dir)
    if trace_file.exists():
        # only the fields the figures read, so the frame stays small for a trace of millions of records
        df = load_trace(trace_file, kinds=("download", "compute", "upload", "offline", "server"),
                        columns=("client", "start", "end", "wait", "rate_bps"))
        if len(df):
            p = run_dir / "timeline.png"
            since, until = (0.0, None) if timeline_window is None else (float(timeline_window[0]),
                                                                        float(timeline_window[1]))
            # the whole run by default, merged bars when dense
            timeline_figure(df, p, max_bars=TIMELINE_MAX_EVENTS, since=since, until=until,
                            max_clients=timeline_clients)
            written.append(p)
            for name, fn in (("link_rates.png", link_rate_figure), ("server_queue.png", server_queue_figure)):
                if fn(df, run_dir / name):
                    written.append(run_dir / name)
        dispatch = load_trace(trace_file, kinds=("dispatch",))
        if submodel_figure(dispatch, run_dir / "submodel_heatmap.png", _device_classes(run_dir)):
            written.append(run_dir / "submodel_heatmap.png")
    energy_path = run_dir / "energy.csv"
    if energy_path.exists() and energy_figure(pd.read_csv(energy_path), run_dir / "energy.png"):
        written.append(run_dir / "energy.png")
    return written


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
    p = out / "accuracy_vs_time.png"
    accuracy_figure(metrics, p, title="same world, different algorithms")
    return p


def html_report(run_dir: str | Path) -> Path:
    """``report.html``: one self-contained page (summary, the check/probe tables when present, every figure
    embedded as PNG data) that opens in any browser without the run folder's other files."""
    import base64
    import html
    import json

    run_dir = Path(run_dir)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fedsim: {html.escape(run_dir.name)}</title>",
             "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:left}img{max-width:100%;border:1px solid #eee;margin:0.5em 0}</style></head><body>",
             f"<h1>fedsim run: {html.escape(run_dir.name)}</h1>"]
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        data = json.loads(summary_path.read_text(encoding="utf-8"))
        runs = data if isinstance(data, list) else [data]
        keys = ["label", "status", "stop_reason", "final_accuracy", "best_accuracy", "final_loss", "virtual_time_s",
                "wall_time_s", "versions", "updates_applied", "mean_staleness", "max_staleness", "bytes_up",
                "bytes_down", "energy_j", "num_clients"]
        parts.append("<h2>Summary</h2><table><tr><th>field</th>" +
                     "".join(f"<th>{html.escape(str(r.get('label', '')))}</th>" for r in runs) + "</tr>")
        for k in keys:
            if any(k in r for r in runs):
                cells = "".join(f"<td>{html.escape(_fmt(r.get(k)))}</td>" for r in runs)
                parts.append(f"<tr><th>{k}</th>{cells}</tr>")
        parts.append("</table>")
    for name, title in (("check.csv", "Theory check (fedsim check)"), ("probes.csv", "Probes"),
                        ("probes_live.csv", "Live probes"), ("seeds_summary.csv", "Across seeds")):
        path = run_dir / name
        if path.exists():
            table = pd.read_csv(path)
            parts.append(f"<h2>{title}</h2>" + table.head(200).to_html(index=False, float_format=lambda v: f"{v:.4g}"))
    scenario = run_dir / "scenario.yaml"
    if scenario.exists():
        parts.append("<h2>Scenario</h2><details><summary>resolved scenario.yaml</summary><pre>" +
                     html.escape(scenario.read_text(encoding="utf-8")) + "</pre></details>")
    figures = sorted(run_dir.glob("*.png"))
    if figures:
        parts.append("<h2>Figures</h2>")
    for fig in figures:
        data64 = base64.b64encode(fig.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(fig.stem.replace('_', ' '))}</h3><img alt='{html.escape(fig.name)}' "
                     f"src='data:image/png;base64,{data64}'>")
    parts.append("</body></html>")
    out = run_dir / "report.html"
    out.write_text("\n".join(parts), encoding="utf-8")
    return out


def fmt_seconds(s: float) -> str:
    """Seconds for people: ``12.1 s``, ``3.2 ms``, ``250 µs``, ``2.5 min``."""
    s = float(s)
    if not np.isfinite(s):
        return "–" if np.isnan(s) else "never"
    if s == 0:
        return "0 s"
    if abs(s) < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if abs(s) < 1:
        return f"{s * 1e3:.3g} ms"
    if abs(s) < 600:
        return f"{s:.3g} s" if abs(s) < 100 else f"{s:.0f} s"
    return f"{s / 60:.3g} min" if abs(s) < 6000 else f"{s / 3600:.3g} h"


def fmt_bytes(n: float) -> str:
    """Bytes for people, in SI units: 10964800 → ``10.96 MB``."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
