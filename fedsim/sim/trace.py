"""The event trace: typed records written incrementally as JSON lines.

One record per event, with the virtual time ``t`` first and the event ``kind`` second; the other
fields depend on the kind (see ``EVENT_FIELDS``).  Records are flushed every ``flush_every`` events and
when the run ends, so a run killed midway leaves a readable trace up to its last flush.  Floats are
written with ``repr`` precision and keys in a fixed order, so the same run gives a byte-identical file.

``round`` is the synchronous round; for asynchronous algorithms it is the aggregation (the model version
it created) that applied the update, so "participation per round" means "updates per aggregation".

Interval events (``download``, ``compute``, ``upload``, ``server``) carry ``start`` and ``end``; ``t``
equals ``end``.  Waiting is never folded into service: a ``server`` record has ``wait`` (queueing
before service began) and ``service`` separately, and transfers carry their own ``wait`` for a shared
medium.

Two formats (``output.trace_format``):

* ``jsonl`` (default): ``trace.jsonl``, one JSON object per line, as above.
* ``compact``: ``trace.compact.gz``, for runs of millions of events: gzip-compressed lines where a record is
  a JSON array of its values only, ``[schema, t, v1, v2, ...]``; a schema line
  ``{"schema": id, "kind": ..., "fields": [...]}`` precedes the first record of each (kind, field names)
  combination.  The same events and values, no keys repeated, compressed: about 15x smaller than jsonl
  and cheaper to write.  A run killed midway leaves a readable prefix (each flush ends a gzip member).

:func:`load_trace` reads either format (selected kinds and columns only) and :func:`iter_trace` streams
records one at a time, so readers need not hold a whole trace in memory.
"""
from __future__ import annotations

import gzip
import io
import itertools
import json
import math
import re
import zlib
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Literal, Mapping, Sequence

import numpy as np
import pandas as pd

#: The fields each kind of event carries besides ``t`` and ``kind`` (documentation and test contract): the
#: framework's kinds here, and an algorithm's own kinds once the module that writes them is imported (it adds them
#: with :func:`register_record_kind`, so this layer names no algorithm).  Readers never need it: a record carries
#: its own field names.  Optional fields: ``dispatch`` and ``apply`` of a sub-model task carry ``submodel``
#: (``SubModel.summary``: kept fraction of the model and per block, block states); when a round has partial
#: updates, ``apply`` carries ``coverage`` (covered fraction per tensor) and ``aggregate`` ``coverage_min`` / ``coverage_mean``
#: (N_q^i over single entries: the fewest clients that updated an entry, and clients per entry).  With
#: ``train.clip_norm`` set, ``apply`` carries ``clipped_steps``, ``steps`` and ``max_grad_norm`` (whether
#: clipping bound in that task: steps it scaled down, local steps, largest gradient norm before clipping).  A
#: split-learning download that carries gradients, not a model version, has ``what`` (``"gradients"``).  Work cut
#: before it ended (deadline, going offline, the run's end) keeps its kind and adds ``ended`` (why) and
#: ``planned_bytes`` (transfers) or ``planned_flops`` (compute); its other fields are what was actually done (the
#: world writes it).  ``task`` names one participation: the version keeper gives each ``dispatch`` the next id
#: (0, 1, 2, ... in dispatch order) and the task's ``download``, ``compute`` and ``upload`` records (the world
#: stamps them, and the ``server`` record of a request for its update; the server's own work has none) and
#: its ``apply`` or ``drop`` carry it, so a task is every record with its id, from the dispatch to the apply
#: or drop (none while it is under way, or its update waits at the server, when the run ends).
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "dispatch": ("client", "version", "round", "task"),
    "download": ("client", "start", "end", "bytes", "wait", "version", "task"),
    "compute": ("client", "start", "end", "flops", "steps", "what", "task"),
    "upload": ("client", "start", "end", "bytes", "wait", "task"),
    "server": ("client", "start", "end", "wait", "service", "what", "queue", "task"),
    "apply": ("client", "base_version", "version", "staleness", "staleness_s", "weight", "round", "task"),
    "aggregate": ("version", "round", "n_updates", "clients"),
    "round": ("round", "start", "end", "clients", "dropped"),
    "drop": ("client", "reason", "round", "task"),
    "eval": ("version", "round", "accuracy", "loss"),
    "offline": ("client", "start", "end"),
    "slots": ("busy", "limit"),
}


def register_record_kind(kind: str, fields: Sequence[str]) -> None:
    """Add an algorithm's own record kind and its fields to :data:`EVENT_FIELDS`.

    Called at import by the module that writes the records, so the schema lives beside its writer and this
    generic layer names no paper.  Registering a kind again with the same fields does nothing (a module may be
    imported twice); other fields raise ``ValueError``: two writers of one kind must agree on its schema."""
    if not isinstance(kind, str) or not kind.isidentifier():
        raise ValueError(f"a record kind is a name (letters, digits, _), got {kind!r}")
    names = tuple(fields)
    if not all(isinstance(f, str) and f.isidentifier() for f in names):
        raise ValueError(f"record kind {kind!r}: field names must be names, got {names!r}")
    if len(set(names)) != len(names) or {"t", "kind"} & set(names):
        raise ValueError(f"record kind {kind!r}: fields must be distinct and not 't' or 'kind', got {names!r}")
    known = EVENT_FIELDS.get(kind)
    if known is not None and known != names:
        raise ValueError(f"record kind {kind!r} is already registered with fields {known!r}, not {names!r}")
    EVENT_FIELDS[kind] = names


