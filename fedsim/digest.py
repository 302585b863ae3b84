"""What a run's figures and report.html draw, gathered in one streamed pass over its trace.

A trace of millions of events is never held in memory: :func:`digest_trace` reads it a block at a time
(:func:`fedsim.sim.trace.iter_blocks`) and keeps only what the outputs draw:

* the timeline's bars: the intervals of the shown clients (the lowest ids) inside the window, and the
  server's; once there are more than the figure draws unmerged, bars closer than a lower bound of the
  final merge gap are merged as they come (merging with a smaller gap and then with the final one gives
  the bars of merging with the final one), so they stay few;
* the achieved link rates (one float per transfer) and the server's request times (start, wait);
* the interactive timeline's first bars in time (a bounded buffer of candidates), with the updates'
  staleness of the shown clients;
* the sub-model heat map's per-client sums.

The clients shown are the lowest ids of those with a download, compute, upload or offline record; a
trace whose ids come in such an order that a kept set had to change after it was pruned is read a
second time with the final set known, so every output is exactly what the whole trace in memory gave.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from fedsim.sim.trace import Block, iter_blocks

PHASES = ("download", "compute", "upload", "offline")
#: Kinds drawn as bars in report.html, in the order of their codes in the page's data.
INTERACTIVE_KINDS = ("download", "compute", "upload", "offline", "server", "wait")
DIGEST_KINDS = (*PHASES, "server", "apply", "dispatch")
DIGEST_FIELDS = ("client", "start", "end", "wait", "rate_bps", "bytes", "staleness", "submodel")
#: Bars held before the timeline's merging starts (bounded memory for long traces).
_COMPRESS_AT = 200_000
#: Interactive candidates held beyond twice the page's cap before the buffer is cut back to the cap.
_PRUNE_SLACK = 1024


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


def merge_intervals(s: np.ndarray, e: np.ndarray, gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals closer than ``gap`` merged (sorted by start, then end): a new bar begins where a start
    lies more than ``gap`` past every earlier end, and ends at the largest end of its intervals."""
    if not len(s):
        return s, e
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.concatenate([[True], s[1:] - reach[:-1] > gap]))
    return s[first], np.maximum.reduceat(e, first)


class _Rows:
    """Intervals of one timeline row and phase: raw until merging starts, then merged as they come."""

    __slots__ = ("s", "e", "count", "total")

    def __init__(self) -> None:
        self.s: list[np.ndarray] = []
        self.e: list[np.ndarray] = []
        self.count = 0  # raw intervals seen
        self.total = 0.0  # their summed duration (for the legend's mean)

    def add(self, s: np.ndarray, e: np.ndarray, durations: np.ndarray | None = None) -> None:
        if len(s):
            self.s.append(s)
            self.e.append(e)
            self.count += len(s)
            d = e - s if durations is None else durations
            self.total += float(np.nansum(d))

    def held(self) -> int:
        return sum(map(len, self.s))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if len(self.s) != 1:
            self.s = [np.concatenate(self.s) if self.s else np.empty(0)]
            self.e = [np.concatenate(self.e) if self.e else np.empty(0)]
        return self.s[0], self.e[0]

    def merge(self, gap: float) -> None:
        s, e = self.arrays()
        s, e = merge_intervals(s, e, gap)
        self.s, self.e = [s], [e]


