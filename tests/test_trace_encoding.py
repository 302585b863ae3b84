"""The trace encodes its records when it flushes, a schema's column at a time; the file must hold the bytes
that one JSON encoding per record gives (the reference below), in both formats, for every kind of value."""
from __future__ import annotations

import gzip
import json
import math
import random

import numpy as np
import pytest

from fedsim.sim.trace import Trace

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

_enc = json.JSONEncoder(separators=(",", ":")).encode


def _ref_clean(v):
    if isinstance(v, float):
        return str(v) if math.isnan(v) or math.isinf(v) else v
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        return _ref_clean(v.item())
    if isinstance(v, (list, tuple)):
        return [_ref_clean(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _ref_clean(x) for k, x in v.items()}
    return v


def _reference(events, fmt: str, flush_every: int) -> bytes:
    """What a trace writer that JSON-encodes each record on its own writes for ``events``."""
    schemas: dict = {}
    lines: list[str] = []
    out = b""

    def flush():
        nonlocal out, lines
        if lines:
            text = "\n".join(lines) + "\n"
            out += gzip.compress(text.encode(), compresslevel=1, mtime=0) if fmt == "compact" else text.encode()
            lines = []

    for t, kind, fields in events:
        rec = {"t": float(t), "kind": kind, **{k: _ref_clean(v) for k, v in fields.items()}}
        if fmt == "compact":
            key = (kind, tuple(fields))
            if key not in schemas:
                schemas[key] = len(schemas)
                lines.append(json.dumps({"schema": schemas[key], "kind": kind, "fields": list(fields)},
                                        separators=(",", ":")))
            del rec["kind"]
            lines.append(_enc([schemas[key], *rec.values()]))
        else:
            lines.append(_enc(rec))
        if len(lines) >= flush_every:
            flush()
    flush()
    return out


def _events(n: int, seed: int):
    rng = random.Random(seed)
    values = [0, 7, -3, 2 ** 70, 0.0, -0.0, 1.5, 1e-300, 1e300, 3.141592653589793, math.nan, math.inf, -math.inf,
              None, True, False, "sfl-forward", "é%s\"\\", np.float64(2.5), np.float32(0.1), np.int64(9),
              np.float64(math.nan), [1, 2.5, math.nan, None], (3, "x"), {"a": 1.0, 2: [math.inf]}, []]
    kinds = [("compute", ("client", "start", "end", "what")), ("upload", ("client", "bytes", "rate_bps")),
             ("drop", ("client", "reason", "round")), ("empty", ()), ("mixed%", ("a%", "b"))]
    t = 0
    for _ in range(n):
        kind, names = rng.choice(kinds)
        typed = rng.random() < 0.5  # a column of one type (the mapped path) or anything
        pool = values[:4] if typed and kind == "compute" else values
        fields = {k: rng.choice(pool) for k in names}
        if kind == "upload" and typed:  # columns of floats only: each distinct value written once a flush
            fields = {"client": rng.randrange(10), "bytes": rng.randrange(10 ** 9),
                      "rate_bps": rng.choice([rng.random() * 1e7, 0.0, 0.0, -0.0 if rng.random() < 0.1 else 0.5, t])}
        t = t if rng.random() < 0.2 else t + rng.random()  # the first records at int time 0
        yield t, kind, fields


@pytest.mark.parametrize("fmt", ["jsonl", "compact"])
@pytest.mark.parametrize("flush_every", [1, 3, 64, 10_000])
@pytest.mark.parametrize("background", [False, True])
def test_emit_writes_the_bytes_of_one_encoding_per_record(tmp_path, fmt, flush_every, background):
    """Also with the background writer (the runner's), and past the size where floats go through numpy."""
    events = list(_events(600 if flush_every < 64 else 3000, seed=flush_every))
    path = tmp_path / f"trace.{fmt}"
    tr = Trace(path, flush_every=flush_every, fmt=fmt, background=background)
    for t, kind, fields in events:
        tr.emit(t, kind, **fields)
    tr.close()
    assert path.read_bytes() == _reference(events, fmt, flush_every)
    assert tr.count == len(events)


@pytest.mark.parametrize("fmt", ["jsonl", "compact"])
def test_put_by_handle_equals_emit_and_keeps_no_reference(tmp_path, fmt):
    """Handles and keywords share schemas; a list given to ``emit`` and changed afterwards is written as it
    was (records wait unencoded until the flush)."""
    a, b = Trace(tmp_path / "a", flush_every=5, fmt=fmt), Trace(tmp_path / "b", flush_every=5, fmt=fmt)
    h = a.kind("upload", ("client", "bytes", "wait", "what"))
    for i in range(23):
        clients = [i, i + 1]
        a.emit(float(i), "server_step", clients=clients, tv=0.5)
        b.emit(float(i), "server_step", clients=list(clients), tv=0.5)
        clients.append(99)
        a.put(h, (float(i), i, 10 * i, 0.0 if i % 3 else None, "model" if i % 2 else "activations"))
        b.emit(float(i), "upload", client=i, bytes=10 * i, wait=0.0 if i % 3 else None,
               what="model" if i % 2 else "activations")
    a.close()
    b.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert a.count == b.count == 46


def test_in_memory_put_keeps_the_records_emit_keeps():
    a, b = Trace(None), Trace(None)
    h = a.kind("compute", ("client", "flops"))
    a.put(h, (0, 3, np.float64(1e9)))
    b.emit(0, "compute", client=3, flops=np.float64(1e9))
    assert a.records == b.records == [{"t": 0.0, "kind": "compute", "client": 3, "flops": 1e9}]


@pytest.mark.parametrize("negative_zero", [False, True])
def test_repeated_floats_are_written_as_each_record_would_be(tmp_path, negative_zero):
    """A flush writes each distinct float once (numpy numbers them): times shared by consecutive records,
    constants, per-client values, zeros, tiny and huge values; -0.0 somewhere keeps its sign."""
    rng = random.Random(1)
    rates = [rng.random() * 1e7 for _ in range(7)]
    events, now = [], 0.0
    for i in range(5000):
        start, now = now, now + rng.choice([0.0, rng.random(), 1e-300, 5e-324])
        c = i % 7
        wait = -0.0 if negative_zero and i == 4321 else 0.0
        events.append((now, "upload", {"client": c, "start": start, "end": now, "wait": wait, "rate_bps": rates[c],
                                       "big": 1e300 * (i % 3), "flops": 1234.5}))
    path = tmp_path / "trace.gz"
    tr = Trace(path, flush_every=4096, fmt="compact")
    for t, kind, fields in events:
        tr.emit(t, kind, **fields)
    tr.close()
    assert path.read_bytes() == _reference(events, "compact", 4096)