#: File name of each trace format inside a run directory.
TRACE_FILES: dict[str, str] = {"jsonl": "trace.jsonl", "compact": "trace.compact.gz"}
TraceFormat = Literal["jsonl", "compact"]
_PLAIN = (int, str, bool, type(None))


def trace_path(run_dir: str | Path) -> Path:
    """The trace file of a run directory (either format; ``trace.jsonl`` when there is none yet)."""
    run_dir = Path(run_dir)
    for name in TRACE_FILES.values():
        if (run_dir / name).exists():
            return run_dir / name
    return run_dir / TRACE_FILES["jsonl"]


#: one compact encoder (``json.dumps`` builds a new one per call when given separators)
_encode = json.JSONEncoder(separators=(",", ":")).encode
#: a string as that encoder writes it (``ensure_ascii``)
_encode_str = json.encoder.encode_basestring_ascii


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return value
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        return _clean(value.item())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    return value


def _column(value: Any, sel: np.ndarray) -> list[Any] | np.ndarray | None:
    """The selected entries of a column (an array stays an array), or None for a scalar (the same in every
    record)."""
    if isinstance(value, np.ndarray):
        return value[sel]
    if isinstance(value, (list, tuple)):
        return [value[i] for i in sel.tolist()]
    return None


def _fragment(v: Any) -> str:
    if type(v) is float:
        return float.__repr__(v) if v - v == 0.0 else _encode(str(v))
    if type(v) is int:
        return int.__repr__(v)
    return _encode(_clean(v))


def _fragments(values: list[Any] | np.ndarray) -> list[str]:
    """JSON text of each value, as the encoder writes it inside a record (non-finite floats as strings)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "f" and bool(np.isfinite(values).all()):
            return list(map(float.__repr__, values.astype(np.float64, copy=False).tolist()))
        if values.dtype.kind in "iu":
            return list(map(int.__repr__, values.tolist()))
        values = values.tolist()
    return [_fragment(v) for v in values]


#: types a record keeps as they are until it is encoded (immutable, encoded exactly as their value)
_SCALARS = frozenset((int, float, str, bool, type(None)))
_NULL = "null"


def _snapshot(value: Any) -> Any:
    """A value as a waiting record keeps it: plain values as they are, anything else (lists, arrays,
    numpy scalars) cleaned into plain values now, so that a later change by the caller does not show."""
    return value if type(value) in _SCALARS else _clean(value)


def _float_texts(cols: list[Sequence[float]]) -> list[list[str]]:
    """``float.__repr__`` of each value of columns of finite floats, each distinct value written once.

    A flush's records repeat most of their floats (an interval ends at the next one's start, ``end`` is
    ``t``, a client's rate and flops stay the same), and a float's shortest repr costs far more than
    finding its duplicates: the columns are laid end to end in numpy, ``np.unique`` numbers the distinct
    values, and only those are written.  -0.0 (equal to 0.0, but written "-0.0") is never merged."""
    total = sum(map(len, cols))
    if total < 256:  # too few for numpy to pay off
        return [list(map(float.__repr__, c)) for c in cols]
    values = np.fromiter(itertools.chain.from_iterable(cols), np.float64, total)
    if np.signbit(values[values == 0.0]).any():
        return [list(map(float.__repr__, c)) for c in cols]
    distinct, inverse = np.unique(values, return_inverse=True)
    texts = np.array(list(map(float.__repr__, distinct.tolist())), dtype=object)[inverse.reshape(-1)]
    out, start = [], 0
    for c in cols:
        out.append(texts[start:start + len(c)].tolist())
        start += len(c)
    return out


_FLOAT_ONLY = frozenset((float,))


def _value_fragments(col: Sequence[Any]) -> list[str]:
    """JSON text of one field of many records, as :func:`_fragment` writes each value; a column of one
    plain type is mapped in one go (finite floats are written by :func:`_float_texts`)."""
    types = set(map(type, col))
    if len(types) == 1:
        tp = types.pop()
        if tp is int:
            return list(map(int.__repr__, col))
        if tp is str:
            return list(map(_encode_str, col))
        if tp is type(None):
            return [_NULL] * len(col)
        if tp is list:
            return list(map(_list_fragment, col))
    elif types == _INT_OR_NONE:
        return [_NULL if v is None else int.__repr__(v) for v in col]
    return list(map(_fragment, col))


_INT_OR_NONE = {int, type(None)}
_INT_ONLY = frozenset((int,))


def _list_fragment(v: list[Any]) -> str:
    """JSON text of a list, as :func:`_fragment` writes it; a list of ints without the encoder."""
    if _INT_ONLY.issuperset(map(type, v)):
        return "[" + ",".join(map(int.__repr__, v)) + "]"
    return _fragment(v)


def _finite_floats(col: Sequence[Any]) -> bool:
    """Whether a column holds only floats (not a subclass), all finite."""
    if not _FLOAT_ONLY.issuperset(map(type, col)):
        return False
    total = sum(col)
    return total - total == 0.0  # a nan or an infinity anywhere makes the sum non-finite


def _encode_pending(templates: list[str], pending: list[list[tuple[Any, ...]]], compact: bool
                    ) -> list[list[str] | None]:
    """The lines of the records waiting per schema (``pending[sid]``: rows ``(t, v1, v2, ...)``), encoded
    column by column through the schema's ``%``-template (None where a schema has none waiting)."""
    frags: list[list[Any] | None] = []
    floats: list[Sequence[float]] = []  # the flush's columns of finite floats, written together
    where: list[tuple[list[Any], int]] = []
    for sid, rows in enumerate(pending):
        if not rows:
            frags.append(None)
            continue
        width = templates[sid].count("%s")
        cols = list(zip(*rows))
        if len(cols) != width:
            raise ValueError(f"a record has {len(rows[0])} values where its schema has {width} (t and its fields)")
        out: list[Any] = [None] * width
        times = cols[0] if _FLOAT_ONLY.issuperset(map(type, cols[0])) else tuple(map(float, cols[0]))
        for j, col in enumerate(cols):
            if j == 0:
                col = times
            if _finite_floats(col):
                floats.append(col)
                where.append((out, j))
            elif j == 0:  # non-finite times as the encoder writes a float (NaN, Infinity)
                out[j] = [float.__repr__(t) if t - t == 0.0 else _encode(t) for t in col]
            else:
                out[j] = _value_fragments(col)
        frags.append(out)
    for (out, j), texts in zip(where, _float_texts(floats)):
        out[j] = texts
    return [None if f is None else _lines(templates[sid], f, compact) for sid, f in enumerate(frags)]