@dataclass
class TraceDigest:
    """The aggregates of one trace that the run's outputs draw (see the module docstring).

    ``since``/``until`` is the timeline's window, ``timeline_clients``/``timeline_bars`` its client rows
    and the bar count past which it merges; ``interactive_clients``/``interactive_bars`` are those of
    report.html's timeline.  ``known_clients``: the clients with phase records, when already known
    (the second pass); ``merge``: whether the timeline may merge while reading."""

    since: float = 0.0
    until: float | None = None
    timeline_clients: int = 30
    timeline_bars: int = 3000
    interactive_clients: int = 40
    interactive_bars: int = 20000
    known_clients: Sequence[int] | None = None
    merge: bool = True

    records: int = 0
    t_end_timeline: float = float("-inf")  # last time of a phase or server record
    t_end: float = float("-inf")  # and of an apply record
    clients: set[int] = field(default_factory=set)
    phase_rows: dict[tuple[str, int], _Rows] = field(default_factory=dict)
    server_row: _Rows = field(default_factory=_Rows)
    wait_rows: dict[int, _Rows] = field(default_factory=dict)
    merged_while_reading: bool = False
    rates: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"upload": [], "download": []})
    server_start: list[np.ndarray] = field(default_factory=list)
    server_wait: list[np.ndarray] = field(default_factory=list)
    server_end_max: float = float("nan")
    has_server: bool = False
    has_rates: bool = False
    bars: dict[str, np.ndarray] | None = None  # interactive candidates
    bar_counts: dict[int, int] = field(default_factory=dict)  # per client: phase bars and queue waits
    server_count: int = 0
    applies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    submodel: dict[int, list[Any]] = field(default_factory=dict)  # client -> [whole-model count, sums, counts]
    unstable: bool = False  # a kept client set changed after pruning: read again with the clients known
    _pruned_bounds: set[float] = field(default_factory=set)

    # ------------------------------------------------------------------ reading

    def _bound(self, k: int) -> float:
        """The k-th lowest client id seen (inf while fewer): records of higher ids are not kept."""
        pool = self.known_clients if self.known_clients is not None else self.clients
        if len(pool) < k:
            return float("inf")
        return float(sorted(pool)[k - 1])

    def add(self, b: Block) -> None:
        """Fold one block of records into the digest."""
        n = len(b)
        if not n:
            return
        self.records += n
        kind = b.kind
        if kind in PHASES or kind == "server":
            if np.isfinite(b.t).any():
                last = float(np.nanmax(b.t))
                self.t_end_timeline = max(self.t_end_timeline, last)
                self.t_end = max(self.t_end, last)
        if kind in PHASES:
            self._phase(b)
        elif kind == "server":
            self._server(b)
        elif kind == "apply":
            self._apply(b)
        elif kind == "dispatch":
            self._dispatch(b)

    def _new_clients(self, c: np.ndarray) -> None:
        before = self._bound(self.timeline_clients), self._bound(self.interactive_clients)
        new = set(np.unique(c[~np.isnan(c)]).astype(np.int64).tolist()) - self.clients
        if not new:
            return
        self.clients |= new
        if self.known_clients is None and self._pruned_bounds:
            after = self._bound(self.timeline_clients), self._bound(self.interactive_clients)
            if after != before:  # a pruned set no longer is the set kept
                self.unstable = True

    def _window(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        ok = e >= self.since
        return ok & (s <= self.until) if self.until is not None else ok & ~np.isnan(s)

    def _phase(self, b: Block) -> None:
        c, s, e = b.num("client"), b.num("start"), b.num("end")
        self._new_clients(c)
        vis = self._window(s, e) & (c <= self._bound(self.timeline_clients))
        if vis.any():
            for client in np.unique(c[vis]).astype(np.int64).tolist():
                m = vis & (c == client)
                self.phase_rows.setdefault((b.kind, client), _Rows()).add(s[m], e[m])
        if b.kind in self.rates and b.has("rate_bps"):
            r = b.num("rate_bps")
            r = r[~np.isnan(r)]
            if len(r):
                self.rates[b.kind].append(r)
                self.has_rates = True
        keep = c <= self._bound(self.interactive_clients)
        if keep.any():
            for client, k in zip(*np.unique(c[keep], return_counts=True)):
                self.bar_counts[int(client)] = self.bar_counts.get(int(client), 0) + int(k)
            code = np.full(int(keep.sum()), INTERACTIVE_KINDS.index(b.kind), dtype=np.float64)
            self._candidates(s[keep], 1.0 + c[keep], 0, b.seq[keep], code, e[keep], c[keep],
                             b.num("bytes")[keep], b.num("rate_bps")[keep], b.num("wait")[keep])
        self._maybe_merge()

    def _server(self, b: Block) -> None:
        self.has_server = True
        c, s, e, w = b.num("client"), b.num("start"), b.num("end"), b.num("wait")
        self.server_start.append(s)
        self.server_wait.append(w)
        if np.isfinite(e).any():
            top = float(np.nanmax(e))
            self.server_end_max = top if np.isnan(self.server_end_max) else max(self.server_end_max, top)
        win = self._window(s, e)
        self.server_row.add(s[win], e[win], (e - s)[win])
        queued = win & (w > 0) & (c <= self._bound(self.timeline_clients))
        if queued.any():
            for client in np.unique(c[queued]).astype(np.int64).tolist():
                m = queued & (c == client)
                self.wait_rows.setdefault(client, _Rows()).add(s[m] - w[m], s[m], w[m])
        self.server_count += len(b)
        nan = np.full(len(b), np.nan)
        self._candidates(s, np.zeros(len(b)), 1, b.seq, np.full(len(b), 4.0), e, c, nan, nan, w)
        waits = (w > 0) & (c <= self._bound(self.interactive_clients))
        if waits.any():
            for client, k in zip(*np.unique(c[waits], return_counts=True)):
                self.bar_counts[int(client)] = self.bar_counts.get(int(client), 0) + int(k)
            m = waits
            nan = np.full(int(m.sum()), np.nan)
            self._candidates(s[m] - w[m], 1.0 + c[m], 2, b.seq[m], np.full(int(m.sum()), 5.0), s[m], c[m], nan, nan,
                             w[m])
        self._maybe_merge()

    def _apply(self, b: Block) -> None:
        c = b.num("client")
        if np.isfinite(b.t).any():
            self.t_end = max(self.t_end, float(np.nanmax(b.t)))
        keep = ~np.isnan(c)  # every client's: a server request's bar carries its client's staleness too
        if keep.any():
            self.applies.append((c[keep], b.t[keep], b.num("staleness")[keep]))

    def _dispatch(self, b: Block) -> None:
        if not b.has("submodel"):
            return

        for c, sub in zip(b.values("client"), b.values("submodel")):
            kept = _kept_per_block(sub)
            entry = self.submodel.setdefault(int(c), [0, [], []])
            if not kept:
                entry[0] += 1
                continue
            sums, counts = entry[1], entry[2]
            while len(sums) < len(kept):
                sums.append(0.0)
                counts.append(0)
            for i, v in enumerate(kept):
                sums[i] += v
                counts[i] += 1

    _KEYS = ("start", "row", "group", "seq", "kind", "end", "client", "bytes", "rate", "wait")

    def _candidates(self, *cols: Any) -> None:
        """Add interactive bars; past twice the cap, keep the first ``interactive_bars`` by (start, row,
        group, seq): the page's order (bars, then server requests, then queue waits, each in file order)."""
        n = len(cols[0])
        new = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for k, v in zip(self._KEYS, cols)}
        if self.bars is None:
            self.bars = {k: v.copy() for k, v in new.items()}
        else:
            self.bars = {k: np.concatenate([self.bars[k], new[k]]) for k in self._KEYS}
        if len(self.bars["start"]) > 2 * self.interactive_bars + _PRUNE_SLACK:
            self._prune()

    def _prune(self) -> None:
        assert self.bars is not None
        bound = self._bound(self.interactive_clients)
        b = self.bars
        ok = (b["group"] == 1) | (b["client"] <= bound)
        order = np.lexsort((b["seq"], b["group"], b["row"], b["start"]))
        order = order[ok[order]][: self.interactive_bars]
        self.bars = {k: v[order] for k, v in b.items()}
        self._pruned_bounds.add(bound)

    def _maybe_merge(self) -> None:
        """Merge the timeline's bars as they come once there are more than it draws unmerged, with a gap
        no larger than the final one (a pixel of the window so far)."""
        if not self.merge:
            return
        rows = [*self.phase_rows.values(), self.server_row, *self.wait_rows.values()]
        if sum(r.held() for r in rows) < _COMPRESS_AT:
            return
        if sum(r.count for r in self.phase_rows.values()) <= self.timeline_bars:
            return  # (the figure merges only past this many phase bars)
        end = self.until if self.until is not None else self.t_end_timeline
        gap = max((end - self.since) / 900.0, 0.0)
        for r in rows:
            r.merge(gap)
        self.merged_while_reading = True
        self._pruned_bounds.add(self._bound(self.timeline_clients))

    # ------------------------------------------------------------------ results

    def shown(self, k: int) -> list[int]:
        return sorted(self.clients)[:k]

    def timeline_rows(self) -> dict[tuple[str, int], _Rows]:
        """The shown clients' phase rows (kind, client) of the timeline."""
        shown = set(self.shown(self.timeline_clients))
        return {k: r for k, r in self.phase_rows.items() if k[1] in shown}

    def timeline_merged(self) -> bool:
        """Whether the timeline merges nearby bars: more phase bars in the window than it draws."""
        return sum(r.count for r in self.timeline_rows().values()) > self.timeline_bars

    def timeline_end(self) -> float:
        return float(self.t_end_timeline) if self.until is None else float(self.until)

    def link_rates(self) -> dict[str, np.ndarray]:
        """Achieved rate (bit/s) of every upload and download that records one."""
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in self.rates.items()}

    def server_frame(self) -> pd.DataFrame:
        """start and wait of every server request (what the queue length is computed from)."""
        if not self.server_start:
            return pd.DataFrame({"start": [], "wait": []})
        return pd.DataFrame({"start": np.concatenate(self.server_start), "wait": np.concatenate(self.server_wait)},
                            copy=False)

    def staleness_of(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per client: times of its applied updates and their staleness, in file order."""
        if not self.applies:
            return {}
        c = np.concatenate([a[0] for a in self.applies])
        t = np.concatenate([a[1] for a in self.applies])
        st = np.concatenate([a[2] for a in self.applies])
        return {int(k): (t[c == k], st[c == k]) for k in np.unique(c).tolist()}

    def interactive_table(self) -> tuple[pd.DataFrame, int]:
        """The first ``interactive_bars`` bars in time of the shown clients and the server, and how many
        there are in all."""
        shown = self.shown(self.interactive_clients)
        total = self.server_count + sum(self.bar_counts.get(c, 0) for c in shown)
        if self.bars is None:
            return pd.DataFrame(columns=list(self._KEYS)), total
        b = self.bars
        ok = (b["group"] == 1) | np.isin(b["client"], shown)
        order = np.lexsort((b["seq"], b["group"], b["row"], b["start"]))
        order = order[ok[order]][: self.interactive_bars]
        table = pd.DataFrame({k: v[order] for k, v in b.items()})
        row = {c: i + 1 for i, c in enumerate(shown)}
        table["row"] = [0 if g == 1 else row[int(c)] for g, c in zip(table["group"], table["client"])]
        return table, total

    def submodel_table(self) -> pd.DataFrame:
        """Per client and block: the mean kept fraction over the client's dispatches (a whole-model
        dispatch counts 1 for every block); empty when no dispatch carried a sub-model."""
        n_blocks = max((len(v[1]) for v in self.submodel.values()), default=0)
        if not n_blocks:
            return pd.DataFrame()
        rows = {}
        for c, (whole, sums, counts) in sorted(self.submodel.items()):
            sums = sums + [0.0] * (n_blocks - len(sums))
            counts = counts + [0] * (n_blocks - len(counts))
            rows[c] = [(s + whole) / (k + whole) if k + whole else np.nan for s, k in zip(sums, counts)]
        out = pd.DataFrame.from_dict(rows, orient="index", columns=[f"block {b}" for b in range(n_blocks)])
        out.index.name = "client"
        return out


def frame_blocks(trace: pd.DataFrame) -> Iterator[Block]:
    """A trace DataFrame (``load_trace``'s, or one built by hand) as blocks, one per kind."""
    if not len(trace) or "kind" not in trace:
        return
    kinds = trace["kind"].astype(str).to_numpy()
    names = [c for c in trace.columns if c not in ("t", "kind")]
    for kind in pd.unique(kinds):
        idx = np.flatnonzero(kinds == kind)
        part = trace.iloc[idx]
        cols = {c: pd.to_numeric(part[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
                for c in ["t", *names] if c != "submodel"}
        rows = part.to_dict("records") if "submodel" in part else [{}] * len(part)
        yield Block(str(kind), names, idx, rows=rows, cols=cols)


def release_freed_memory() -> None:
    """Hand freed heap memory back to the system (glibc's ``malloc_trim``; a no-op elsewhere).  Reading a
    trace frees a block's temporaries before the next is read; without this, glibc keeps those pages and
    a long trace's reading adds their sum to the process's peak instead of one block's worth."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def digest_blocks(blocks: Iterable[Block], **params: Any) -> TraceDigest:
    """Fold blocks into a new :class:`TraceDigest` (freed memory handed back every few blocks)."""
    d = TraceDigest(**params)
    for i, b in enumerate(blocks):
        d.add(b)
        if i % 16 == 15:
            release_freed_memory()
    return d


def digest_trace(source: str | Path | pd.DataFrame, **params: Any) -> TraceDigest:
    """The digest of a trace file (or run directory) or of a trace DataFrame, in one pass (two when the
    clients' order forced it, see the module docstring)."""
    def blocks() -> Iterable[Block]:
        if isinstance(source, pd.DataFrame):
            return frame_blocks(source)
        return iter_blocks(source, kinds=DIGEST_KINDS, fields=DIGEST_FIELDS)

    d = digest_blocks(blocks(), **params)
    early = d.merged_while_reading and not d.timeline_merged()
    if d.unstable or early:
        d = digest_blocks(blocks(), **{**params, "known_clients": sorted(d.clients), "merge": not early})
    return d


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
