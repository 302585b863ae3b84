"""report.html's "what happened" panels: where each client's time went, the server, staleness, rounds.

One streamed pass over a run's trace (:func:`fedsim.sim.trace.iter_blocks`) gathers what the panels draw:

* **per-client time breakdown**: every second of ``[0, T]`` (T the run's virtual time) of every client is
  given exactly one label, so a client's bar sums to T.  Where a client's records overlap, the first label
  of :data:`BREAKDOWN` wins (compute over upload over download over the server's work for it, and so on);
  time in a synchronous round after the client's own work is "waiting for the round" (the stragglers, and
  the deadline when there is one).  The time a client does nothing at all is split by why, as far as the
  trace proves it: "waiting for a slot" while an asynchronous loop had every concurrency slot taken (the
  framework's ``slots`` records), else "not selected" while a round ran without it (the ``round`` records),
  else plain "idle" (see :func:`idle_reasons`); offline time is already "offline".
* **server**: utilisation (busy worker-seconds over ``T x workers``) and queue length over time, mean
  and peak queue wait, request counts per kind of request (the trace's ``what``);
* **staleness**: the staleness of every applied update, as a histogram and over time;
* **rounds**: each synchronous round's start, end, straggler (the participant whose work finished last)
  and deadline drops; drops of asynchronous algorithms at their time;
* **traffic by purpose**: transfers and server requests grouped by the trace's ``what`` (split learning's
  activations and gradients apart from whole models).

The page's JavaScript (:data:`PANELS_JS`) draws plain SVG; its time series share the interactive
timeline's axis (they follow ``window.fedsimView``, the view the timeline publishes) and draw the whole
run when there is no timeline.  Also here: the glossary, the "up" link of a run inside a folder of runs,
and the "up" links the report of a sweep or ``--seeds`` folder (:mod:`fedsim.output.folder_report`) adds.
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from fedsim.files import write_csv, write_text
from fedsim.output import static_text
from fedsim.output.digest import CoverGrid, binned_queue, merge_intervals, queue_length
from fedsim.sim.trace import iter_blocks, trace_path

#: Labels of a client's time, in priority order (where records overlap the first wins), with colours.
#: The last three are the reasons a client with no task does nothing (:data:`IDLE_REASONS`); "idle" is what
#: nothing covers and no reason explains; it is last.
BREAKDOWN: tuple[tuple[str, str, str], ...] = (
    ("compute", "compute", "#f28e2b"),
    ("upload", "upload", "#59a14f"),
    ("download", "download", "#4c9be8"),
    ("queue", "queue wait at the server", "#9c9c9c"),
    ("served", "served by the server", "#b07aa1"),
    ("unavailable", "offline (unavailable)", "#333333"),
    ("round_wait", "waiting for the round (stragglers, deadline)", "#edc948"),
    ("concurrency", "waiting for a slot (concurrency limit)", "#e8a0c4"),
    ("not_selected", "not selected (a round ran without it)", "#c9b99a"),
    ("idle", "idle (no task, no reason recorded)", "#eeeeee"),
)
BREAKDOWN_KEYS = tuple(k for k, _, _ in BREAKDOWN)
#: Why a client with no task (online, not in a round of its own) does nothing, in priority order: every slot
#: of an asynchronous loop taken, a round running without it; then plain idle.  These two are spans of the
#: whole run (the same for every client), below every label a client's own records give.
IDLE_REASONS = ("concurrency", "not_selected")
#: The order a client's bar is drawn in, left to right (a task's phases in the order they happen).
DRAW_ORDER = ("download", "compute", "upload", "queue", "served", "round_wait", "unavailable", "concurrency",
              "not_selected", "idle")

#: Colours of traffic by purpose (the trace's ``what``); any other purpose gets the next of ``_SPARE``.
PURPOSE_COLOURS = {"model": "#4c9be8", "activations": "#e15759", "gradients": "#76b7b2", "aggregate": "#b07aa1",
                   "apply": "#9467bd", "train": "#f28e2b"}
#: A model transfer's colour in "traffic by purpose": its direction's, the timelines' upload and download.
DIRECTION_COLOURS = {"upload": "#59a14f", "download": "#4c9be8"}
_SPARE = ("#ff9da7", "#9c755f", "#8cd17d", "#d4a6c8", "#86bcb6", "#f1ce63", "#a0cbe8")

_KINDS = ("download", "compute", "upload", "offline", "server", "apply", "round", "drop", "slots")
_FIELDS = ("client", "start", "end", "wait", "what", "staleness", "clients", "dropped", "bytes", "reason", "round",
           "version", "busy", "limit")
#: A download with no model version and no ``what``: in a split-learning run (one whose uploads carry
#: activations) it brings back gradients; otherwise a model (see :func:`transfer_purpose`).
_UNVERSIONED = "unversioned"

#: Bins of the server's utilisation and of a busy queue / staleness series (a bounded page for any run).
SERIES_BINS = 400
#: Queue-length changes (and applied updates) drawn one by one at most; past it, binned.
SERIES_EXACT = 4000

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("version", "The global model's number: it goes up by one each time the server installs a new model "
                "(an aggregation in FedAvg, every applied update in FedAsync)."),
    ("staleness", "Of an applied update: how many versions were installed between the version the client "
                  "downloaded and the one its update was applied to (0 = fresh). Also in seconds."),
    ("round", "One synchronous step of FedAvg-like algorithms: select clients, let them work, wait for all "
              "(or the deadline), aggregate. For asynchronous algorithms the trace's round is the "
              "aggregation that applied the update."),
    ("slot", "Asynchronous algorithms keep a fixed number of clients working at once (the concurrency); a "
             "slot is one of those places, handed to another client when its task ends."),
    ("quorum", "The number of updates a server waits for before it aggregates (e.g. FedBuff's buffer size, "
               "Co-S²P's ⌈μN⌉): later updates wait for the next aggregation."),
    ("utilisation", "The fraction of the run's time the server's workers were busy serving requests: busy "
                    "worker-seconds / (run time × workers). Near 1 means requests queue."),
    ("straggler", "In a synchronous round, the selected client whose task (download, compute, upload and the "
                  "server's work for it) finishes last: the round cannot close before it does (or before the "
                  "deadline). Its finish is marked ▼ on the timelines; the other clients' time spent waiting for "
                  "it is \"waiting for the round\" (yellow) in the per-client breakdown. Asynchronous algorithms "
                  "have no stragglers: nobody waits for anybody."),
    ("deadline", "A synchronous round's time limit (e.g. algorithm.fedavg.deadline_s): when it passes, the "
                 "server aggregates the updates it has and drops the clients still working."),
    ("drop", "A task given up: its client went offline, the round's deadline passed before its update "
             "arrived, or (an algorithm with a staleness bound) its update came too stale. Its update is never applied; the work it had under way is in the trace as a cut record "
             "(with ended), and the timelines mark the drop ×."),
    ("idle", "A client's time with no task, online, and not in a round of its own, split by why (as far as "
             "the trace proves it): \"waiting for a slot\" (pink) while an asynchronous loop had every "
             "concurrency slot taken (its slots records); \"not selected\" (beige) while a synchronous round ran "
             "without it; plain \"idle\" (grey) the rest: between rounds, or a slot free but the client not "
             "picked. Unlike \"waiting for the round\", which is time after its own work in a round it takes "
             "part in, and \"offline\", time an offline record covers."),
    ("not selected", "A client's time while a round ran that did not select it (the round record's clients "
                     "do not name it), with no task of its own: the \"not selected\" part of its breakdown."),
    ("concurrency", "Asynchronous algorithms: how many clients work at once (algorithm.concurrency); when "
                    "one's task ends, its slot goes to another client. While every slot is taken (the trace's "
                    "slots records: busy = limit) an idle client is \"waiting for a slot\" in its breakdown."),
    ("latency", "A link's one-way delay (network.latency_s), part of every transfer before its bits arrive: an "
                "upload's bar is latency + any wait for a shared medium + airtime (bytes × 8 / rate). A link "
                "with no latency and no airtime is ideal: its transfers take 0 s and draw no bar."),
    ("queue wait", "Time a request spent at the server before a worker started serving it."),
)


def _finite(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=float)


def _clean(a: Any, digits: int = 6) -> list[Any]:
    """JSON numbers with ``digits`` significant digits (None for NaN / inf)."""
    spec = f".{digits}g"
    return [float(format(v, spec)) if math.isfinite(v) else None for v in np.asarray(a, dtype=float).ravel().tolist()]


def _union_length(s: np.ndarray, e: np.ndarray) -> float:
    if not len(s):
        return 0.0
    a, b = merge_intervals(s, e, 0.0)
    return float(np.sum(b - a))


def breakdown_of(intervals: dict[str, tuple[np.ndarray, np.ndarray]], t_end: float) -> dict[str, float]:
    """Seconds of ``[0, t_end]`` under each label of :data:`BREAKDOWN`, for one client.

    ``intervals`` maps a label to (starts, ends) arrays (clipped to the window here).  A second covered by
    several labels counts for the first in :data:`BREAKDOWN`'s order; "idle" is the rest, so the values
    sum to ``t_end`` (up to rounding)."""
    out: dict[str, float] = {}
    cs = np.empty(0)
    ce = np.empty(0)
    covered = 0.0
    for key in BREAKDOWN_KEYS[:-1]:
        s, e = intervals.get(key, (np.empty(0), np.empty(0)))
        s = np.clip(_finite(s), 0.0, t_end)
        e = np.clip(_finite(e), 0.0, t_end)
        ok = np.isfinite(s) & np.isfinite(e) & (e > s)
        if not ok.any():
            out[key] = 0.0
            continue
        cs, ce = np.concatenate([cs, s[ok]]), np.concatenate([ce, e[ok]])
        cs, ce = merge_intervals(cs, ce, 0.0)
        now = float(np.sum(ce - cs))
        out[key] = max(now - covered, 0.0)
        covered = now
    out["idle"] = max(t_end - covered, 0.0)
    return out


def merged_by_group(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group id in ``g``, the union of its intervals ``[s, e]`` as disjoint intervals: (group, start, end)
    arrays, sorted by group and start (touching intervals merge)."""
    if not len(g):
        return np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    order = np.lexsort((e, s, g))
    g, s, e = g[order], s[order], e[order]
    reach = pd.Series(e).groupby(g, sort=False).cummax().to_numpy()
    new = np.ones(len(g), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > reach[:-1])
    first = np.flatnonzero(new)
    return g[first], s[first], np.maximum.reduceat(e, first)