def _lines(template: str, frags: list[list[str]], compact: bool) -> list[str]:
    """Fill a schema's template with the text of each record's values (``frags``: one list per column).

    A compact record (template ``[sid,%s,...,%s]``) is its values joined by commas after ``[sid`` and
    closed by ``]``, which ``str.join`` does in less time than ``%``-formatting; jsonl interleaves keys,
    so its template is filled."""
    if compact:
        n = len(frags[0])
        last = list(map(str.__add__, frags[-1], itertools.repeat("]", n)))
        head = template[: template.index(",")]  # "[sid"
        return list(map(",".join, zip(itertools.repeat(head, n), *frags[:-1], last)))
    return list(map(template.__mod__, zip(*frags)))


class Trace:
    """Append-only event log; ``emit`` is cheap, the file is flushed in batches.

    ``path`` None keeps the records in memory (tests); ``fmt`` picks the file format (module docstring).

    Records wait in memory as tuples of values, one list per (kind, field names) schema, and are encoded
    when flushed, a schema's column at a time (``float.__repr__`` mapped over a column of floats, and so
    on), into the same bytes one JSON encoder call per record would write: the event loop pays for a
    tuple and two appends per record, not for a JSON encoding.  Hot writers get a handle for their schema
    once (:meth:`kind`) and pass values by position (:meth:`put`); :meth:`emit` takes keywords.

    ``background``: blocks are compressed and written by a writer thread (zlib and file writes release
    the GIL, so on a machine with a second core they cost the event loop nothing); the file holds the
    same bytes, a block lands a moment after its flush, and :meth:`flush` and :meth:`close` wait for it.
    """

    def __init__(self, path: str | Path | None, flush_every: int = 256, fmt: TraceFormat = "jsonl",
                 background: bool = False) -> None:
        if fmt not in TRACE_FILES:
            raise ValueError(f"unknown trace format {fmt!r} (allowed: {', '.join(TRACE_FILES)})")
        self.path = Path(path) if path is not None else None
        self.fmt = fmt
        self.flush_every = max(1, int(flush_every))
        self._fh: IO[Any] | None = None
        self._schemas: dict[tuple[str, tuple[str, ...]], int] = {}
        self._keys: list[tuple[str, tuple[str, ...]]] = []  # schema id -> (kind, fields)
        self._templates: list[str] = []  # schema id -> %-template of one line
        self._pending: list[list[tuple[Any, ...]]] = []  # schema id -> records waiting, (t, v1, v2, ...)
        self._lines: list[str] = []  # lines already encoded (schema lines, column writes), in order
        self._order: list[int] = []  # the schema id of each waiting line in order (-1: from ``_lines``)
        self._handles: list[tuple[str, tuple[str, ...]]] = []  # handle -> (kind, fields)
        self._handle_sid: list[int] = []  # handle -> schema id, -1 until its first record
        self.count = 0
        self.records: list[dict[str, Any]] | None = None  # kept in memory only when there is no file
        self._writer: ThreadPoolExecutor | None = None
        self._writing: Future[None] | None = None
        if self.path is not None and background:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedsim-trace")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            from fedsim.files import record

            record(self.path)  # streamed, not renamed into place: a trace cut short still loads
            self._fh = open(self.path, "wb" if fmt == "compact" else "w", **({} if fmt == "compact" else {"encoding": "utf-8"}))
        else:
            self.records = []
            self.put = self._put_record  # type: ignore[method-assign]

    def emit(self, t: float, kind: str, **fields: Any) -> None:
        """Record one event at virtual time ``t``."""
        self.count += 1
        if self.records is not None:
            record = {"t": float(t), "kind": kind}
            for k, v in fields.items():
                # plain values and finite floats (v - v == 0 fails for nan and ±inf) as they are
                record[k] = v if type(v) in _PLAIN or (type(v) is float and v - v == 0.0) else _clean(v)
            self.records.append(record)
            return
        key = (kind, tuple(fields))
        sid = self._schemas.get(key)
        if sid is None:
            sid = self._new_schema(key)
        values = fields.values()
        if _SCALARS.issuperset(map(type, values)):
            self._pending[sid].append((t, *values))
        else:  # lists, arrays, numpy scalars: copied as plain values now (the caller may change them later)
            self._pending[sid].append((t, *map(_snapshot, values)))
        order = self._order
        order.append(sid)
        if len(order) >= self.flush_every:
            self._flush_block()

    def kind(self, kind: str, fields: Sequence[str]) -> int:
        """A handle for records of ``kind`` with these fields, in this order, written by :meth:`put`.

        The schema gets its number (and, in the compact format, its line) at its first record, as with
        :meth:`emit`, so taking a handle writes nothing."""
        self._handles.append((kind, tuple(fields)))
        self._handle_sid.append(-1)
        return len(self._handles) - 1

    def put(self, handle: int, values: tuple[Any, ...]) -> None:
        """Record one event of a :meth:`kind` handle: ``values`` is ``(t, v1, v2, ...)``, the time and then
        each field in the handle's order.  The same record as ``emit(t, kind, **fields)``, for less: no
        keywords, and the values are stored as given, so they must be plain (int, float, str, bool, None)
        or not changed afterwards."""
        sid = self._handle_sid[handle]
        if sid < 0:
            sid = self._bind(handle)
        self._pending[sid].append(values)
        order = self._order
        order.append(sid)
        self.count += 1
        if len(order) >= self.flush_every:
            self._flush_block()

    def _put_record(self, handle: int, values: tuple[Any, ...]) -> None:
        """:meth:`put` of an in-memory trace: the record as :meth:`emit` keeps it."""
        kind, names = self._handles[handle]
        self.emit(values[0], kind, **dict(zip(names, values[1:])))

    def _bind(self, handle: int) -> int:
        key = self._handles[handle]
        sid = self._schemas.get(key)
        if sid is None:
            sid = self._new_schema(key)
        self._handle_sid[handle] = sid
        return sid

    def _new_schema(self, key: tuple[str, tuple[str, ...]]) -> int:
        """Number a new (kind, fields) schema (and write its line, in the compact format)."""
        sid = self._schemas[key] = len(self._schemas)
        self._keys.append(key)
        self._pending.append([])
        kind, names = key
        if self.fmt == "compact":
            self._lines.append(json.dumps({"schema": sid, "kind": kind, "fields": list(names)}, separators=(",", ":")))
            self._order.append(-1)
            self._templates.append("[" + str(sid) + ",%s" * (len(names) + 1) + "]")
        else:
            self._templates.append('{"t":%s,"kind":' + _encode(kind).replace("%", "%%")
                                   + "".join("," + _encode(k).replace("%", "%%") + ":%s" for k in names) + "}")
        return sid

    def write_columns(self, parts: Sequence[tuple[str, np.ndarray, Mapping[str, Any]]],
                      order: np.ndarray | None = None, chunk: int = 65536) -> None:
        """Append many records given as columns: the same bytes as :meth:`emit` called once per record.

        ``parts`` holds ``(kind, t, fields)`` per event kind: ``t`` one time per record, and each field
        (in the order the records list them) an array or list with one value per record, or a scalar
        shared by all.  ``order`` lists positions into the parts' records laid end to end, in the order
        they are to be written (default: as they come).  Records are encoded a chunk at a time, so memory
        stays bounded; flushes (and the compact format's schema lines and gzip members) fall exactly
        where one-by-one emits would put them.  Engines that compute a round's events at once (the vector
        FedAvg engine) write millions of records this way, without a Python call per record."""
        sizes = [len(t) for _, t, _ in parts]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        total = int(offsets[-1])
        idx_all = np.arange(total, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
        owner_all = np.repeat(np.arange(len(parts)), sizes)
        for lo in range(0, len(idx_all), chunk):
            idx = idx_all[lo:lo + chunk]
            owner = owner_all[idx]
            encoded: list[Any] = [None] * len(idx)
            for p in np.unique(owner).tolist():
                where = np.flatnonzero(owner == p)
                kind, t, fields = parts[p]
                rows = self._encode_rows(kind, t, fields, idx[where] - offsets[p])
                for w, r in zip(where.tolist(), rows):
                    encoded[w] = r
            self._append(encoded, [(parts[p][0], tuple(parts[p][2])) for p in owner.tolist()]
                         if self.fmt == "compact" and self.records is None else None)

    def _encode_rows(self, kind: str, t: np.ndarray, fields: Mapping[str, Any], sel: np.ndarray) -> list[Any]:
        """Records ``sel`` of one kind's columns, encoded as :meth:`emit` would (compact rows without their
        ``[schema`` head, which :meth:`_append` adds)."""
        times = np.asarray(t, dtype=np.float64)[sel]
        names = list(fields)
        if self.records is not None:
            cols = [None if (col := _column(fields[k], sel)) is None else
                    (col.tolist() if isinstance(col, np.ndarray) else col) for k in names]
            out = []
            for i, ti in enumerate(times.tolist()):
                rec: dict[str, Any] = {"t": ti, "kind": kind}
                for k, col in zip(names, cols):
                    v = col[i] if col is not None else fields[k]
                    rec[k] = v if type(v) in _PLAIN or (type(v) is float and v - v == 0.0) else _clean(v)
                out.append(rec)
            return out
        parts: list[str] = []
        varying = [_fragments(times)]
        for k in names:
            col = _column(fields[k], sel)
            if col is None:  # a constant, written into the template
                parts.append(_encode(_clean(fields[k])).replace("%", "%%"))
            else:
                parts.append("%s")
                varying.append(_fragments(col))
        if self.fmt == "compact":
            template = ",%s" + "".join("," + p for p in parts) + "]"
        else:
            template = ('{"t":%s,"kind":' + _encode(kind).replace("%", "%%")
                        + "".join("," + _encode(k).replace("%", "%%") + ":" + p for k, p in zip(names, parts)) + "}")
        return [template % row for row in zip(*varying)]

    def _append(self, encoded: list[Any], keys: list[tuple[str, tuple[str, ...]]] | None) -> None:
        """Add encoded records in order, flushing every ``flush_every`` lines as :meth:`emit` does."""
        if self.records is not None:
            self.records.extend(encoded)
            self.count += len(encoded)
            return
        lines, order = self._lines, self._order
        for i, line in enumerate(encoded):
            if keys is not None:
                key = keys[i]
                sid = self._schemas.get(key)
                if sid is None:
                    sid = self._new_schema(key)
                line = f"[{sid}{line}"
            lines.append(line)
            order.append(-1)
            if len(order) >= self.flush_every:
                self._flush_block()
        self.count += len(encoded)

    def _encoded(self) -> list[str]:
        """The waiting lines, encoded, in the order they were recorded (and forgotten here)."""
        encoded = _encode_pending(self._templates, self._pending, self.fmt == "compact")
        sources: list[Iterator[str]] = [iter(()) if e is None else iter(e) for e in encoded]
        sources.append(iter(self._lines))  # index -1: the lines encoded already
        for rows in self._pending:
            rows.clear()
        out = list(map(next, map(sources.__getitem__, self._order)))
        self._lines.clear()  # in place: writers hold these lists
        self._order.clear()
        return out

    def _flush_block(self) -> None:
        """Encode the waiting lines as one block and write it (in the background writer, if there is one;
        blocks are written one at a time, in order)."""
        if self._fh is None or not self._order:
            return
        text = "\n".join(self._encoded()) + "\n"
        if self._writer is None:
            self._write(text)
            return
        self._wait_for_writer()
        self._writing = self._writer.submit(self._write, text)

    def _write(self, text: str) -> None:
        assert self._fh is not None
        if self.fmt == "compact":  # each block one gzip member
            self._fh.write(gzip.compress(text.encode("utf-8"), compresslevel=1, mtime=0))
        else:
            self._fh.write(text)
        self._fh.flush()

    def _wait_for_writer(self) -> None:
        """Wait until the block being written is on disk (and raise what writing it raised)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            writing.result()

    def flush(self) -> None:
        """Write every record so far; returns once they are in the file."""
        self._flush_block()
        self._wait_for_writer()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def frame(self) -> pd.DataFrame:
        """The events so far as a DataFrame (flushes first)."""
        if self.records is not None:
            return pd.DataFrame.from_records(self.records)
        self.flush()
        assert self.path is not None
        return load_trace(self.path)


def _compact_lines(path: Path) -> Iterator[str]:
    """Lines of a compact trace; a gzip member cut off by a killed run ends the stream quietly."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        try:
            for line in fh:
                yield line
        except (EOFError, gzip.BadGzipFile, OSError):
            return


def iter_trace(path: str | Path, kinds: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
    """Stream a trace's records (either format) as dicts, oldest first, keeping only ``kinds``.

    Memory stays constant however long the trace is.  A last record cut off by a killed run is skipped.
    """
    path = Path(path)
    if path.is_dir():
        path = trace_path(path)
    wanted = None if kinds is None else set(kinds)
    if path.name.endswith(".gz"):
        schemas: dict[int, tuple[str, list[str]]] = {}
        skip: set[str] = set()  # the "[sid," prefixes of the kinds not wanted: those rows are never decoded
        for line in _compact_lines(path):
            if skip and line[: line.find(",") + 1] in skip:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                return
            if isinstance(row, dict):
                schemas[row["schema"]] = (row["kind"], row["fields"])
                if wanted is not None and row["kind"] not in wanted:
                    skip.add(f"[{row['schema']},")
                continue
            kind, names = schemas[row[0]]
            if wanted is not None and kind not in wanted:
                continue
            rec = {"t": row[1], "kind": kind}
            rec.update(zip(names, row[2:]))
            yield rec
        return
    marks = None if wanted is None else tuple(f'"kind":{json.dumps(k)}' for k in wanted)
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or (marks is not None and not any(m in line for m in marks)):
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                return


#: Lines parsed per block by :func:`iter_blocks` (bounded memory: a block of this many records at a time).
BLOCK_LINES = 65536


def floats(values: Sequence[Any]) -> np.ndarray:
    """Values of one trace field as float64: numbers as they are, None (and anything not a number, e.g.
    a string or a list) as NaN, non-finite floats written as strings ("NaN", "Infinity") as themselves."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            if isinstance(v, (int, float)) or (isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity")):
                out[i] = float(v)
        return out


class Block:
    """The records of one event kind within a block of trace lines, as columns.

    ``t`` and ``seq`` (each record's position among the trace's records, so blocks of different kinds
    can be put back in file order) are float64 / int64 arrays; :meth:`num` gives a field as float64 (NaN
    where a record lacks it or holds something that is not a number) and :meth:`values` as a list of the
    raw JSON values (None where missing).  ``closes``: the last block of a piece of the file, so every
    record before the next block's has been given (within a piece, the blocks of different kinds
    interleave in file order; a reader that needs "all records up to here" waits for it)."""

    __slots__ = ("kind", "t", "seq", "names", "closes", "_cols", "_rows", "_text", "_strs")

    def __init__(self, kind: str, names: Sequence[str], seq: np.ndarray, *, rows: list[Any] | None = None,
                 cols: Mapping[str, np.ndarray] | None = None, text: bytes | None = None) -> None:
        self.kind = kind
        self.names = list(names)  # the fields the records carry (jsonl: those of any record of the block)
        self.seq = np.asarray(seq, dtype=np.int64)
        self.closes = False
        self._strs: dict[str, np.ndarray] = {}  # string columns read by the CSV reader (None-free: NaN missing)
        self._rows = rows  # parsed records: compact rows [sid, t, v1, ...] or jsonl dicts
        self._cols = dict(cols or {})  # numeric columns parsed in bulk (``t`` among them)
        self._text = text  # the block's compact lines, parsed only if raw values are asked for
        self.t = self._cols["t"] if "t" in self._cols else floats(self._raw("t"))

    def __len__(self) -> int:
        return len(self.seq)

    def has(self, field: str) -> bool:
        """Whether the records carry ``field``."""
        return field in self.names

    def _raw(self, field: str) -> list[Any]:
        if self._rows is None:
            assert self._text is not None
            self._rows = _parse_rows(self._text.decode("utf-8").splitlines())
        rows = self._rows
        if rows and isinstance(rows[0], dict):
            return list(map(dict.get, rows, itertools.repeat(field)))
        if field == "t":
            return [r[1] for r in rows]
        if field not in self.names:
            return [None] * len(rows)
        j = self.names.index(field) + 2
        return [r[j] if len(r) > j else None for r in rows]

    def values(self, field: str) -> list[Any]:
        strs = self._strs.get(field)
        if strs is not None and self._rows is None:  # a string column, without parsing every row
            return [v if isinstance(v, str) else None for v in strs.tolist()]
        return self._raw(field)

    def num(self, field: str) -> np.ndarray:
        col = self._cols.get(field)
        if col is not None:
            return col
        if field not in self.names:
            return np.full(len(self), np.nan)
        return floats(self._raw(field))


def _read_bytes(path: Path) -> Iterator[bytes]:
    """The trace file's text as bytes, in pieces of a few MB; a compact trace is inflated member by member
    and a member cut off by a killed run ends the stream with what it held so far."""
    with open(path, "rb") as fh:
        if not path.name.endswith(".gz"):
            while piece := fh.read(1 << 22):
                yield piece
            return
        inflate = zlib.decompressobj(wbits=31)
        while raw := fh.read(1 << 21):
            while raw:
                try:
                    out = inflate.decompress(raw)
                except zlib.error:
                    return
                if out:
                    yield out
                if not inflate.eof:
                    break
                raw = inflate.unused_data  # the next gzip member (each flush is one)
                inflate = zlib.decompressobj(wbits=31)
        tail = inflate.flush()
        if tail:
            yield tail


def _whole_lines(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The text of ``pieces`` re-cut after each piece's last newline, so every piece yielded holds whole
    lines and ends in a newline; the text after the stream's last newline (the last line of a killed
    run's trace, cut) comes last, without one, when there is any."""
    rest = b""
    for piece in pieces:
        buf = rest + piece
        cut = buf.rfind(b"\n")
        if cut < 0:
            rest = buf
            continue
        rest = buf[cut + 1:]
        yield buf[:cut + 1]
    if rest:
        yield rest


def _read_lines(path: Path, size: int) -> Iterator[list[str]]:
    """The trace's lines in lists of at most ``size`` (the last line of a killed run's trace may be cut)."""
    for text in _whole_lines(_read_bytes(path)):
        if not text.endswith(b"\n"):  # the cut last line
            if text.strip():
                yield [text.decode("utf-8", errors="replace")]
            continue
        lines = text[:-1].decode("utf-8").split("\n")
        for i in range(0, len(lines), size):
            yield lines[i:i + size]


def iter_blocks(path: str | Path, kinds: Iterable[str] | None = None, fields: Iterable[str] | None = None,
                block_lines: int = BLOCK_LINES) -> Iterator[Block]:
    """Stream a trace (either format) as :class:`Block` columns, a few MB of text at a time.

    For readers that aggregate (figures, report, checks), so memory stays that of one block however long
    the trace.  Records of kinds not wanted are never parsed.  In the compact format, the lines of each
    wanted kind are gathered with numpy and the numeric ``fields`` (all, by default) parsed by pandas'
    CSV reader: a million-event trace is read in about a second, against several for one JSON object
    per record.  A last record cut off by a killed run is skipped, as :func:`iter_trace` does."""
    path = Path(path)
    if path.is_dir():
        path = trace_path(path)
    wanted = None if kinds is None else set(kinds)
    need = None if fields is None else set(fields)
    if path.name.endswith(".gz"):
        yield from _compact_blocks(path, wanted, need, size=16 * block_lines)  # 1 MB of text by default
        return
    # a line is parsed only if it names a wanted kind (one regular expression, searched line by line in C)
    marks = None if wanted is None else re.compile("|".join(re.escape(f'"kind":{json.dumps(k)}') for k in sorted(wanted)))
    seq = 0
    for lines in _read_lines(path, block_lines):
        texts = list(filter(None, map(str.strip, lines)))  # the records (empty lines are none)
        order = range(seq, seq + len(texts))
        seq += len(texts)
        if marks is not None:
            hits = list(map(bool, map(marks.search, texts)))
            texts, order = list(itertools.compress(texts, hits)), list(itertools.compress(order, hits))
        rows = _parse_rows(texts)
        kinds = list(map(dict.get, rows, itertools.repeat("kind")))
        groups = [k for k in dict.fromkeys(kinds) if wanted is None or k in wanted]
        karr = np.empty(len(kinds), dtype=object)
        karr[:] = kinds
        pos = np.array(order[:len(rows)], dtype=np.int64)
        for i, k in enumerate(groups):
            at = np.flatnonzero(karr == k)
            rs = [rows[j] for j in at.tolist()]
            names = [f for f in dict.fromkeys(itertools.chain.from_iterable(rs)) if f not in ("t", "kind")]
            block = Block(k, names, pos[at], rows=rs)
            block.closes = i == len(groups) - 1
            yield block


def _pieces(source: Iterator[bytes], size: int) -> Iterator[bytes]:
    """Join small pieces (a compact trace inflates one flush at a time) into pieces of about ``size``."""
    parts: list[bytes] = []
    held = 0
    for piece in source:
        parts.append(piece)
        held += len(piece)
        if held >= size:
            yield b"".join(parts)
            parts, held = [], 0
    if parts:
        yield b"".join(parts)


def _compact_blocks(path: Path, wanted: set[str] | None, need: set[str] | None, size: int = 1 << 21
                    ) -> Iterator[Block]:
    """:func:`iter_blocks` of a compact trace.  Per piece of inflated text (whole lines): the line starts
    and schema ids in numpy, the wanted lines grouped by schema with one stable sort and one gather, each
    schema's lines read by ``pandas.read_csv`` (numeric columns only; JSON for rows that nest lists)."""
    schemas: dict[int, tuple[str, list[str]]] = {}
    rest = b""
    base = 0  # records before this piece
    for buf in _whole_lines(_pieces(_read_bytes(path), size)):
        if not buf.endswith(b"\n"):  # the cut last line, read below
            rest = buf
            break
        cut = len(buf) - 1
        data = np.frombuffer(buf, dtype=np.uint8)
        ends = np.flatnonzero(data == 10)  # each line's newline
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        first = data[np.minimum(starts, cut)]
        first[ends == starts] = 0  # empty lines
        for i in np.flatnonzero(first == ord("{")).tolist():
            try:
                head = json.loads(buf[starts[i]:ends[i]])
            except json.JSONDecodeError:
                return
            schemas[int(head["schema"])] = (head["kind"], list(head["fields"]))
        record = first == ord("[")
        index = base + np.cumsum(record) - 1  # each line's position among the records
        base += int(record.sum())
        sid = np.zeros(len(starts), dtype=np.int64)  # the digits after "["
        pos, active = starts + 1, record.copy()
        for _ in range(9):
            c = data[np.minimum(pos, cut)]
            digit = active & (c >= 48) & (c <= 57)
            if not digit.any():
                break
            sid[digit] = sid[digit] * 10 + (c[digit].astype(np.int64) - 48)
            pos[digit] += 1
            active = digit
        keep = [s for s, (kind, _) in schemas.items() if wanted is None or kind in wanted]
        sel = np.flatnonzero(record & np.isin(sid, keep))
        if not len(sel):
            continue
        sel = sel[np.argsort(sid[sel], kind="stable")]
        lens = (ends[sel] - starts[sel] + 1).astype(np.int32)
        offsets = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)])
        gather = np.repeat((starts[sel] - offsets[:-1]).astype(np.int32), lens)
        gather += np.arange(offsets[-1], dtype=np.int32)  # each wanted byte's position in the piece
        text = data[gather].tobytes()  # the wanted lines, grouped by schema, in file order within each
        del gather
        bounds = np.flatnonzero(np.diff(sid[sel])) + 1
        cuts = list(zip([0, *bounds.tolist()], [*bounds.tolist(), len(sel)]))
        for i, (lo, hi) in enumerate(cuts):
            s = int(sid[sel[lo]])
            kind, names = schemas[s]
            chunk = text[offsets[lo]:offsets[hi]]
            block = _compact_block(kind, names, chunk, index[sel[lo:hi]], need)
            block.closes = i == len(cuts) - 1
            yield block
    if rest.strip():  # a last line without its newline: a killed run's; kept only if it parses
        try:
            row = json.loads(rest)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if isinstance(row, list) and row and row[0] in schemas:
            kind, names = schemas[row[0]]
            if wanted is None or kind in wanted:
                yield Block(kind, names, np.array([base], dtype=np.int64), rows=[row])


