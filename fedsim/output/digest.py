"""What a run's figures and report.html draw, gathered in one streamed pass over its trace.

A trace of millions of events is never held in memory: :func:`digest_trace` reads it a block at a time
(:func:`fedsim.sim.trace.iter_blocks`) and keeps only what the outputs draw:

* the timeline's coverage: for each shown client and phase (and the server), the time the phase covers
  in each of :data:`COVER_BINS` equal bins of the window (:class:`CoverGrid`; the bins widen by doubling
  while the run grows past them), from which both timelines draw, per pixel column, the phase that
  fills most of a client's row and the server's busy share;
* the achieved link rates (one float per transfer) and the server's request times (start, wait);
* the interactive timeline's exact bars: the run is cut into :data:`EXACT_TILES` time tiles, and a tile
  keeps every bar that starts in it or none, the densest tiles dropped first, so the bars kept are spread
  over the whole run and the page knows where they are complete; with the updates' staleness of the
  shown clients;
* the sub-model heat map's per-client sums.

The clients shown are the lowest ids of those with a download, compute, upload or offline record; a
trace whose ids come in such an order that a kept set had to change after it was pruned is read a
second time with the final set known, so every output is exactly what the whole trace in memory gave.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from fedsim.sim.trace import BLOCK_LINES, Block, iter_blocks, trace_path

PHASES = ("download", "compute", "upload", "offline")
#: Kinds drawn as bars in report.html, in the order of their codes in the page's data.
INTERACTIVE_KINDS = ("download", "compute", "upload", "offline", "server", "wait")
#: What the coverage grids hold of a transfer that carries split learning's payload (its ``what``), apart
#: from a model's upload or download, so both timelines colour it the same at every zoom.
PAYLOADS = ("activations", "gradients")
DIGEST_KINDS = (*PHASES, "server", "apply", "dispatch")
DIGEST_FIELDS = ("client", "start", "end", "wait", "rate_bps", "bytes", "staleness", "submodel", "what", "version")
#: The ``what`` of a download that names neither its payload nor a model version: split learning's gradients
#: in a run whose uploads carry activations, else a model (:meth:`TraceDigest.what_names`).
UNVERSIONED = "\0unversioned"
#: Bins of a coverage grid: the whole-run timeline of a 30 s run is resolved to about 4-7 ms (the PNG's
#: pixel columns and report.html's finest aggregated level are sums of them).
COVER_BINS = 8192
#: Time tiles of report.html's exact bars (a tile keeps all the bars that start in it, or none).
EXACT_TILES = 256
#: Interactive candidates held beyond the page's cap before the densest tiles are dropped.
_PRUNE_SLACK = 1024
#: Lines of a JSON-lines trace parsed at a time: each becomes a dict of Python objects (about 1 kB), so a
#: smaller block than the compact format's keeps the reading's peak (and the heap it leaves behind) small.
JSONL_BLOCK_LINES = 4096
#: The key of the server's row in a coverage grid.
SERVER = -1


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


#: Rows a coverage grid reserves at most when it is made (:class:`CoverGrid`'s ``rows``).
GRID_ROOM_MAX = 2048

#: Rows folded at a time by :meth:`CoverGrid._fold`.
FOLD_ROWS = 32


class CoverGrid:
    """How much of each bin of time each row's phases cover: ``bins`` equal bins from ``origin``.

    A row is a key ``(kind, client)`` (client :data:`SERVER` for the server's row).  With a fixed ``end``
    the bins split ``[origin, end]``; without one, they start narrow and double in width (neighbouring
    bins summed) whenever an interval ends past the last, so a run of any length fills between half and
    all of them, in bounded memory.  An interval adds its overlap with each bin exactly: a bin it only
    partly covers gets that part, and the bins it covers whole are counted in a difference array
    (folded in when read), so adding n intervals costs O(n) whatever their lengths."""

    def __init__(self, origin: float = 0.0, end: float | None = None, bins: int = COVER_BINS,
                 rows: int = 64) -> None:
        self.origin, self.end, self.bins = float(origin), end, int(bins)
        self.width: float | None = (end - origin) / bins if end is not None and end > origin else None
        self.slots: dict[tuple[str, int], int] = {}
        self.free: list[int] = []
        # room for ``rows`` rows (more when needed): zeroed memory the system maps only once a row is written,
        # so the room costs nothing until used, and growing within it copies nothing
        self._h_room = np.zeros((max(int(rows), 1), self.bins))
        self._d_room = np.zeros((max(int(rows), 1), self.bins + 1), dtype=np.int32)
        self.h = self._h_room[:0]  # partly covered time per bin (the rows in use: a view of the room)
        self.d = self._d_room[:0]  # whole-bin counts, as differences
        self.unfolded = False  # whether ``d`` holds counts not yet folded into ``h`` (no scan of ``d`` to know)
        self.on_coarsen: list[Any] = []  # callbacks f(factor) when the bins widen

    # ------------------------------------------------------------------ reading
    def fit(self, hi: float) -> None:
        """Widen the bins (by powers of two) until ``hi`` lies before the last bin's end."""
        if self.end is not None or not np.isfinite(hi):
            return
        if self.width is None:
            span = max(hi - self.origin, 1e-9)
            self.width = float(2.0 ** np.ceil(np.log2(span / self.bins)))
        f = 1
        while self.origin + self.width * f * self.bins <= hi:
            f *= 2
        if f > 1:
            self._coarsen(f)

    def _coarsen(self, f: int) -> None:
        self._fold()
        n = len(self.h)
        keep = max(self.bins // f, 1)
        if f == 2 and self.bins % 2 == 0:  # (the usual doubling) each pair added: numpy's sum of two, faster
            summed = self.h[:, 0::2] + self.h[:, 1::2]
        else:
            summed = self.h.reshape(n, keep, min(f, self.bins)).sum(axis=2)
        room = np.zeros(self._h_room.shape)  # a fresh room: the emptied half of each row is never touched
        room[:n, :keep] = summed
        self._h_room, self.h = room, room[:n]
        assert self.width is not None
        self.width *= f
        for fn in self.on_coarsen:
            fn(f)

    def _fold(self) -> None:
        """Fold the whole-bin counts into ``h``, a few rows at a time (a whole-grid cumsum would hold two
        temporaries the size of the grid: about 65 MB for 500 rows of 8192 bins)."""
        if self.unfolded:
            assert self.width is not None
            for i in range(0, len(self.d), FOLD_ROWS):
                rows = self.d[i:i + FOLD_ROWS, :-1]
                if rows.any():
                    self.h[i:i + FOLD_ROWS] += np.cumsum(rows, axis=1) * self.width
                    self.d[i:i + FOLD_ROWS] = 0  # (a row's counts sum to 0: none is left in its last column)
            self.unfolded = False

    def _reserve(self, new: int) -> None:
        """Rows for ``new`` more keys, grown at once as :meth:`_slot` would grow them one by one (by a
        quarter, at least 32 rows)."""
        need = len(self.slots) + max(new - len(self.free), 0)
        size = len(self.h)
        while size < need:
            size += max(size // 4, 32)
        self._grow(size)

    def _grow(self, size: int) -> None:
        """``size`` rows in use: a longer view of the room, or (past it) a room twice as large, the rows copied."""
        if size <= len(self.h):
            return
        if size > len(self._h_room):
            room = max(size, 2 * len(self._h_room))
            h, d = np.zeros((room, self.bins)), np.zeros((room, self.bins + 1), dtype=np.int32)
            h[:len(self.h)], d[:len(self.d)] = self.h, self.d
            self._h_room, self._d_room = h, d
        self.h, self.d = self._h_room[:size], self._d_room[:size]

    def _slot(self, key: tuple[str, int]) -> int:
        slot = self.slots.get(key)
        if slot is None:
            if self.free:
                slot = self.free.pop()
            else:
                slot = len(self.slots)
                if slot >= len(self.h):  # grow by a quarter (at least 32 rows)
                    self._grow(len(self.h) + max(len(self.h) // 4, 32))
            self.slots[key] = slot
        return slot

    def add(self, kind: str, clients: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
        """Add intervals ``[s, e]`` of phase ``kind`` to the rows of their ``clients``."""
        ok = ~(np.isnan(s) | np.isnan(e) | np.isnan(clients))
        lo = self.origin
        hi = self.end if self.end is not None else np.inf
        s, e, clients = np.maximum(s[ok], lo), np.minimum(e[ok], hi), clients[ok]
        m = e > s
        if not m.any():
            return
        s, e, clients = s[m], e[m], clients[m].astype(np.int64)
        self.fit(float(e.max()))
        w = self.width
        assert w is not None
        u0 = (s - lo) / w
        u1 = np.minimum((e - lo) / w, self.bins)
        i0 = np.minimum(np.floor(u0).astype(np.int64), self.bins - 1)
        i1 = np.floor(u1).astype(np.int64)
        uniq, inv = np.unique(clients, return_inverse=True)
        self._reserve(sum((kind, c) not in self.slots for c in uniq.tolist()))
        slots = np.array([self._slot((kind, int(c))) for c in uniq.tolist()], dtype=np.int64)[inv]
        h, d, nb = self.h.reshape(-1), self.d.reshape(-1), self.bins
        same = i1 <= i0
        np.add.at(h, slots[same] * nb + i0[same], (u1 - u0)[same] * w)
        x = ~same
        np.add.at(h, slots[x] * nb + i0[x], (i0[x] + 1 - u0[x]) * w)
        tail = x & (i1 < nb)
        np.add.at(h, slots[tail] * nb + i1[tail], (u1[tail] - i1[tail]) * w)
        np.add.at(d, slots[x] * (nb + 1) + i0[x] + 1, 1)
        np.add.at(d, slots[x] * (nb + 1) + i1[x], -1)
        self.unfolded = self.unfolded or bool(x.any())

    def drop(self, keep: Any) -> None:
        """Forget the rows whose client fails ``keep(client)`` (the server's row is always kept)."""
        for key in [k for k in self.slots if k[1] != SERVER and not keep(k[1])]:
            slot = self.slots.pop(key)
            self.h[slot] = 0.0
            self.d[slot] = 0
            self.free.append(slot)

    # ------------------------------------------------------------------ results
    def rows(self) -> dict[tuple[str, int], np.ndarray]:
        """Covered time per bin of every row."""
        self._fold()
        return {k: self.h[slot] for k, slot in self.slots.items()}

    def columns(self, key: tuple[str, int], t0: float, t1: float, n: int) -> np.ndarray:
        """Covered time of row ``key`` in ``n`` equal columns of ``[t0, t1]`` (a bin's time taken as spread
        evenly over it where a column boundary cuts it)."""
        self._fold()
        slot = self.slots.get(key)
        if slot is None or self.width is None:
            return np.zeros(n)
        cum = np.concatenate([[0.0], np.cumsum(self.h[slot])])
        edges = (np.linspace(t0, t1, n + 1) - self.origin) / self.width
        return np.diff(np.interp(edges, np.arange(self.bins + 1), cum))


def dominant(cover: Mapping[Any, np.ndarray], span: float | np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Per column, the index (into the returned keys) of the phase that fills most of it, or -1 where idle
    time (the column's ``span`` less its covered time) is the largest share: the one rule both timelines
    draw by, so a 7 µs compute never paints over a 29 ms upload and an idle column stays empty.  Ties go to
    the earlier key.  One row of :func:`dominant_rows`, which holds the rule."""
    keys = list(cover)
    if not keys:
        return keys, np.full(0, -1)
    return keys, dominant_rows(np.stack([cover[k] for k in keys])[:, None, :], span)[0]


def dominant_rows(cover: np.ndarray, span: float | np.ndarray) -> np.ndarray:
    """:func:`dominant` of many rows at once: ``cover`` is ``(keys, rows, columns)``, each row's keys in the
    order :func:`dominant` would take them, a row with fewer keys padded with zeros after its own (a zero
    key never wins: a column whose largest cover is 0 is idle).  Per row and column, the index of the
    winning key, or -1 where idle.  The same sums in the same order as one :func:`dominant` call per row
    (report.html's aggregated levels draw 200 clients at six zoom levels), without a Python step per row."""
    keys, rows, n = cover.shape
    if keys == 0:
        return np.full((rows, n), -1)
    # one key at a time (a handful): the sum in key order, the first largest key on a tie, as argmax
    total = cover[0].copy()
    top = cover[0].copy()
    best = np.zeros((rows, n), dtype=np.int64)
    for j in range(1, keys):
        x = cover[j]
        total += x
        best = np.where(x > top, j, best)
        np.maximum(top, x, out=top)
    idle = np.asarray(span, dtype=float) - total
    out = np.where(top >= np.maximum(idle, 0.0) * (1 + 1e-9), best, -1)
    out[top <= 0] = -1
    return out


@dataclass
class TraceDigest:
    """The aggregates of one trace that the run's outputs draw (see the module docstring).

    ``since``/``until`` is the timeline's window and ``timeline_clients`` its client rows;
    ``interactive_clients``/``interactive_bars`` are report.html's client rows and the exact bars it holds
    at most.  ``known_clients``: the clients with phase records, when already known (the second pass)."""

    since: float = 0.0
    until: float | None = None
    timeline_clients: int = 30
    interactive_clients: int = 40
    interactive_bars: int = 20000
    known_clients: Sequence[int] | None = None

    records: int = 0
    t_end_timeline: float = float("-inf")  # last time of a phase or server record
    t_end: float = float("-inf")  # and of an apply record
    clients: set[int] = field(default_factory=set)
    png: CoverGrid = field(init=False)  # the timeline's window, its clients and the server
    web: CoverGrid = field(init=False)  # the whole run, report.html's clients and the server (may be png)
    stats: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # row -> [count, total] in the window
    rates: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"upload": [], "download": []})
    server_start: list[np.ndarray] = field(default_factory=list)
    server_wait: list[np.ndarray] = field(default_factory=list)
    server_end_max: float = float("nan")
    has_server: bool = False
    has_rates: bool = False
    bars: dict[str, np.ndarray] | None = None  # interactive candidates (the bars of the tiles kept)
    tile_dropped: np.ndarray = field(default_factory=lambda: np.zeros(EXACT_TILES, dtype=bool))
    tile_reach: np.ndarray = field(default_factory=lambda: np.full(EXACT_TILES, -np.inf))  # latest end per tile
    bar_counts: dict[int, int] = field(default_factory=dict)  # per client: phase bars and queue waits
    server_count: int = 0
    applies: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    submodel: dict[int, list[Any]] = field(default_factory=dict)  # client -> [whole-model count, sums, counts]
    what_index: dict[str, int] = field(default_factory=dict)  # the bars' ``what`` names -> their codes
    split: bool = False  # an upload carried activations (split learning)
    unstable: bool = False  # a kept client set changed after pruning: read again with the clients known
    _queue: pd.DataFrame | None = None
    _pruned_bounds: set[float] = field(default_factory=set)
    _pending: list[dict[str, np.ndarray]] = field(default_factory=list)  # candidates not yet joined to bars
    _held: int = 0  # candidates in bars and pending

    def __post_init__(self) -> None:
        # room for a row per kind (phases, server, queue wait, payloads) of every client shown: reserved, not
        # touched, so the grid never copies itself while it grows (capped: past it, it grows by doubling)
        kinds = len(INTERACTIVE_KINDS) + len(PAYLOADS)
        same = self.since <= 0.0 and self.until is None
        png = self.timeline_clients if not same else max(self.timeline_clients, self.interactive_clients)
        self.png = CoverGrid(self.since, self.until, rows=min(kinds * (png + 1), GRID_ROOM_MAX))
        web = min(kinds * (self.interactive_clients + 1), GRID_ROOM_MAX)
        self.web = self.png if same else CoverGrid(0.0, rows=web)
        self.web.on_coarsen.append(self._coarsen_tiles)

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
        after = self._bound(self.timeline_clients), self._bound(self.interactive_clients)
        if after != before:  # rows of clients no longer shown are forgotten
            tb, ib = after
            if self.web is self.png:
                self.png.drop(lambda x: x <= max(tb, ib))
            else:
                self.png.drop(lambda x: x <= tb)
                self.web.drop(lambda x: x <= ib)
            self.stats = {k: v for k, v in self.stats.items() if k[1] == SERVER or k[1] <= tb}
            if self.known_clients is None and self._pruned_bounds:
                self.unstable = True  # a pruned set no longer is the set kept

    def _window(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        ok = e >= self.since
        return ok & (s <= self.until) if self.until is not None else ok & ~np.isnan(s)

    def _cover(self, kind: str, c: np.ndarray, s: np.ndarray, e: np.ndarray, *, all_clients: bool = False) -> None:
        """Add intervals to the coverage grids (and the legend's counts) of the clients each one shows."""
        tb, ib = self._bound(self.timeline_clients), self._bound(self.interactive_clients)
        win = self._window(s, e) & ((c <= tb) | all_clients)
        if win.any():
            key_c = c[win] if not all_clients else np.full(int(win.sum()), SERVER, dtype=float)
            d = np.nan_to_num(e[win] - s[win])
            uniq, inv = np.unique(key_c, return_inverse=True)
            counts, totals = np.bincount(inv), np.bincount(inv, weights=d)
            for client, n, total in zip(uniq.astype(np.int64).tolist(), counts.tolist(), totals.tolist()):
                st = self.stats.setdefault((kind, client), [0, 0.0])
                st[0] += n
                st[1] += total
        for_web = (c <= ib) | all_clients
        cc = c if not all_clients else np.full(len(c), float(SERVER))
        if self.web is self.png:
            m = win | for_web
            self.png.add(kind, cc[m], s[m], e[m])
        else:
            self.png.add(kind, cc[win], s[win], e[win])
            self.web.add(kind, cc[for_web], s[for_web], e[for_web])

    def _phase(self, b: Block) -> None:
        c, s, e = b.num("client"), b.num("start"), b.num("end")
        self._new_clients(c)
        if b.kind == "upload" and b.has("what") and not self.split:
            self.split = any(isinstance(w, str) and "activ" in w.lower() for w in set(b.values("what")))
        if np.isfinite(e).any():
            self.web.fit(float(np.nanmax(e)))
        payload = self._payload(b)
        if payload is None:
            self._cover(b.kind, c, s, e)
        else:  # split learning's activations and gradients are covered apart from models: their own colour
            for kind, m in ((b.kind, payload == ""), ("activations", payload == "activations"),
                            ("gradients", payload == "gradients")):
                if m.any():
                    self._cover(kind, c[m], s[m], e[m])
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
                             b.num("bytes")[keep], b.num("rate_bps")[keep], b.num("wait")[keep],
                             self._what_codes(b, keep))

    def _server(self, b: Block) -> None:
        self.has_server = True
        c, s, e, w = b.num("client"), b.num("start"), b.num("end"), b.num("wait")
        self.server_start.append(s)
        self.server_wait.append(w)
        if np.isfinite(e).any():
            top = float(np.nanmax(e))
            self.server_end_max = top if np.isnan(self.server_end_max) else max(self.server_end_max, top)
            self.web.fit(top)
        self._cover("server", c, s, e, all_clients=True)
        queued = w > 0
        if queued.any():  # a request's queueing is drawn on the row of the client whose update waits
            self._cover("wait", c[queued], s[queued] - w[queued], s[queued])
        self.server_count += len(b)
        nan = np.full(len(b), np.nan)
        self._candidates(s, np.zeros(len(b)), 1, b.seq, np.full(len(b), 4.0), e, c, nan, nan, w,
                         self._what_codes(b, np.ones(len(b), dtype=bool)))
        waits = queued & (c <= self._bound(self.interactive_clients))
        if waits.any():
            for client, k in zip(*np.unique(c[waits], return_counts=True)):
                self.bar_counts[int(client)] = self.bar_counts.get(int(client), 0) + int(k)
            m = waits
            nan = np.full(int(m.sum()), np.nan)
            self._candidates(s[m] - w[m], 1.0 + c[m], 2, b.seq[m], np.full(int(m.sum()), 5.0), s[m], c[m], nan, nan,
                             w[m], self._what_codes(b, m))

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

    _KEYS = ("start", "row", "group", "seq", "kind", "end", "client", "bytes", "rate", "wait", "what")

    def _payload(self, b: Block) -> np.ndarray | None:
        """Per transfer of block ``b``: ``activations`` or ``gradients`` when it carries split learning's
        payload (its ``what`` names it: the rule of report.html's bar colours), else ``""``; None when
        none does (the common case: no per-record work)."""
        if b.kind not in ("upload", "download") or not b.has("what"):
            return None
        out = []
        for w in b.values("what"):
            low = w.lower() if isinstance(w, str) else ""
            out.append("activations" if ("activ" in low or "smash" in low or "feature" in low)
                       else "gradients" if "grad" in low else "")
        arr = np.array(out, dtype=object)
        return arr if (arr != "").any() else None

    def _what_codes(self, b: Block, m: np.ndarray) -> np.ndarray:
        """The trace's ``what`` of the records ``m`` of block ``b``, as codes into :attr:`whats` (interned:
        a bar carries a small number, the page the names once); -1 where a record has none."""
        if not m.any():
            return np.empty(0)
        whats = [w if isinstance(w, str) else None for w in b.values("what")] if b.has("what") else [None] * len(b)
        if b.kind == "download":  # a model download names its version; a gradient's of an older trace nothing
            v = b.num("version")
            whats = [UNVERSIONED if w is None and not np.isfinite(x) else w for w, x in zip(whats, v.tolist())]
        picked = [w for w, k in zip(whats, m.tolist()) if k]
        codes, names = pd.factorize(pd.Series(picked, dtype=object), use_na_sentinel=True)
        table = np.array([self._intern(str(n)) for n in names] + [-1], dtype=np.float64)
        return table[codes]  # (the sentinel -1 picks the last entry, -1)

    def _intern(self, name: str) -> int:
        code = self.what_index.get(name)
        if code is None:
            code = self.what_index[name] = len(self.what_index)
        return code

    def what_names(self) -> list[str]:
        """The names of the ``what`` codes, in code order; an unversioned download is named by the run: split
        learning's "gradients" where uploads carried activations, else "model"."""
        names = list(self.what_index)
        return [("gradients" if self.split else "model") if n == UNVERSIONED else n for n in names]

    def tile_width(self) -> float:
        """Seconds of virtual time per exact-bar tile (the tiles start at 0)."""
        return (self.web.width or 0.0) * self.web.bins / EXACT_TILES

    def _tile(self, start: np.ndarray) -> np.ndarray:
        tw = self.tile_width()
        if tw <= 0:
            return np.zeros(len(start), dtype=np.int64)
        t = np.floor(np.nan_to_num(start, nan=0.0) / tw)
        return np.clip(t, 0, EXACT_TILES - 1).astype(np.int64)

    def _candidates(self, *cols: Any) -> None:
        """Add interactive bars (the page's order: bars, then server requests, then queue waits): those
        starting in a dropped tile are not kept; past the cap, the densest tiles are dropped."""
        n = len(cols[0])
        new = {k: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for k, v in zip(self._KEYS, cols)}
        tile = self._tile(new["start"])
        ends = new["end"]
        fin = np.isfinite(ends)
        np.maximum.at(self.tile_reach, tile[fin], ends[fin])
        keep = ~self.tile_dropped[tile]
        self._pending.append({k: v[keep] for k, v in new.items()})
        self._held += int(keep.sum())
        if self._held > 2 * self.interactive_bars + _PRUNE_SLACK:
            self._prune(self._bound(self.interactive_clients))

    def _gather(self) -> None:
        """The pending candidates joined to :attr:`bars` (one concatenation per prune, not per block)."""
        if self._pending:
            parts = ([self.bars] if self.bars is not None else []) + self._pending
            self.bars = {k: np.concatenate([p[k] for p in parts]) for k in self._KEYS}
            self._pending = []

    def _prune(self, bound: float | Sequence[int]) -> None:
        """Keep the bars of the shown clients (ids up to ``bound``, or in it) and the server's; drop the
        tiles with the most bars until at most ``interactive_bars`` remain."""
        self._gather()
        assert self.bars is not None
        b = self.bars
        b = {k: v[~self.tile_dropped[self._tile(b["start"])]] for k, v in b.items()}
        shown = np.isin(b["client"], bound) if not np.isscalar(bound) else b["client"] <= bound  # type: ignore
        ok = (b["group"] == 1) | shown
        b = {k: v[ok] for k, v in b.items()}
        counts = np.bincount(self._tile(b["start"]), minlength=EXACT_TILES)
        total = int(counts.sum())
        if total > self.interactive_bars:
            for t in np.argsort(-counts, kind="stable"):
                if total <= self.interactive_bars:
                    break
                self.tile_dropped[t] = True
                total -= int(counts[t])
            keep = ~self.tile_dropped[self._tile(b["start"])]
            b = {k: v[keep] for k, v in b.items()}
            if np.isscalar(bound):
                self._pruned_bounds.add(float(bound))  # type: ignore[arg-type]
        self.bars = b
        self._held = len(b["start"])

    def _coarsen_tiles(self, f: int) -> None:
        """The bins doubled: neighbouring tiles become one, dropped if either was."""
        T = EXACT_TILES
        keep = max(T // f, 1)
        dropped = self.tile_dropped.reshape(keep, min(f, T)).any(axis=1)
        reach = self.tile_reach.reshape(keep, min(f, T)).max(axis=1)
        self.tile_dropped = np.zeros(T, dtype=bool)
        self.tile_dropped[:keep] = dropped
        self.tile_reach = np.full(T, -np.inf)
        self.tile_reach[:keep] = reach  # (bars of a tile dropped here leave at the next prune)

    # ------------------------------------------------------------------ results

    def shown(self, k: int) -> list[int]:
        return sorted(self.clients)[:k]

    def timeline_cover(self) -> dict[tuple[str, int], np.ndarray]:
        """Covered time per bin of the timeline's rows: the shown clients' phases and queue waits, and
        the server (client :data:`SERVER`)."""
        shown = set(self.shown(self.timeline_clients)) | {SERVER}
        return {k: r for k, r in self.png.rows().items() if k[1] in shown and r.any()}

    def timeline_means(self) -> dict[str, float]:
        """Mean duration of each phase over the timeline's rows in its window (the legend's)."""
        shown = set(self.shown(self.timeline_clients)) | {SERVER}
        out: dict[str, list[float]] = {}
        for (kind, c), (n, total) in self.stats.items():
            if c in shown and n:
                acc = out.setdefault(kind, [0, 0.0])
                acc[0] += n
                acc[1] += total
        return {k: t / n for k, (n, t) in out.items()}

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

    def queue(self) -> pd.DataFrame:
        """:func:`queue_length` of the server's requests, computed once (the queue figure and report.html's
        timeline draw the same steps)."""
        if self._queue is None:
            self._queue = queue_length(self.server_frame())
        return self._queue

    def staleness_of(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per client: times of its applied updates and their staleness, in file order."""
        if not self.applies:
            return {}
        c = np.concatenate([a[0] for a in self.applies])
        t = np.concatenate([a[1] for a in self.applies])
        st = np.concatenate([a[2] for a in self.applies])
        return {int(k): (t[c == k], st[c == k]) for k in np.unique(c).tolist()}

    def interactive_table(self) -> tuple[pd.DataFrame, int]:
        """The exact bars report.html holds (every bar of the shown clients and the server that starts in
        a tile kept, at most ``interactive_bars``), in the page's order, and how many there are in all."""
        shown = self.shown(self.interactive_clients)
        total = self.server_count + sum(self.bar_counts.get(c, 0) for c in shown)
        self._gather()
        if self.bars is None:
            return pd.DataFrame(columns=list(self._KEYS)), total
        self._prune(shown)
        b = self.bars
        assert b is not None
        order = np.lexsort((b["seq"], b["group"], b["row"], b["start"]))
        table = pd.DataFrame({k: v[order] for k, v in b.items()})
        row = {c: i + 1 for i, c in enumerate(shown)}
        table["row"] = [0 if g == 1 else row[int(c)] for g, c in zip(table["group"], table["client"])]
        return table, total

    def exact_tiles(self) -> np.ndarray:
        """Per tile, whether report.html holds every bar that overlaps it: the tile was kept, and no bar
        of a dropped tile reaches into it."""
        reach = np.where(self.tile_dropped, self.tile_reach, -np.inf)
        before = np.concatenate([[-np.inf], np.maximum.accumulate(reach)[:-1]])
        starts = np.arange(EXACT_TILES) * self.tile_width()
        return ~self.tile_dropped & (before <= starts)

    def web_cover(self) -> dict[tuple[str, int], np.ndarray]:
        """Covered time per bin (of :attr:`web`) of report.html's rows."""
        shown = set(self.shown(self.interactive_clients)) | {SERVER}
        return {k: r for k, r in self.web.rows().items() if k[1] in shown}

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
    unique = pd.unique(kinds)
    for i, kind in enumerate(unique):
        idx = np.flatnonzero(kinds == kind)
        part = trace.iloc[idx]
        cols = {c: pd.to_numeric(part[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
                for c in ["t", *names] if c != "submodel"}
        rows = part.to_dict("records") if "submodel" in part or "what" in part else [{}] * len(part)
        block = Block(str(kind), names, idx, rows=rows, cols=cols)
        block.closes = i == len(unique) - 1  # (one piece: the whole frame)
        yield block


def release_freed_memory() -> None:
    """Hand freed heap memory back to the system (glibc's ``malloc_trim``; a no-op elsewhere).  Reading a
    trace frees a block's temporaries before the next is read; without this, glibc keeps those pages and
    a long trace's reading adds their sum to the process's peak instead of one block's worth."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class BlockReader(Protocol):
    """Another reader fed the same streamed pass (the report's panels, :mod:`fedsim.output.panels`): the
    kinds and fields it needs, ``add`` for each block of those kinds and ``piece_read`` after each block
    that closes a piece of the file (:attr:`fedsim.sim.trace.Block.closes`), whatever its kind."""

    KINDS: tuple[str, ...]
    FIELDS: tuple[str, ...]

    def add(self, b: Block) -> None: ...

    def piece_read(self) -> None: ...


def digest_blocks(blocks: Iterable[Block], also: Sequence[BlockReader] = (), **params: Any) -> TraceDigest:
    """Fold blocks into a new :class:`TraceDigest` (freed memory handed back every few blocks); each block
    also goes to the readers ``also`` whose kinds it is."""
    d = TraceDigest(**params)
    for i, b in enumerate(blocks):
        if b.kind in DIGEST_KINDS:
            d.add(b)
        for r in also:
            if b.kind in r.KINDS:
                r.add(b)
            if b.closes:
                r.piece_read()
        if i % 16 == 15:
            release_freed_memory()
    return d


def digest_trace(source: str | Path | pd.DataFrame, also: Sequence[BlockReader] = (), **params: Any) -> TraceDigest:
    """The digest of a trace file (or run directory) or of a trace DataFrame, in one pass (two when the
    clients' order forced it, see the module docstring).  The readers ``also`` are fed the first pass (one
    pass over the whole trace is all they need) and only the kinds and fields they ask for."""
    kinds = tuple(dict.fromkeys([*DIGEST_KINDS, *(k for r in also for k in r.KINDS)]))
    fields = tuple(dict.fromkeys([*DIGEST_FIELDS, *(f for r in also for f in r.FIELDS)]))

    def blocks(first: bool) -> Iterable[Block]:
        if isinstance(source, pd.DataFrame):
            return frame_blocks(source)
        path = trace_path(source) if Path(source).is_dir() else Path(source)
        lines = BLOCK_LINES if path.name.endswith(".gz") else JSONL_BLOCK_LINES
        return iter_blocks(path, kinds=kinds if first else DIGEST_KINDS, fields=fields if first else DIGEST_FIELDS,
                           block_lines=lines)

    d = digest_blocks(blocks(True), also, **params)
    if d.unstable:
        d = digest_blocks(blocks(False), **{**params, "known_clients": sorted(d.clients)})
    return d


def queue_length(server: pd.DataFrame) -> pd.DataFrame:
    """Server queue length (requests waiting, not in service) as a step function of time: one row per
    instant at which it changes, the length after every arrival and start of service at that instant."""
    start = server["start"].to_numpy(dtype=float, na_value=np.nan)
    t = np.concatenate([start - server["wait"].to_numpy(dtype=float, na_value=np.nan), start])
    d = np.repeat(np.array([1, -1], dtype=np.int8), len(start))
    del start
    keep = ~np.isnan(t)  # a request without times adds nothing
    if not keep.all():
        t, d = t[keep], d[keep]
    del keep
    order = np.lexsort((d, t))
    t = t[order]
    queue = np.cumsum(d[order], dtype=np.int64)
    del order, d
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


def timeline_digest(trace: str | Path | pd.DataFrame | TraceDigest, *, since: float, until: float | None,
                    max_clients: int) -> TraceDigest:
    """The digest a timeline draws from: ``trace`` itself when it is a digest read for this window and client
    count (any other reading is refused, so a figure never draws a window it was not read for), else one
    read from ``trace`` now.  The PNG and SVG timelines share it."""
    params = dict(since=since, until=until, timeline_clients=max_clients)
    if isinstance(trace, TraceDigest):
        got = dict(since=trace.since, until=trace.until, timeline_clients=trace.timeline_clients)
        if got != params:
            raise ValueError(f"the digest was read for the timeline {got}, not {params}")
        return trace
    return digest_trace(trace, **params)