def _merged(s: Any, e: Any) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[s, e]`` (finite, non-empty ones) as sorted disjoint intervals."""
    s, e = _finite(s), _finite(e)
    ok = np.isfinite(s) & ~np.isnan(e) & (e > s)
    if not ok.any():
        return np.empty(0), np.empty(0)
    _, a, b = merged_by_group(np.zeros(int(ok.sum()), dtype=np.int64), s[ok], e[ok])
    return a, b


def _clip(s: np.ndarray, e: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals cut to ``[lo, hi]`` (empty ones left out)."""
    a, b = np.clip(s, lo, max(hi, lo)), np.clip(e, lo, max(hi, lo))
    ok = b > a
    return a[ok], b[ok]


def measure_inside(gs: np.ndarray, ge: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For each query interval ``[s[i], e[i]]``: the length of its overlap with the disjoint sorted intervals
    ``gs``/``ge`` (one binary search per end: the spans of a whole run against every client's own time)."""
    if not len(gs) or not len(s):
        return np.zeros(len(s))
    cum = np.concatenate([[0.0], np.cumsum(ge - gs)])

    def upto(x: np.ndarray) -> np.ndarray:  # the spans' length in (-inf, x]
        i = np.searchsorted(gs, x, side="right") - 1
        j = np.clip(i, 0, len(gs) - 1)
        part = np.clip(x - gs[j], 0.0, ge[j] - gs[j])
        return np.where(i >= 0, cum[j] + part, 0.0)

    return np.maximum(upto(np.asarray(e, dtype=float)) - upto(np.asarray(s, dtype=float)), 0.0)


def _minus(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals ``a`` less the disjoint sorted intervals ``b``."""
    if not len(a_s) or not len(b_s):
        return a_s, a_e
    # the boundaries of both, and which elementary pieces lie in a and not in b
    pts = np.unique(np.concatenate([a_s, a_e, b_s, b_e]))
    mid = (pts[:-1] + pts[1:]) / 2
    ia = np.searchsorted(a_s, mid, side="right") - 1
    in_a = (ia >= 0) & (mid < a_e[np.clip(ia, 0, None)])
    ib = np.searchsorted(b_s, mid, side="right") - 1
    in_b = (ib >= 0) & (mid < b_e[np.clip(ib, 0, None)])
    keep = in_a & ~in_b
    return _merged(pts[:-1][keep], pts[1:][keep])


def idle_spans(t_end: float, rounds: Iterable[tuple[float, float]],
               slots: Iterable[tuple[float, float, float]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The spans of ``[0, t_end]`` that explain why a client with no task does nothing (:data:`IDLE_REASONS`):
    ``concurrency``, where an asynchronous loop held every slot (``slots``: the ``slots`` records' (t, busy,
    limit), in time order; each holds until the next), and ``not_selected``, where a round ran (``rounds``:
    (start, end)) and the slots were not all taken.  The same for every client: a client's own records (its
    task, its own round, its offline spells) come first in its breakdown."""
    slots = sorted(((float(t), float(b), float(lim)) for t, b, lim in slots), key=lambda x: x[0])
    full_s, full_e = [], []
    for i, (t, b, lim) in enumerate(slots):
        if b >= lim > 0:
            full_s.append(t)
            full_e.append(slots[i + 1][0] if i + 1 < len(slots) else np.inf)
    cs, ce = _merged(full_s, full_e)
    cs, ce = _clip(cs, ce, 0.0, t_end)
    rr = [(a, b) for a, b in rounds]
    rs, re_ = _merged([a for a, _ in rr], [b for _, b in rr])
    rs, re_ = _minus(*_clip(rs, re_, 0.0, t_end), cs, ce)
    return {"concurrency": (cs, ce), "not_selected": (rs, re_)}


class _Gather:
    """What the panels need from one pass over the trace (see the module docstring)."""

    def __init__(self) -> None:
        self.iv: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {k: [] for k in BREAKDOWN_KEYS}
        self.srv: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # client, start, end, wait
        self.srv_what: list[str] = []
        self.applies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # t, client, staleness
        self.rounds: list[dict[str, Any]] = []
        self.drops: list[dict[str, Any]] = []
        self.uploads: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # client, end, start
        self.tasks: list[np.ndarray] = []  # clients of compute records
        self.traffic: dict[tuple[str, str], list[float]] = {}  # (direction, purpose) -> [count, bytes, seconds]
        self.clients: set[int] = set()
        self.slots: list[tuple[float, float, float]] = []  # t, busy, limit of the slots records
        self.t_last = 0.0

    def add(self, b: Any) -> None:
        if not len(b):
            return
        t = b.t
        if np.isfinite(t).any():
            self.t_last = max(self.t_last, float(np.nanmax(t)))
        kind = b.kind
        c = b.num("client")
        if kind in ("download", "compute", "upload", "offline"):
            s, e = b.num("start"), b.num("end")
            key = "unavailable" if kind == "offline" else kind
            self.iv[key].append((c, s, e))
            self.clients |= set(np.unique(c[np.isfinite(c)]).astype(np.int64).tolist())
            if kind == "compute":
                self.tasks.append(c)
            if kind == "upload":
                self.uploads.append((c, e, s))
            if kind in ("download", "upload"):
                whats: list[Any] = b.values("what") if b.has("what") else [None] * len(b)
                if kind == "download":  # a model download names its version; a gradient's has none
                    v = b.num("version")
                    whats = [_UNVERSIONED if w is None and not np.isfinite(x) else w for w, x in zip(whats, v.tolist())]
                self._traffic(kind, whats, b.num("bytes"), e - s)
            elif kind == "compute":
                self._traffic("compute", b.values("what") if b.has("what") else [None] * len(b),
                              np.full(len(b), np.nan), e - s)
        elif kind == "server":
            s, e, w = b.num("start"), b.num("end"), b.num("wait")
            w = np.where(np.isfinite(w), w, 0.0)
            self.srv.append((c, s, e, w))
            whats = [str(x) if x is not None else "request" for x in (b.values("what") if b.has("what")
                                                                       else [None] * len(b))]
            self.srv_what.extend(whats)
            self._traffic("server", whats, np.full(len(b), np.nan), e - s)
        elif kind == "apply":
            self.applies.append((t, c, b.num("staleness")))
        elif kind == "round":
            for rnd, s, e, cl, dr in zip(b.values("round"), b.values("start"), b.values("end"), b.values("clients"),
                                         b.values("dropped")):
                self.rounds.append({"round": rnd, "start": s, "end": e, "clients": cl or [],
                                    "dropped": dr if isinstance(dr, list) else []})
        elif kind == "drop":
            for ti, ci, why, rnd in zip(t.tolist(), c.tolist(), b.values("reason"), b.values("round")):
                self.drops.append({"t": ti, "client": None if not np.isfinite(ci) else int(ci),
                                   "reason": "" if why is None else str(why), "round": rnd})
        elif kind == "slots":
            self.slots.extend(zip(t.tolist(), b.num("busy").tolist(), b.num("limit").tolist()))

    def _traffic(self, direction: str, whats: list[Any], nbytes: np.ndarray, seconds: np.ndarray) -> None:
        _count_traffic(self.traffic, direction, whats, nbytes, seconds)


def _count_traffic(traffic: dict[tuple[str, str], list[float]], direction: str, whats: list[Any],
                   nbytes: np.ndarray, seconds: np.ndarray) -> None:
    """Count, bytes and seconds of one block's records per purpose (summed per distinct ``what``)."""
    keys = pd.Series([None if w is None else str(w) for w in whats], dtype=object).fillna("\0none")
    frame = pd.DataFrame({"w": keys.to_numpy(), "n": np.nan_to_num(nbytes, nan=0.0),
                          "d": np.nan_to_num(seconds, nan=0.0)})
    for w, grp in frame.groupby("w", sort=False):
        purpose = _purpose(direction, None if w == "\0none" else w)
        row = traffic.setdefault((direction, purpose), [0, 0.0, 0.0])
        row[0] += len(grp)
        row[1] += float(grp["n"].sum())
        row[2] += float(grp["d"].sum())


def transfer_purpose(direction: str, what: Any, version: Any = None, split: bool = False) -> str:
    """What a transfer is for: ``activations``, ``gradients`` or ``model`` (or the trace's own ``what``).

    Uploads of split learning name their payload in ``what`` (``activations``); downloads carry no ``what``,
    but a model download names the model ``version`` it brings, so in a split-learning run (``split``: its
    uploads carry activations) a download without a version brings gradients.  A transfer with neither is
    a model (FL moves whole models)."""
    if direction == "download" and what is None and (version is None or (isinstance(version, float)
                                                                         and not np.isfinite(version))):
        return "gradients" if split else "model"
    return _purpose(direction, what)


def _purpose(direction: str, what: Any) -> str:
    """What a transfer or request is for, from the trace's ``what`` (a transfer without one moves a model).
    Split learning's uploads name activations (``activations``, ``smashed``...), its downloads gradients."""
    if what == _UNVERSIONED:
        return _UNVERSIONED
    if what is None or (isinstance(what, float) and not np.isfinite(what)):
        return "model" if direction in ("download", "upload") else ("request" if direction == "server" else "train")
    w = str(what)
    low = w.lower()
    if direction in ("download", "upload"):
        if "activ" in low or "smash" in low or "feature" in low:
            return "activations"
        if "grad" in low:
            return "gradients"
    return w


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0)


def _run_time(run_dir: Path, fallback: float) -> float:
    """The run's virtual time: summary.json's ``virtual_time_s`` (a run's own), else the trace's last time."""
    p = run_dir / "summary.json"
    if p.exists():
        try:
            s = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            s = None
        if isinstance(s, dict) and isinstance(s.get("virtual_time_s"), (int, float)) and s["virtual_time_s"] > 0:
            return float(s["virtual_time_s"])
    return float(fallback)


def _server_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json's ``server`` block (the server's own accounting), or {}."""
    p = run_dir / "summary.json"
    if p.exists():
        try:
            s = json.loads(p.read_text(encoding="utf-8"))
        except ValueError:
            return {}
        if isinstance(s, dict) and isinstance(s.get("server"), dict):
            return s["server"]
    return {}


def _num_clients(run_dir: Path) -> int | None:
    """summary.json's ``num_clients`` (every client is a row of the breakdown, named in the trace or not)."""
    p = run_dir / "summary.json"
    try:
        n = json.loads(p.read_text(encoding="utf-8")).get("num_clients") if p.exists() else None
    except (ValueError, AttributeError):
        return None
    return int(n) if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 10_000_000 else None


def _workers(run_dir: Path) -> int:
    w = _server_summary(run_dir).get("workers")
    return int(w) if isinstance(w, (int, float)) and w >= 1 else 1


def gather(run_dir: str | Path) -> _Gather | None:
    """One streamed pass over a run's trace; None when the run has no trace."""
    path = trace_path(run_dir)
    if not path.exists():
        return None
    g = _Gather()
    for b in iter_blocks(path, kinds=_KINDS, fields=_FIELDS):
        g.add(b)
    return g


def _round_spans(rounds: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    out = []
    for r in rounds:
        try:
            rs, re_ = float(r["start"]), float(r["end"])
        except (TypeError, ValueError):
            continue
        if re_ > rs:
            out.append((rs, re_))
    return out


def client_breakdown(g: _Gather, t_end: float, num_clients: int | None = None) -> pd.DataFrame:
    """Per client (rows, sorted by id): seconds under each label of :data:`BREAKDOWN` over ``[0, t_end]``
    (each row sums to ``t_end``), with ``tasks`` (compute records), ``per_task_s`` (download + compute +
    upload seconds per task), ``updates`` and ``mean_staleness`` (applied updates) and ``drops``.
    ``num_clients`` (summary.json's): clients 0 .. num_clients - 1 are rows even when the trace never names
    one (a client never selected is "not selected" or idle all run)."""
    cols = {k: tuple(_cat([p[i] for p in g.iv[k]]) for i in range(3)) for k in BREAKDOWN_KEYS if g.iv[k]}
    extra: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {"queue": [], "served": [], "round_wait": []}
    if g.srv:
        c, s, e, w = (_cat([p[i] for p in g.srv]) for i in range(4))
        own = np.isfinite(c)
        extra["queue"].append((c[own], s[own] - w[own], s[own]))
        extra["served"].append((c[own], s[own], e[own]))
        # the server's work for no client (an aggregation) inside a synchronous round is served time of the
        # round's participants: they wait for it
        gs, ge = s[~own], e[~own]
        order = np.argsort(gs, kind="stable")
        gs, ge = gs[order], ge[order]
    else:
        gs = ge = np.empty(0)
    for r in g.rounds:
        try:
            rs, re_ = float(r["start"]), float(r["end"])
        except (TypeError, ValueError):
            continue
        who = [int(x) for x in r["clients"] if isinstance(x, (int, float))]
        if not who or not re_ > rs:
            continue
        arr = np.asarray(who, dtype=float)
        extra["round_wait"].append((arr, np.full(len(arr), rs), np.full(len(arr), re_)))
        lo, hi = np.searchsorted(gs, rs, side="left"), np.searchsorted(gs, re_, side="left")
        for a, b in zip(gs[lo:hi].tolist(), ge[lo:hi].tolist()):
            extra["served"].append((arr, np.full(len(arr), a), np.full(len(arr), min(b, re_))))
    for k, parts in extra.items():
        if parts:
            old = cols.get(k)
            got = [np.concatenate([p[i] for p in parts]) for i in range(3)]
            cols[k] = tuple(np.concatenate([old[i], got[i]]) for i in range(3)) if old else tuple(got)
    clients = sorted(g.clients | {int(x) for k in cols for x in np.unique(cols[k][0][np.isfinite(cols[k][0])])}
                     | set(range(num_clients or 0)))
    spans = idle_spans(t_end, _round_spans(g.rounds), g.slots)
    # per client slices: one argsort per label
    index: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for k, (c, s, e) in cols.items():
        ok = np.isfinite(c)
        c, s, e = c[ok], s[ok], e[ok]
        order = np.argsort(c, kind="stable")
        c, s, e = c[order], s[order], e[order]
        keys, first = np.unique(c, return_index=True)
        bounds = np.append(first, len(c))
        index[k] = {int(kk): (s[a:b], e[a:b]) for kk, a, b in zip(keys.tolist(), bounds[:-1], bounds[1:])}
    rows = {}
    # the reasons' spans added to each client's own intervals, where that is cheap; else each client's share
    # of them is their length less the part its own intervals cover (as the streamed reading sums it)
    per_client = sum(len(v[0]) for v in spans.values()) * max(len(clients), 1) <= SPANS_PER_CLIENT_MAX
    for cl in clients:
        rows[cl] = breakdown_of({**{k: index[k][cl] for k in index if cl in index[k]},
                                 **(spans if per_client else {})}, t_end)
    if not per_client and rows:
        _split_idle(rows, cols, spans, t_end)
    out = pd.DataFrame.from_dict(rows, orient="index", columns=list(BREAKDOWN_KEYS)) if rows else \
        pd.DataFrame(columns=list(BREAKDOWN_KEYS))
    out.index.name = "client"
    return _client_extras(out, _cat(g.tasks), _cat([a[1] for a in g.applies]), _cat([a[2] for a in g.applies]),
                          g.drops)


#: :func:`client_breakdown` adds the idle reasons' spans to every client's intervals while spans x clients
#: stays under this; past it (a long synchronous run of many clients) it subtracts measures instead.
SPANS_PER_CLIENT_MAX = 2_000_000


def _split_idle(rows: dict[int, dict[str, float]], cols: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                spans: dict[str, tuple[np.ndarray, np.ndarray]], t_end: float) -> None:
    """Split each row's "idle" (rows computed without the spans) into :data:`IDLE_REASONS`: a client's share
    of a reason is the reason's length in ``[0, t_end]`` less the part its own intervals (``cols``, every
    label's) cover, taken from idle in :data:`IDLE_REASONS`' order."""
    c = _cat([v[0] for v in cols.values()])
    s = np.clip(_cat([v[1] for v in cols.values()]), 0.0, t_end)
    e = np.clip(_cat([v[2] for v in cols.values()]), 0.0, t_end)
    ok = np.isfinite(c) & np.isfinite(s) & np.isfinite(e) & (e > s)
    groups, ms, me = merged_by_group(c[ok].astype(np.int64), s[ok], e[ok])
    keys, inv = np.unique(groups, return_inverse=True)
    for key in IDLE_REASONS:
        gs, ge = spans[key]
        total = float(np.sum(ge - gs))
        mine = dict(zip(keys.tolist(), np.bincount(inv, weights=measure_inside(gs, ge, ms, me),
                                                   minlength=len(keys)).tolist())) if len(keys) else {}
        for cl, row in rows.items():
            x = min(max(total - mine.get(cl, 0.0), 0.0), row["idle"])
            row[key] = x
            row["idle"] -= x
    for row in rows.values():
        row["idle"] = max(row["idle"], 0.0)


def _client_extras(out: pd.DataFrame, task_clients: np.ndarray, apply_clients: np.ndarray,
                   apply_staleness: np.ndarray, drops: list[dict[str, Any]]) -> pd.DataFrame:
    """The breakdown table's ``tasks``, ``per_task_s``, ``updates``, ``mean_staleness`` and ``drops``."""
    # (the counts as dicts: a dict lookup per client, not a Series lookup)
    tasks = pd.Series(task_clients).value_counts().to_dict() if len(task_clients) else {}
    out["tasks"] = [int(tasks.get(float(c), 0)) for c in out.index]
    work = out[["download", "compute", "upload"]].sum(axis=1)
    out["per_task_s"] = np.where(out["tasks"] > 0, work / out["tasks"].clip(lower=1), np.nan)
    if len(apply_clients):
        st = pd.DataFrame({"c": apply_clients, "s": apply_staleness}).dropna(subset=["c"]).groupby("c")["s"]
        counts, means = st.size().to_dict(), st.mean().to_dict()
        out["updates"] = [int(counts.get(float(c), 0)) for c in out.index]
        out["mean_staleness"] = [float(means.get(float(c), np.nan)) for c in out.index]
    else:
        out["updates"] = 0
        out["mean_staleness"] = np.nan
    dropped = pd.Series([d["client"] for d in drops if d["client"] is not None]).value_counts().to_dict() \
        if drops else {}
    out["drops"] = [int(dropped.get(c, 0)) for c in out.index]
    return out


def server_stats(g: _Gather, t_end: float, workers: int = 1,
                 reported: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The server's utilisation (busy worker-seconds of ``[0, t_end]`` over ``t_end x workers``), mean and
    peak queue wait, request counts per ``what``, and the series drawn: utilisation per bin and queue
    length (exact steps, or time-averaged and peak per bin past :data:`SERIES_EXACT` changes).

    These count the requests the trace holds: those finished by the end.  ``reported`` (summary.json's
    ``server`` block, the server's own accounting, which also counts a request still in service when the
    run stopped) is passed through for the page's headline, so it agrees with the summary table."""
    if not g.srv or not t_end > 0:
        return None
    c, s, e, w = (_cat([p[i] for p in g.srv]) for i in range(4))
    ok = np.isfinite(s) & np.isfinite(e)
    kinds = pd.Series(g.srv_what).value_counts() if g.srv_what else pd.Series(dtype=int)
    return _server_stats(s[ok], e[ok], w[ok], {str(k): int(v) for k, v in kinds.items()}, t_end, workers, reported)


def _server_stats(s: np.ndarray, e: np.ndarray, w: np.ndarray, what: dict[str, int], t_end: float, workers: int,
                  reported: dict[str, Any] | None, q: pd.DataFrame | None = None) -> dict[str, Any]:
    """:func:`server_stats` from the finished requests' start, end and wait, and the counts per ``what``
    (``q``: their queue length, when already computed)."""
    cs, ce = np.clip(s, 0, t_end), np.clip(e, 0, t_end)
    busy = float(np.sum(ce - cs))
    edges = np.linspace(0.0, t_end, SERIES_BINS + 1)
    # busy seconds per bin: each request's overlap with each bin, added exactly (no sort of all requests)
    grid = CoverGrid(0.0, t_end, SERIES_BINS)
    for i in range(0, len(cs), 1 << 16):  # (in slices: bounded temporaries)
        grid.add("server", np.zeros(len(cs[i:i + (1 << 16)])), cs[i:i + (1 << 16)], ce[i:i + (1 << 16)])
    util = grid.rows().get(("server", 0), np.zeros(SERIES_BINS)) / np.diff(edges) / workers
    del grid, cs, ce
    if q is None:
        q = queue_length(pd.DataFrame({"start": s, "wait": w}))
    if len(q) > SERIES_EXACT:
        qe, qmean, qpeak = binned_queue(q, 0.0, t_end, bins=SERIES_BINS)
        queue = {"t": _clean(qe[:-1]), "q": _clean(qmean, 4), "peak": _clean(qpeak, 4), "binned": True}
    else:
        queue = {"t": _clean(q["t"]), "q": _clean(q["queue"], 4), "peak": None, "binned": False}
    _, qm, _ = binned_queue(q, 0.0, t_end, bins=1)
    return {"utilisation": busy / (t_end * workers), "busy_s": busy, "workers": workers, "requests": int(len(s)),
            "mean_wait": float(np.mean(w)) if len(w) else 0.0, "peak_wait": float(np.max(w)) if len(w) else 0.0,
            "mean_queue": float(qm[0]), "peak_queue": float(q["queue"].max()) if len(q) else 0.0,
            "what": dict(what),
            "reported": {k: float(v) for k, v in (reported or {}).items() if isinstance(v, (int, float))},
            "bins": _clean(edges), "util": _clean(util, 4), "queue": queue}


def staleness_stats(g: _Gather, t_end: float) -> dict[str, Any] | None:
    """Applied updates' staleness: histogram (one bar per value, or 40 bins past 60 values) and over time
    (every update, or mean and max per bin past :data:`SERIES_EXACT` updates)."""
    if not g.applies:
        return None
    return _staleness_stats(_cat([a[0] for a in g.applies]), _cat([a[2] for a in g.applies]), t_end)


def _staleness_stats(t: np.ndarray, st: np.ndarray, t_end: float) -> dict[str, Any] | None:
    """:func:`staleness_stats` from the applied updates' times and staleness."""
    ok = np.isfinite(t) & np.isfinite(st)
    t, st = t[ok], st[ok]
    if not len(st):
        return None
    top = int(np.max(st))
    if top <= 60 and np.all(st == np.round(st)):
        values, counts = np.unique(st.astype(np.int64), return_counts=True)
        hist = {"lo": values.tolist(), "hi": (values + 1).tolist(), "n": counts.tolist(), "integer": True}
    else:
        n, edges = np.histogram(st, bins=40)
        hist = {"lo": _clean(edges[:-1]), "hi": _clean(edges[1:]), "n": n.tolist(), "integer": False}
    if len(t) > SERIES_EXACT:
        edges = np.linspace(0.0, max(t_end, float(t.max())), SERIES_BINS + 1)
        b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, SERIES_BINS - 1)
        cnt = np.bincount(b, minlength=SERIES_BINS)
        mean = np.bincount(b, weights=st, minlength=SERIES_BINS) / np.maximum(cnt, 1)
        mx = np.full(SERIES_BINS, -np.inf)
        np.maximum.at(mx, b, st)
        keep = cnt > 0
        series = {"t": _clean(((edges[:-1] + edges[1:]) / 2)[keep]), "s": _clean(mean[keep], 4),
                  "max": _clean(mx[keep], 4), "binned": True}
    else:
        series = {"t": _clean(t), "s": _clean(st, 4), "max": None, "binned": False}
    return {"updates": int(len(st)), "mean": float(np.mean(st)), "max": float(np.max(st)),
            "hist": hist, "series": series}


def round_stats(g: _Gather) -> dict[str, Any]:
    """Synchronous rounds (start, end, participants, straggler, dropped) and every drop with its time.
    A round's straggler is the participant not dropped whose last upload inside the round ended last."""
    up_c = _cat([u[0] for u in g.uploads])
    up_e = _cat([u[1] for u in g.uploads])
    order = np.argsort(up_e, kind="stable")
    up_c, up_e = up_c[order], up_e[order]
    rounds = []
    for r in sorted(g.rounds, key=lambda r: (float(r["start"] or 0.0), float(r["end"] or 0.0))):
        try:
            rs, re_ = float(r["start"]), float(r["end"])
        except (TypeError, ValueError):
            continue
        rounds.append(_round_row(r, rs, re_, up_c, up_e))
    return {"rounds": rounds, "drops": g.drops}


def _round_row(r: dict[str, Any], rs: float, re_: float, up_c: np.ndarray, up_e: np.ndarray) -> dict[str, Any]:
    """One round of the rounds panel: its span, its straggler (the last of its kept clients whose upload
    ended inside the round, from uploads ``up_c``/``up_e`` sorted by end) and its dropped clients."""
    dropped = [int(x) for x in r["dropped"]]
    who = {int(x) for x in r["clients"]} - set(dropped)
    lo, hi = np.searchsorted(up_e, rs, side="left"), np.searchsorted(up_e, re_, side="right")
    straggler, done = None, None
    for ci, ti in zip(up_c[lo:hi][::-1].tolist(), up_e[lo:hi][::-1].tolist()):
        if int(ci) in who:
            straggler, done = int(ci), ti
            break
    return {"round": r["round"], "start": rs, "end": re_, "clients": len(r["clients"]),
            "straggler": straggler, "straggler_done": done, "dropped": dropped}


#: Labels of a client's intervals in the streamed breakdown, by code: :data:`BREAKDOWN_KEYS` less "idle" and
#: its reasons (spans of the whole run, summed apart: :meth:`PanelStream._idle_window`).
_LABELS = tuple(k for k in BREAKDOWN_KEYS[:-1] if k not in IDLE_REASONS)
#: Intervals :class:`PanelStream` holds before it folds the part of the run behind its watermark into the
#: per-client sums (about 25 bytes each).
PENDING_MAX = 50_000
#: The watermark trails the latest record time by this many times the longest reach back seen so far (a
#: record's time less the start of what it covers: a transfer's start, a request's arrival, a round's start).
LAG_FACTOR = 4.0


def union_by_group(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group id in ``g``: the length of the union of its intervals ``[s, e]`` (touching intervals merge,
    as :func:`fedsim.output.digest.merge_intervals` with gap 0 does).  Returns the groups and their lengths."""
    if not len(g):
        return np.empty(0, dtype=np.int64), np.empty(0)
    order = np.lexsort((e, s, g))
    g, s, e = g[order], s[order], e[order]
    reach = pd.Series(e).groupby(g, sort=False).cummax().to_numpy()
    new = np.ones(len(g), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] > reach[:-1])
    first = np.flatnonzero(new)
    length = np.maximum.reduceat(e, first) - s[first]
    groups, inv = np.unique(g[first], return_inverse=True)
    return groups, np.bincount(inv, weights=length)


class PanelStream:
    """What the panels draw, gathered from one streamed pass in bounded memory: the pass that reads the
    trace for the figures and the timeline feeds it (:func:`fedsim.output.digest.digest_trace`'s ``also``).

    The per-client breakdown is summed window by window: intervals wait in a buffer, and once it holds
    :data:`PENDING_MAX` of them, the part of the run before a watermark (the latest record time of the
    pieces of the file read whole, see :attr:`fedsim.sim.trace.Block.closes`, less :data:`LAG_FACTOR`
    times the longest reach back seen) is labelled and added to each client's sums, the
    rest kept.  Union lengths add over a cut, so the sums are those of :func:`client_breakdown` (up to
    rounding).  A record that reaches back behind the watermark (or a round that would change after it was
    settled) marks the stream ``unstable``: :func:`panels_data` then reads the trace again the exact way.
    A round's straggler and the server's work for it are settled once the watermark passes its end;
    uploads and aggregations older than the watermark (and every waiting round) are forgotten.  Held whole: the finished server requests (start,
    end, wait: what the utilisation and queue series are drawn from), applied updates, rounds and drops."""

    KINDS = _KINDS
    FIELDS = _FIELDS

    def __init__(self) -> None:
        self.pend: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # code, client, start, end
        self.n_pend = 0
        self.next_fold = PENDING_MAX
        self.done = 0.0  # the watermark: the run before it is summed
        self.t_now = float("-inf")
        self.t_safe = float("-inf")  # the latest record time of the pieces of the file read whole
        self.lag = 0.0
        self.sums: dict[int, np.ndarray] = {}  # client -> seconds per label
        self.unstable = False
        self.clients: set[int] = set()
        self.tasks: dict[int, int] = {}
        self.applies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # t, client, staleness
        self.srv: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # start, end, wait (finished requests)
        self.what: dict[str, int] = {}
        self.unfinished = 0  # server records without a start or an end (left out of the server's numbers)
        self.rounds: list[dict[str, Any]] = []
        self.drops: list[dict[str, Any]] = []
        self.up_c = np.empty(0)  # uploads not yet behind the watermark, file order
        self.up_e = np.empty(0)
        self.agg_s = np.empty(0)  # the server's work for no client, not yet behind the watermark
        self.agg_e = np.empty(0)
        self.waiting: list[dict[str, Any]] = []  # rounds whose uploads and aggregations may still come
        self.settled = float("-inf")  # the latest end of a settled round
        self.traffic: dict[tuple[str, str], list[float]] = {}
        self.t_last = 0.0
        self.slots: list[tuple[float, float, float]] = []  # t, busy, limit of the slots records
        self.round_spans: list[tuple[float, float]] = []  # every round's (start, end)
        self.idle_total = np.zeros(len(IDLE_REASONS))  # seconds of each reason's spans summed so far
        self.idle_mine: dict[int, np.ndarray] = {}  # client -> of those, seconds its own labels cover

    # ------------------------------------------------------------------ reading
    def _see(self, t: np.ndarray, start: np.ndarray) -> None:
        ok = np.isfinite(t) & np.isfinite(start)
        if ok.any():
            self.lag = max(self.lag, float(np.max(t[ok] - start[ok])))
            self.t_now = max(self.t_now, float(np.max(t[ok])))

    def _hold(self, code: int, c: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
        """Buffer one label's intervals (a client is a row of the table even when its intervals are empty)."""
        self.clients.update(np.unique(c[np.isfinite(c)]).astype(np.int64).tolist())
        ok = np.isfinite(c) & np.isfinite(s) & np.isfinite(e) & (e > s)
        if not ok.any():
            return
        c, s, e = c[ok], s[ok], e[ok]
        if self.done > 0 and (np.maximum(s, 0.0) < self.done).any():
            self.unstable = True  # reaches into the part already summed
        self.pend.append((np.full(len(c), code, dtype=np.int8), c, s, e))
        self.n_pend += len(c)

    def add(self, b: Any) -> None:
        if not len(b) or self.unstable:
            return
        t = b.t
        if np.isfinite(t).any():
            self.t_last = max(self.t_last, float(np.nanmax(t)))
        kind = b.kind
        c = b.num("client")
        if kind in ("download", "compute", "upload", "offline"):
            s, e = b.num("start"), b.num("end")
            self._see(t, s)
            self._hold(_LABELS.index("unavailable" if kind == "offline" else kind), c, s, e)
            if kind == "compute":
                for k, n in zip(*np.unique(c[np.isfinite(c)], return_counts=True)):
                    self.tasks[int(k)] = self.tasks.get(int(k), 0) + int(n)
                self._traffic_of(b, "compute", np.full(len(b), np.nan), e - s)
            else:
                if kind == "upload":
                    if (e <= self.settled).any():
                        self.unstable = True  # an upload a settled round may have ended with
                    self.up_c = np.concatenate([self.up_c, c])
                    self.up_e = np.concatenate([self.up_e, e])
                if kind in ("download", "upload"):
                    self._traffic_of(b, kind, b.num("bytes"), e - s)
        elif kind == "server":
            s, e, w = b.num("start"), b.num("end"), b.num("wait")
            w = np.where(np.isfinite(w), w, 0.0)
            self._see(t, s - w)
            own = np.isfinite(c)
            self._hold(_LABELS.index("queue"), c[own], (s - w)[own], s[own])
            self._hold(_LABELS.index("served"), c[own], s[own], e[own])
            gs, ge = s[~own], e[~own]
            if len(gs):
                if (gs < self.settled).any():
                    self.unstable = True  # work for a round already settled
                self.agg_s = np.concatenate([self.agg_s, gs])
                self.agg_e = np.concatenate([self.agg_e, ge])
            ok = np.isfinite(s) & np.isfinite(e)
            self.unfinished += int((~ok).sum())
            self.srv.append((s[ok], e[ok], w[ok]))
            whats = [str(x) if x is not None else "request" for x in (b.values("what") if b.has("what")
                                                                       else [None] * len(b))]
            for k, n in pd.Series(whats, dtype=object).value_counts().items():
                self.what[str(k)] = self.what.get(str(k), 0) + int(n)
            _count_traffic(self.traffic, "server", whats, np.full(len(b), np.nan), e - s)
        elif kind == "apply":
            self.applies.append((t, c, b.num("staleness")))
        elif kind == "round":
            for rnd, s, e, cl, dr, ti in zip(b.values("round"), b.values("start"), b.values("end"), b.values("clients"),
                                             b.values("dropped"), t.tolist()):
                self._round_arrives({"round": rnd, "start": s, "end": e, "clients": cl or [],
                                     "dropped": dr if isinstance(dr, list) else []}, ti)
        elif kind == "drop":
            for ti, ci, why, rnd in zip(t.tolist(), c.tolist(), b.values("reason"), b.values("round")):
                self.drops.append({"t": ti, "client": None if not np.isfinite(ci) else int(ci),
                                   "reason": "" if why is None else str(why), "round": rnd})
        elif kind == "slots":
            if self.done > 0 and (t < self.done).any():
                self.unstable = True  # (written at their time: never behind the watermark)
            self.slots.extend(zip(t.tolist(), b.num("busy").tolist(), b.num("limit").tolist()))

    def piece_read(self) -> None:
        """A piece of the file has been read whole (a block that ``closes`` it was given, of any kind): the
        watermark may move on.  Before it, the rest of the piece may hold earlier records of other kinds."""
        if self.unstable:
            return
        self.t_safe = self.t_now
        self._settle(self.t_safe - LAG_FACTOR * self.lag)
        if self.n_pend > self.next_fold:
            self._fold(self.t_safe - LAG_FACTOR * self.lag)
            self.next_fold = max(PENDING_MAX, 2 * self.n_pend)  # (what could not be folded waits for more)

    def _traffic_of(self, b: Any, direction: str, nbytes: np.ndarray, seconds: np.ndarray) -> None:
        whats: list[Any] = b.values("what") if b.has("what") else [None] * len(b)
        if direction == "download":  # a model download names its version; a gradient's has none
            v = b.num("version")
            whats = [_UNVERSIONED if w is None and not np.isfinite(x) else w for w, x in zip(whats, v.tolist())]
        _count_traffic(self.traffic, direction, whats, nbytes, seconds)

    def _round_arrives(self, r: dict[str, Any], t: float) -> None:
        """A round's record: its participants wait for it from its start to its end (held at once); its
        straggler and the server's work for it are settled once the watermark has passed its end (the
        records of its uploads and aggregations may follow its own in the file)."""
        try:
            rs, re_ = float(r["start"]), float(r["end"])
        except (TypeError, ValueError):
            self.rounds.append({**r, "bad": True})
            return
        if np.isfinite(t) and np.isfinite(rs):
            self.lag = max(self.lag, t - rs)
            self.t_now = max(self.t_now, t)
        if self.done > 0 and rs < self.done:
            self.unstable = True  # a round reaching into the part already summed
        if re_ > rs:
            self.round_spans.append((rs, re_))
        part = [int(x) for x in r["clients"] if isinstance(x, (int, float))]
        if part and re_ > rs:
            arr = np.asarray(part, dtype=float)
            self._hold(_LABELS.index("round_wait"), arr, np.full(len(arr), rs), np.full(len(arr), re_))
        self.waiting.append({**r, "start": rs, "end": re_, "part": part})

    def _settle(self, until: float) -> None:
        """Settle the waiting rounds that end before ``until``: the straggler (as :func:`round_stats` finds
        it) and the server's work for no client inside the round, served time of its participants."""
        if not self.waiting or not any(r["end"] < until for r in self.waiting):
            return
        order = np.argsort(self.up_e, kind="stable")
        up_c, up_e = self.up_c[order], self.up_e[order]
        still = []
        for r in self.waiting:
            rs, re_ = r["start"], r["end"]
            if not re_ < until:
                still.append(r)
                continue
            self.rounds.append(_round_row(r, rs, re_, up_c, up_e))
            if r["part"] and re_ > rs:
                arr = np.asarray(r["part"], dtype=float)
                inside = (self.agg_s >= rs) & (self.agg_s < re_)
                for a, b in zip(self.agg_s[inside].tolist(), self.agg_e[inside].tolist()):
                    self._hold(_LABELS.index("served"), arr, np.full(len(arr), a), np.full(len(arr), min(b, re_)))
            self.settled = max(self.settled, re_)
        self.waiting = still

    def _fold(self, until: float, t_end: float | None = None) -> None:
        """Label the held intervals' time in ``[done, until]`` (clipped to ``[0, t_end]``) and add it to the
        clients' sums; keep the parts after ``until``."""
        self._settle(until)
        # never into a round not yet settled: the server's work for it is added when it is
        until = min([until] + [r["start"] for r in self.waiting])
        if not until > self.done or not self.pend:
            return
        code, c, s, e = (np.concatenate([p[i] for p in self.pend]) for i in range(4))
        lo = max(self.done, 0.0)
        hi = until if t_end is None else min(until, t_end)
        ws, we = np.clip(s, lo, max(hi, lo)), np.clip(e, lo, max(hi, lo))
        ok = we > ws
        cs, cc, cws, cwe = code[ok], c[ok].astype(np.int64), ws[ok], we[ok]
        self._idle_window(lo, hi, cc, cws, cwe)
        covered = {}
        prev: dict[int, float] = {}
        for k in range(len(_LABELS)):
            m = cs <= k
            groups, length = union_by_group(cc[m], cws[m], cwe[m])
            now = dict(zip(groups.tolist(), length.tolist()))
            for cl, v in now.items():
                row = self.sums.get(cl)
                if row is None:
                    row = self.sums[cl] = np.zeros(len(_LABELS))
                row[k] += max(v - prev.get(cl, 0.0), 0.0)
            prev = now
            covered = now
        del covered
        keep = e > until
        self.pend = [(code[keep], c[keep], np.maximum(s[keep], until), e[keep])] if keep.any() else []
        self.n_pend = int(keep.sum())
        self.done = until
        # a round not yet settled starts after the watermark or at its earliest waiting one: older uploads
        # and aggregations cannot be its own
        lo = until
        keep = self.up_e >= lo
        self.up_c, self.up_e = self.up_c[keep], self.up_e[keep]
        keep = self.agg_s >= lo
        self.agg_s, self.agg_e = self.agg_s[keep], self.agg_e[keep]

    def _idle_window(self, lo: float, hi: float, c: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
        """Sum the :data:`IDLE_REASONS` spans inside the window ``[lo, hi]`` and, per client, the part of them
        its own intervals (``c``, ``s``, ``e``: every label's, cut to the window) cover; a client's share of
        a reason is then the total less its own part (:meth:`breakdown`)."""
        if not hi > lo:
            return
        spans = idle_spans(hi, self.round_spans, self.slots)
        groups, ms, me = merged_by_group(c, s, e)
        keys, inv = np.unique(groups, return_inverse=True) if len(groups) else (np.empty(0, np.int64), None)
        for r, key in enumerate(IDLE_REASONS):
            gs, ge = _clip(*spans[key], lo, hi)
            if not len(gs):
                continue
            self.idle_total[r] += float(np.sum(ge - gs))
            if inv is None:
                continue
            mine = np.bincount(inv, weights=measure_inside(gs, ge, ms, me), minlength=len(keys))
            for cl, v in zip(keys.tolist(), mine.tolist()):
                row = self.idle_mine.get(cl)
                if row is None:
                    row = self.idle_mine[cl] = np.zeros(len(IDLE_REASONS))
                row[r] += v

    # ------------------------------------------------------------------ results
    def breakdown(self, t_end: float, num_clients: int | None = None) -> pd.DataFrame | None:
        """:func:`client_breakdown`'s table; None when the stream is unstable (read the exact way)."""
        self._settle(float("inf"))
        if self.unstable or (self.done > 0 and self.done > t_end):
            return None
        self._fold(float("inf"), t_end)
        if self.done < t_end:  # (nothing was held past the watermark: the reasons' spans still count)
            self._idle_window(max(self.done, 0.0), t_end, np.empty(0, np.int64), np.empty(0), np.empty(0))
            self.done = t_end
        rows = {}
        for cl in sorted(set(self.clients) | set(self.sums) | set(range(num_clients or 0))):
            v = self.sums.get(cl, np.zeros(len(_LABELS)))
            row = dict(zip(_LABELS, v.tolist()))
            idle = max(t_end - float(v.sum()), 0.0)
            why = np.maximum(self.idle_total - self.idle_mine.get(cl, np.zeros(len(IDLE_REASONS))), 0.0)
            for key, x in zip(IDLE_REASONS, why.tolist()):
                row[key] = min(x, idle)
                idle -= row[key]
            row["idle"] = max(idle, 0.0)
            rows[cl] = row
        out = pd.DataFrame.from_dict(rows, orient="index", columns=list(BREAKDOWN_KEYS)) if rows else \
            pd.DataFrame(columns=list(BREAKDOWN_KEYS))
        out.index.name = "client"
        tasks = np.repeat(np.array(list(self.tasks), dtype=float), list(self.tasks.values())) if self.tasks \
            else np.empty(0)
        return _client_extras(out, tasks, _cat([a[1] for a in self.applies]), _cat([a[2] for a in self.applies]),
                              self.drops)

    def server(self, t_end: float, workers: int, reported: dict[str, Any] | None,
               queue: pd.DataFrame | None = None) -> dict[str, Any] | None:
        """:func:`server_stats`; ``queue``: the requests' :func:`~fedsim.output.digest.queue_length` when already
        computed (the digest's, :meth:`fedsim.output.digest.TraceDigest.queue`), used when every request is finished."""
        if not self.srv or not t_end > 0:
            return None
        s, e, w = (_cat([p[i] for p in self.srv]) for i in range(3))
        return _server_stats(s, e, w, self.what, t_end, workers, reported,
                             queue if self.unfinished == 0 else None)

    def staleness(self, t_end: float) -> dict[str, Any] | None:
        if not self.applies:
            return None
        return _staleness_stats(_cat([a[0] for a in self.applies]), _cat([a[2] for a in self.applies]), t_end)

    def round_table(self) -> dict[str, Any]:
        self._settle(float("inf"))
        rounds = sorted((r for r in self.rounds if not r.get("bad")),
                        key=lambda r: (float(r["start"] or 0.0), float(r["end"] or 0.0)))
        return {"rounds": rounds, "drops": self.drops}


#: The per-client breakdown as a table, beside report.html: seconds per label of :data:`BREAKDOWN` (the
#: idle time split by why) and the per-client counts.
BREAKDOWN_CSV = "client_breakdown.csv"


def write_breakdown_csv(run_dir: str | Path, table: pd.DataFrame) -> Path:
    """Write :data:`BREAKDOWN_CSV` (one row per client, seconds per label, each row summing to the run's
    time) from :func:`client_breakdown`'s table: the numbers the report's bars draw, for a reader's own
    analysis."""
    path = Path(run_dir) / BREAKDOWN_CSV
    cols = [*BREAKDOWN_KEYS, "tasks", "per_task_s", "updates", "mean_staleness", "drops"]
    write_csv(table[cols].reset_index(), path, float_format="%.9g")
    return path


def panels_data(run_dir: str | Path, stream: PanelStream | None = None,
                queue: pd.DataFrame | None = None) -> dict[str, Any] | None:
    """Everything the panels draw for one run (JSON-ready); None when the run has no trace."""
    return _panels(run_dir, stream, queue)[0]


def _panels(run_dir: str | Path, stream: PanelStream | None = None,
            queue: pd.DataFrame | None = None) -> tuple[dict[str, Any] | None, pd.DataFrame | None]:
    """:func:`panels_data` and the breakdown table it was drawn from (None, None without a trace).

    ``stream``: a :class:`PanelStream` already fed the whole trace (by the pass that read it for the
    figures); without one, the trace is streamed here.  Should the stream turn out unstable (see its
    docstring), the trace is read again holding every interval (:func:`gather`), so the numbers are
    always those of the exact reading.  ``queue``: the server's queue length when already computed (see
    :meth:`PanelStream.server`)."""
    run_dir = Path(run_dir)
    path = trace_path(run_dir)
    if not path.exists():
        return None, None
    if stream is None:
        stream = PanelStream()
        for b in iter_blocks(path, kinds=_KINDS, fields=_FIELDS):
            stream.add(b)
            if b.closes:
                stream.piece_read()
    t_end = _run_time(run_dir, stream.t_last)
    workers, reported = _workers(run_dir), _server_summary(run_dir)
    n_clients = _num_clients(run_dir)
    table = stream.breakdown(t_end, n_clients)
    if table is not None:
        server, staleness, rounds, traffic_in = (stream.server(t_end, workers, reported, queue), stream.staleness(t_end),
                                                 stream.round_table(), stream.traffic)
    else:
        del stream
        g = gather(run_dir)
        assert g is not None
        table = client_breakdown(g, t_end, n_clients)
        server, staleness, rounds, traffic_in = (server_stats(g, t_end, workers, reported), staleness_stats(g, t_end),
                                                 round_stats(g), g.traffic)
    clients = {"id": [int(c) for c in table.index],
               "parts": [_clean(table[k], 6) for k in DRAW_ORDER],
               "tasks": table["tasks"].astype(int).tolist(), "per_task": _clean(table["per_task_s"]),
               "updates": table["updates"].astype(int).tolist(), "stale": _clean(table["mean_staleness"], 4),
               "drops": table["drops"].astype(int).tolist()}
    merged = merge_traffic(traffic_in)
    traffic = [{"direction": d, "purpose": p, "count": int(v[0]), "bytes": v[1], "seconds": v[2]}
               for (d, p), v in sorted(merged.items())]
    spare = iter(_SPARE * 4)
    colours = {}
    for row in traffic:
        if row["purpose"] not in colours:
            colours[row["purpose"]] = PURPOSE_COLOURS.get(row["purpose"]) or next(spare, "#999999")
        # a whole model moves in its direction's colour (uploads green, downloads blue, as on the timelines)
        row["colour"] = DIRECTION_COLOURS.get(row["direction"]) if row["purpose"] == "model" else None
        row["colour"] = row["colour"] or colours[row["purpose"]]
    spec = {k: (lab, col) for k, lab, col in BREAKDOWN}
    return {"t_end": t_end, "labels": [spec[k][0] for k in DRAW_ORDER], "keys": list(DRAW_ORDER),
            "colours": [spec[k][1] for k in DRAW_ORDER], "clients": clients, "server": server,
            "staleness": staleness, "rounds": rounds, "traffic": traffic, "purpose_colours": colours}, table


def merge_traffic(traffic_in: dict[tuple[str, str], list[float]]) -> dict[tuple[str, str], list[float]]:
    """Count, bytes and seconds per (direction, purpose), an unversioned download named by the run (split
    learning's gradients, else a model)."""
    split = any(p == "activations" for _, p in traffic_in)
    merged: dict[tuple[str, str], list[float]] = {}
    for (d, p), v in traffic_in.items():
        if p == _UNVERSIONED:
            p = transfer_purpose(d, None, None, split)
        row = merged.setdefault((d, p), [0, 0.0, 0.0])
        for i in range(3):
            row[i] += v[i]
    return merged


def ideal_links_note(traffic_in: dict[tuple[str, str], list[float]]) -> str:
    """One sentence naming the transfers that take 0 s (an ideal link: no latency, infinite rate), or "":
    a reader who finds no download on the timeline, or no "gradients" colour, learns why."""
    merged = merge_traffic(traffic_in)
    parts = []
    for d, link in (("download", "downlink"), ("upload", "uplink")):
        rows = {p: v for (dd, p), v in merged.items() if dd == d and v[0] > 0}
        zero = sorted(p for p, v in rows.items() if v[2] <= 0)
        if not zero:
            continue
        what = ", ".join(f"{int(rows[p][0]):,} {p}" for p in zero)
        if len(zero) == len(rows):
            parts.append(f"The {link} is ideal: every {d} takes 0 s ({what}), so the timeline draws no {d} bar")
        else:
            parts.append(f"Some {d}s take 0 s (an ideal link) and draw no bar on the timeline: {what}")
    return "; ".join(parts) + "." if parts else ""


# ---------------------------------------------------------------------------------------------- HTML

def glossary_html() -> str:
    """The glossary, a section the navigation links to."""
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in GLOSSARY)
    return f"<h2 id='glossary'>Glossary</h2><dl class='fp-gloss'>{items}</dl>"


def _is_runs_folder(path: Path) -> bool:
    """A folder of runs whose page exists or is coming (a sweep announces itself before its runs; a
    multi-algorithm run and a --seeds folder get their links from :func:`link_up` when their page is written)."""
    return (path / "report.html").exists() or (path / "sweep.yaml").exists()


def nav_html(run_dir: Path, sections: Sequence[tuple[str, str]] = ()) -> str:
    """The bar at the top of a report: up to the folder of runs this one belongs to (a multi-algorithm run,
    a seed of ``--seeds``, a point of a sweep, up to two levels), the page's sections, the glossary."""
    links = []
    up = run_dir.resolve().parent
    for depth in (1, 2, 3):
        if _is_runs_folder(up) and up != run_dir.resolve():
            rel = "../" * depth + "report.html"
            links.append(f"<a class='fp-up' href='{rel}'>↑ up: {html.escape(up.name)}</a>")
            break
        up = up.parent
    links += [f"<a href='#{html.escape(a)}'>{html.escape(t)}</a>" for a, t in sections]
    links.append("<a href='#glossary'>glossary</a>")
    return "<nav class='fp-nav'>" + " · ".join(links) + "</nav>"


def link_up(parent: str | Path, reports: Iterable[Path] | None = None) -> int:
    """Give the reports of the runs inside ``parent`` (default: its direct sub-folders) an "up" link to
    ``parent``'s report.html, once that report exists: a folder's runs are written before the folder's own
    page, so their pages could not know it then.  Returns how many pages were given the link."""
    import os
    from urllib.parse import quote

    parent = Path(parent)
    if reports is None:
        reports = [d / "report.html" for d in parent.iterdir() if d.is_dir()]
    done = 0
    for page in reports:
        if not page.exists():
            continue
        text = page.read_text(encoding="utf-8")
        if "class='fp-up'" in text or "<nav class='fp-nav'>" not in text:
            continue
        rel = quote(Path(os.path.relpath(parent / "report.html", page.parent)).as_posix())
        link = f"<a class='fp-up' href='{rel}'>↑ up: {html.escape(parent.name)}</a> · "
        write_text(page, text.replace("<nav class='fp-nav'>", "<nav class='fp-nav'>" + link, 1))
        done += 1
    return done


def server_summary_rows(summary: dict[str, Any] | list[Any],
                        fmt_seconds: Callable[[float], str]) -> list[tuple[str, list[str]]]:
    """Rows for the summary table from summary.json's ``server`` block: utilisation, mean and peak queue
    wait, mean and peak queue length, requests (one cell per run of the table).  ``fmt_seconds`` writes
    the waits (the report's formatter, passed in: this module sits below :mod:`fedsim.output.report`)."""
    runs = summary if isinstance(summary, list) else [summary]
    servers = [r.get("server") if isinstance(r, dict) and isinstance(r.get("server"), dict) else {} for r in runs]
    if not any(servers):
        return []
    spec = (("server utilisation", "utilisation", lambda v: f"{v:.1%}"),
            ("server mean queue wait", "mean_wait", fmt_seconds), ("server peak queue wait", "max_wait", fmt_seconds),
            ("server mean queue length", "mean_queue_length", lambda v: f"{v:.3g}"),
            ("server peak queue length", "max_queue_length", lambda v: f"{v:.0f}"),
            ("server requests", "requests", lambda v: f"{int(v):,}"))
    rows = []
    for name, key, f in spec:
        cells = [f(s[key]) if isinstance(s.get(key), (int, float)) else "" for s in servers]
        if any(cells):
            rows.append((name, cells))
    return rows


def panels_html(run_dir: str | Path, stream: PanelStream | None = None, queue: pd.DataFrame | None = None) -> str:
    """The "What happened" section of a run's report.html and the glossary (only the glossary when the run
    has no trace: a folder of runs).  ``stream``: see :func:`panels_data`."""
    data, table = _panels(run_dir, stream, queue)
    if data is None or table is None:
        return glossary_html()  # (the navigation links to it on every page)
    write_breakdown_csv(run_dir, table)
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    ideal = ideal_links_note({(r["direction"], r["purpose"]): [r["count"], r["bytes"], r["seconds"]]
                              for r in data["traffic"]})
    link = ""
    if (Path(run_dir) / "check" / "staleness_hist.png").exists():
        link = " <a href='check/staleness_hist.png'>check/staleness_hist.png</a> (from fedsim check)."
    return ("<h2 id='fp-title'>What happened</h2><p class='hint'>Where each client's time went, the server, "
            "staleness and rounds, from the trace. Time series share the interactive timeline's virtual-time "
            "axis (zoom there). Hover anything for its numbers.</p>"
            "<h3 id='fp-breakdown-title'>Per-client time breakdown</h3><p class='hint'>Each bar is one client's "
            "whole run (every second labelled, so the bars are equally long); a client's time with no task is "
            "split by why: waiting for a slot (every concurrency slot taken), not selected (a round ran without "
            "it), else idle. The numbers are in <a href='" + BREAKDOWN_CSV + "'>" + BREAKDOWN_CSV + "</a>. "
            "Pick the clients to show and "
            "their order: the interactive timeline above shows the same clients in the same order.</p><div class='fp-tools'>sort by <select id='fp-sort'><option value='id'>client id"
            "</option><option value='slowest'>slowest (time per task)</option><option value='stale'>most stale"
            "</option><option value='drops'>most dropped</option><option value='round_wait'>most waiting for "
            "the round</option><option value='concurrency'>most waiting for a slot</option><option "
            "value='not_selected'>most not selected</option><option value='idle'>most idle</option></select> show <input id='fp-count' "
            "type='number' min='1' value='40' style='width:5em'> clients <input id='fp-pick' type='text' "
            "placeholder='or list: 3, 7-9' style='width:10em'> <span id='fp-shown' class='hint'></span></div>"
            "<div class='fp-legend' id='fp-legend'></div><div class='fp-wrap' id='fp-wrap'>"
            "<svg id='fp-breakdown' xmlns='http://www.w3.org/2000/svg'></svg>"
            "<h3 id='fp-server-title'>The server</h3><div id='fp-server-stats' class='hint'></div>"
            "<svg id='fp-server' xmlns='http://www.w3.org/2000/svg'></svg>"
            "<h3 id='fp-rounds-title'>Rounds, stragglers and drops</h3><div id='fp-rounds-stats' class='hint'></div>"
            "<svg id='fp-rounds' xmlns='http://www.w3.org/2000/svg'></svg>"
            f"<h3 id='fp-stale-title'>Staleness</h3><div id='fp-stale-stats' class='hint'>{link}</div>"
            "<svg id='fp-stale-hist' xmlns='http://www.w3.org/2000/svg'></svg>"
            "<svg id='fp-stale-time' xmlns='http://www.w3.org/2000/svg'></svg>"
            "<h3 id='fp-traffic-title'>Traffic and server work by purpose</h3><p class='hint'>Transfers and "
            "server requests grouped by the trace's <code>what</code>: split learning's activations and "
            "gradients apart from whole models." + (f" <span id='fp-ideal'>{html.escape(ideal)}</span>" if ideal
                                                      else "") + "</p><svg id='fp-traffic' xmlns='http://www.w3.org/2000/svg'></svg>"
            "<div class='fp-tip' id='fp-tip'></div></div>"
            f"<script type='application/json' id='fedsim-panels'>{payload}</script>"
            f"<script>{with_formats(PANELS_JS)}</script>" + glossary_html())


#: The panels' style (``static/panels.css``), shared with the folder reports.
PANELS_CSS = static_text("panels.css")

#: The report's number formats in JavaScript (seconds, bytes, link rates), shared by every script of the
#: page: each script substitutes it for its ``//@format`` line, inside its own closure.
JS_FORMAT = static_text("format.js")


def with_formats(js: str) -> str:
    """``js`` with :data:`JS_FORMAT` in place of its ``//@format`` line."""
    return js.replace("  //@format\n", JS_FORMAT, 1)


# Plain SVG and DOM calls, no library: the page works offline and from a file.
#: The panels' script (``static/panels.js``; its ``//@format`` line takes :data:`JS_FORMAT`).
PANELS_JS = static_text("panels.js")