def _compact_block(kind: str, names: list[str], text: bytes, seq: np.ndarray, need: set[str] | None) -> Block:
    """One schema's lines (``[sid,t,v1,...]`` each) as a :class:`Block`: numeric columns by the CSV reader
    when no row nests a list or object, else every row by JSON."""
    if text.count(b"[") != len(seq) or b"{" in text:  # a row nests a list or an object (or a string holds one)
        return Block(kind, names, seq, text=text)
    cols = ["t", *names]
    use = [c for c in cols if need is None or c in need or c == "t"]
    try:
        frame = pd.read_csv(io.BytesIO(text.replace(b"]\n", b"\n")), header=None, names=["_", *cols],
                            usecols=use, engine="c", escapechar="\\" if b"\\" in text else None,
                            keep_default_na=False, na_values=["null", "NaN"], low_memory=False)
    except (ValueError, pd.errors.ParserError):
        return Block(kind, names, seq, text=text)
    if len(frame) != len(seq):
        return Block(kind, names, seq, text=text)
    out: dict[str, np.ndarray] = {}
    strs: dict[str, np.ndarray] = {}
    plain = b"\\" not in text and b'"null"' not in text and b'"NaN"' not in text  # strings read as JSON would
    for c in use:
        col = frame[c]
        if col.dtype.kind in "iufb":
            out[c] = col.to_numpy(dtype=np.float64)
        else:  # strings (or a mix): numbers where they parse, NaN elsewhere
            out[c] = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64)
            if plain and not np.isfinite(out[c]).any():  # a string field (``what``): kept as read
                strs[c] = col.to_numpy(dtype=object)
    block = Block(kind, names, seq, cols=out, text=text)
    block._strs = strs
    return block


