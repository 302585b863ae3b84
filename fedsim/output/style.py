"""What both renderers of a run's figures share: the colours, the timeline's painting rules, the bins of the
link-rate histogram, the energy parts and the formatting of durations.

Why a module of its own: the SVG figures every run writes (:mod:`fedsim.output.svg_figures`) and the
matplotlib ones drawn for a paper (:mod:`fedsim.output.report`, ``fedsim figures``) must draw the same
quantities by the same rules in the same colours, and the SVG side must not import matplotlib.  This module
imports neither.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from fedsim.output.digest import PAYLOADS, CoverGrid, digest_trace, dominant

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

#: Colours of the transfers whose ``what`` names split learning's payload, apart from a model's (the kind's
#: colour): both timelines, at every zoom, and the legends tell activations, gradients and models apart.
PURPOSE_BAR_COLOURS = {"activations": "#e15759", "gradients": "#76b7b2"}

#: Every colour a timeline row's column can take: the phases, then split learning's payloads.
TIMELINE_COLOURS = {**PHASE_COLOURS, **{k: PURPOSE_BAR_COLOURS[k] for k in PAYLOADS}}



#: Round starts timeline.png draws at most (past it, the rounds are too dense for lines to tell apart).
PNG_MAX_ROUND_LINES = 300



def timeline_codes(grid: CoverGrid, cover: dict[tuple[str, int], np.ndarray], rows: Sequence[int], t0: float,
                    t1: float, columns: int) -> np.ndarray:
    """For each row (client, or :data:`~fedsim.output.digest.SERVER`) and each of ``columns`` equal columns of
    ``[t0, t1]``, the index in :data:`TIMELINE_COLOURS` of the phase that covers most of the column, or
    ``len(TIMELINE_COLOURS)`` where idle time is the largest share."""
    kinds = list(TIMELINE_COLOURS)
    span = (t1 - t0) / columns
    out = np.full((len(rows), columns), len(kinds), dtype=np.int64)
    for i, c in enumerate(rows):
        per = {k: grid.columns(k, t0, t1, columns) for k in cover if k[1] == c}
        order, best = dominant(per, span)
        if order:
            out[i] = np.array([kinds.index(k[0]) for k in order] + [len(kinds)])[best]  # (-1, idle: the last)
    return out


def busy_share(covered: np.ndarray, span: float, workers: float = 1.0) -> np.ndarray:
    """The server's busy share of each column: busy worker-seconds over the column's time x ``workers``,
    in [0, 1].  Its mean over the whole run is the server's utilisation (summary.json's), which is what
    both timelines' server row is drawn to show."""
    return np.clip(np.asarray(covered, dtype=float) / (max(span, 1e-300) * max(float(workers), 1.0)), 0.0, 1.0)



def linear_bins(values: np.ndarray, n: int) -> Any:
    """``n`` bins for a linear histogram of ``values``, or, when they are one value up to rounding (every
    link at one fixed rate: the rates recomputed from bytes and airtime differ in the last bits, and
    ``np.histogram`` cannot cut so narrow a range into ``n`` bins), one bar 10% wide centred on it."""
    lo, hi = float(values.min()), float(values.max())
    if hi - lo > 1e-6 * max(abs(lo), abs(hi)):
        return n
    half = 0.05 * abs(hi) or 0.5
    return np.array([lo - half, hi + half])



#: the parts of a device's energy (energy.csv columns): label and colour, for every figure that draws them
ENERGY_PARTS: dict[str, tuple[str, str]] = {"compute_j": ("compute", "#f28e2b"), "tx_j": ("transmit", "#59a14f"),
                                            "rx_j": ("receive", "#4c9be8"), "idle_j": ("idle", "#d3d3d3")}



def submodel_table(trace: pd.DataFrame) -> pd.DataFrame:
    """Per client (rows) and block (columns): the mean kept fraction over the client's dispatches.

    Reads the ``submodel`` field of ``dispatch`` events; a dispatch without one (the whole model) counts
    as 1 for every block.  Empty when no dispatch of the run carried a sub-model.  (The run's figures
    compute the same from the streamed trace: :meth:`fedsim.output.digest.TraceDigest.submodel_table`.)"""
    if "submodel" not in trace or "kind" not in trace:
        return pd.DataFrame()
    return digest_trace(trace[trace["kind"] == "dispatch"]).submodel_table()



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