def _parse_rows(texts: list[str]) -> list[Any]:
    """Parse lines in one JSON call; a malformed (cut-off) line and those after it are dropped."""
    try:
        return json.loads("[" + ",".join(texts) + "]")
    except json.JSONDecodeError:
        rows = []
        for text in texts:
            try:
                rows.append(json.loads(text))
            except json.JSONDecodeError:
                break
        return rows


def load_trace(path: str | Path, kinds: Iterable[str] | None = None,
               columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Load a trace file (or a run directory holding one, either format) as a DataFrame.

    ``kinds`` keeps only those event kinds (for jsonl selected on the raw text before parsing, which makes
    reading a few kinds out of a million-event trace fast); ``columns`` keeps only those fields (``t`` and
    ``kind`` always), so the frame holds what the reader needs and not every event's every field.  A last
    line cut off by a killed run is ignored, so a partial trace always loads.  With ``columns`` the
    ``kind`` column is categorical (a byte per record instead of a string object: 60 MB less for a
    million records); it compares with strings as the full load's does.
    """
    keep = None if columns is None else ["t", "kind", *[c for c in columns if c not in ("t", "kind")]]
    if keep is None:
        return pd.DataFrame.from_records(list(iter_trace(path, kinds)))
    fields = [_Column() for _ in keep[2:]]
    codes, names = array("h"), {}  # the kind column as category codes
    times = _Column()
    for rec in iter_trace(path, kinds):
        times.add(rec["t"])
        code = names.get(rec["kind"])
        if code is None:
            code = names[rec["kind"]] = len(names)
        codes.append(code)
        for c, col in zip(keep[2:], fields):
            col.add(rec.get(c))
    kind = pd.Categorical.from_codes(np.frombuffer(codes, dtype=np.int16), categories=list(names))
    out = {"t": times.series(), "kind": pd.Series(kind.reorder_categories(sorted(names)))}
    out.update((c, col.series()) for c, col in zip(keep[2:], fields))
    return pd.DataFrame(out, copy=False)


class _Column:
    """One column of a trace being read: numbers go straight into a packed growing buffer (8 bytes a
    record, grown in place, so a million records never sit in memory as Python objects and no pieces are
    joined at the end); a column holding anything else (strings, booleans, lists) falls back to a list.
    :meth:`series` gives the dtype a frame of the same records would have (int64, float64 with NaN for
    missing values, object when all are missing, else what pandas infers)."""

    __slots__ = ("values", "objects", "floats", "missing")

    def __init__(self) -> None:
        self.values: array | None = array("d")
        self.objects: list[Any] | None = None
        self.floats = False  # a float was seen (else the numbers are all ints)
        self.missing = 0

    def add(self, v: Any) -> None:
        if self.values is not None:
            t = type(v)
            if t is float:
                self.floats = True
                self.values.append(v)
                return
            if t is int and -_EXACT <= v <= _EXACT:
                self.values.append(v)
                return
            if v is None:
                self.missing += 1
                self.values.append(math.nan)
                return
            self._to_objects()
        assert self.objects is not None
        self.objects.append(v)

    def _to_objects(self) -> None:
        assert self.values is not None
        cast = float if self.floats else int
        self.objects = [None if x != x else cast(x) for x in self.values]
        self.values = None

    def series(self) -> pd.Series:
        if self.values is None:
            return pd.DataFrame({"c": self.objects})["c"].rename(None)
        n = len(self.values)
        if n == 0 or self.missing == n:
            return pd.Series([None] * n, dtype=object)
        data = np.frombuffer(self.values, dtype=np.float64)
        if not self.floats and not self.missing:
            return pd.Series(data.astype(np.int64))
        return pd.Series(data, copy=False)


_EXACT = 2 ** 53  # ints up to this size are exact in a float64
