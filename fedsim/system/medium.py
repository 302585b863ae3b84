"""How clients share the air: SimPy access models behind one interface.

Every medium offers ``transfer(client, bits, rate)`` as a SimPy process generator returning a
``TransferRecord``; use ``rec = yield from medium.transfer(...)`` or ``yield env.process(...)``.  ``rate``
is either the link's full-band rate in bit/s or a callable ``share -> bit/s`` (``LinkModel.rate_fn``)
that gives the rate on a fraction of the band, which FDMA needs to be exact under Shannon (a sub-band
concentrates the transmit power).  Each record separates ``wait`` from ``airtime``:

* ``Dedicated``: every client has its own channel; no waiting; airtime = bits / rate.
* ``FDMA(env, n)``: the band is cut into n equal sub-bands (n = clients scheduled in the round, as Plato
  and APPFL do); a transfer holds one sub-band and runs at the rate on 1/n of the band.  A transfer that
  finds all n sub-bands taken waits.  With a plain number as rate, the sub-band rate is rate / n.
* ``TDMA(env)``: the whole band, one transfer at a time, FIFO (a ``simpy.Resource``); wait = time queued.
* ``ProcessorSharing(env)``: egalitarian time sharing: with k transfers in progress each advances at
  rate_i / k, recomputed exactly at every arrival and departure (an event-driven fluid model;
  Kleinrock, *Queueing Systems* vol. 2, ch. 4).  Airtime is the time the radio is actually on,
  bits / rate_i; wait is the rest of the sojourn, the slowdown caused by sharing.

For K equal uploads of S bits at rate R started together the closed forms are: FDMA, all finish at
K S / R; TDMA, the k-th finishes at k S / R; processor sharing, all finish at K S / R.

A transfer may be cut before it ends (a round's deadline, the client going offline, the run's end).  The
caller then needs what it actually did, so ``transfer`` fills an optional :class:`Progress` as it goes (when
the radio came on and at what rate) and reads back the bits sent so far; an interrupted transfer frees its
sub-band, queue place or share of the band at once.
"""
from __future__ import annotations

import itertools
import math
from collections import deque
from typing import Any, Callable, Generator, NamedTuple, Union

import simpy

from fedsim.errors import ConfigError

Rate = Union[float, Callable[[float], float]]


class TransferRecord(NamedTuple):
    """One transfer.  ``wait`` (queued or slowed by sharing) + ``airtime`` (radio on) = end - request.

    A named tuple: immutable, and made once per transfer for a fraction of a frozen dataclass's cost."""

    client: Any
    bits: float
    request: float
    start: float
    end: float
    airtime: float
    wait: float
    medium: str

    @property
    def duration(self) -> float:
        return self.end - self.request

    @property
    def mean_rate_bps(self) -> float:
        return self.bits / self.duration if self.duration > 0 else math.inf


def _rate_at(rate: Rate, share: float) -> float:
    r = float(rate(share)) if callable(rate) else float(rate) * share
    if not r > 0:
        raise ConfigError("medium.rate", f"transfer rate must be positive, got {r!r} bit/s")
    return r


def _check_bits(bits: float) -> None:
    if bits < 0 or not math.isfinite(bits):
        raise ConfigError("medium.bits", f"must be a finite non-negative number, got {bits!r}")


class Progress:
    """How far one transfer has got: filled by the medium, read by the world when the transfer is cut (why:
    a cut transfer's record carries the bits actually sent and the radio time actually spent, not the plan).

    ``start`` is when the radio came on (None while still queued), ``rate`` its rate while on (bit/s), and
    ``done`` whether every bit has gone.  Processor sharing, whose rate changes with every arrival, gives
    ``sent_fn`` (the bits sent up to now) instead."""

    __slots__ = ("start", "rate", "done", "sent_fn")

    def __init__(self) -> None:
        self.start: float | None = None
        self.rate = 0.0
        self.done = False
        self.sent_fn: Callable[[], float] | None = None

    def bits_sent(self, now: float, bits: float) -> float:
        """Bits sent by ``now`` of a transfer of ``bits``."""
        if self.done:
            return bits
        if self.sent_fn is not None:
            return min(bits, max(0.0, self.sent_fn()))
        if self.start is None:
            return 0.0
        if math.isinf(self.rate):
            return bits
        return min(bits, max(0.0, (now - self.start) * self.rate))

    def airtime(self, now: float, bits: float) -> float:
        """Seconds the radio was on by ``now`` (the bits sent at the radio's rate)."""
        sent = self.bits_sent(now, bits)
        if sent <= 0 or not self.rate > 0 or math.isinf(self.rate):
            return 0.0
        if self.sent_fn is None and self.start is not None and not self.done:
            return min(now - self.start, bits / self.rate)
        return sent / self.rate


class Medium:
    """Interface: ``transfer(client, bits, rate)`` is a SimPy process generator returning a TransferRecord."""

    name = "medium"

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        #: the last transfers, for inspection (bounded, so memory does not grow with the run; the trace
        #: has every transfer)
        self.records: deque[TransferRecord] = deque(maxlen=10_000)

    def transfer(self, client: Any, bits: float, rate: Rate,
                 progress: Progress | None = None) -> Generator[simpy.Event, Any, TransferRecord]:
        raise NotImplementedError

    def _done(self, rec: TransferRecord) -> TransferRecord:
        self.records.append(rec)
        return rec


class Dedicated(Medium):
    """Each client has its own channel at its full rate (GAS's code: every client gets the full 10 MHz)."""

    name = "dedicated"

    def transfer(self, client, bits, rate, progress=None):
        _check_bits(bits)
        t0 = self.env.now
        r = _rate_at(rate, 1.0)
        air = bits / r if math.isfinite(r) else 0.0
        if progress is not None:
            progress.start, progress.rate = t0, r
        yield self.env.timeout(air)
        return self._done(TransferRecord(client, bits, t0, t0, self.env.now, air, 0.0, self.name))


class _Slotted(Medium):
    """A medium of ``slots`` channels, each giving a fraction ``share`` of the band; FIFO when all are busy."""

    def __init__(self, env: simpy.Environment, slots: int, share: float) -> None:
        super().__init__(env)
        self.resource = simpy.Resource(env, capacity=slots)
        self.share = share

    def transfer(self, client, bits, rate, progress=None):
        _check_bits(bits)
        t0 = self.env.now
        with self.resource.request() as req:  # an interrupt leaves the queue or frees the sub-band
            yield req
            start = self.env.now
            r = _rate_at(rate, self.share)  # block fading: the rate is that of the moment service starts
            air = bits / r if math.isfinite(r) else 0.0
            if progress is not None:
                progress.start, progress.rate = start, r
            yield self.env.timeout(air)
        end = self.env.now
        return self._done(TransferRecord(client, bits, t0, start, end, end - start, start - t0, self.name))


class FDMA(_Slotted):
    """Band split equally into ``n_scheduled`` sub-bands; create one per round with that round's n."""

    name = "fdma"

    def __init__(self, env: simpy.Environment, n_scheduled: int) -> None:
        if not isinstance(n_scheduled, int) or n_scheduled < 1:
            raise ConfigError("medium.n_scheduled", f"must be an integer >= 1, got {n_scheduled!r}")
        super().__init__(env, n_scheduled, 1.0 / n_scheduled)
        self.n_scheduled = n_scheduled


class TDMA(_Slotted):
    """Uploads serialised on the full band in arrival order; waiting is recorded apart from airtime."""

    name = "tdma"

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env, 1, 1.0)


class ProcessorSharing(Medium):
    """Concurrent transfers share the band equally in time; shares change as transfers start and end.

    Exact fluid model: at each arrival or departure the bits still to send are brought up to date and the
    next departure is scheduled.  A wake-up scheduled before an arrival made it obsolete stays in SimPy's
    queue and fires as a no-op (SimPy cannot cancel a timeout); it can move ``env.now`` past the last
    transfer when the run has nothing else to do, so read end times from the records.
    """

    name = "processor_sharing"

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._active: dict[int, list] = {}  # key -> [remaining_bits, full_rate, event]
        self._ids = itertools.count()
        self._last = env.now
        self._wakeups: set[float] = set()

    @property
    def active(self) -> int:
        return len(self._active)

    def _advance(self) -> None:
        now = self.env.now
        k = len(self._active)
        if k and now > self._last:
            dt = now - self._last
            for item in self._active.values():
                item[0] -= dt * item[1] / k
        self._last = now

    def _schedule(self) -> None:
        k = len(self._active)
        if not k:
            return
        key, item = min(self._active.items(), key=lambda kv: (kv[1][0] / kv[1][1], kv[0]))
        t_next = self.env.now + max(0.0, item[0] * k / item[1])
        if any(abs(w - t_next) <= 1e-12 * max(1.0, t_next) for w in self._wakeups):
            return
        self._wakeups.add(t_next)
        self.env.process(self._wake(t_next))

    def _wake(self, t_next: float):
        yield self.env.timeout(t_next - self.env.now)
        self._wakeups.discard(t_next)
        self._advance()
        if self._active:
            k = len(self._active)
            # finish every transfer whose remaining time at its current share is ~0 (ties finish together)
            eps = 1e-9
            done = [key for key, it in self._active.items() if it[0] * k / it[1] <= eps * max(1.0, self.env.now)]
            for key in done:
                self._active.pop(key)[2].succeed(self.env.now)
        self._schedule()

    def _sent(self, key: int, bits: float) -> float:
        """Bits of transfer ``key`` sent by now (all of them once it has left)."""
        self._advance()
        item = self._active.get(key)
        return bits if item is None else bits - item[0]

    def transfer(self, client, bits, rate, progress=None):
        _check_bits(bits)
        env = self.env
        t0 = env.now
        r = _rate_at(rate, 1.0)
        if bits == 0 or math.isinf(r):
            return self._done(TransferRecord(client, bits, t0, t0, t0, 0.0, 0.0, self.name))
        self._advance()
        ev = env.event()
        key = next(self._ids)
        self._active[key] = [float(bits), r, ev]
        if progress is not None:
            progress.start, progress.rate = t0, r
            progress.sent_fn = lambda: self._sent(key, float(bits))
        self._schedule()
        try:
            yield ev
        except simpy.Interrupt:  # cut: what it sent stays sent, and the others share the band without it
            sent = self._sent(key, float(bits))
            if progress is not None:
                progress.sent_fn = lambda: sent
            self._active.pop(key, None)
            self._schedule()
            raise
        end = env.now
        air = bits / r
        return self._done(TransferRecord(client, bits, t0, t0, end, air, max(0.0, end - t0 - air), self.name))


MEDIA = ("dedicated", "fdma", "tdma", "processor_sharing")


def make_medium(kind: str, env: simpy.Environment, n_scheduled: int | None = None) -> Medium:
    """A medium by name (``n_scheduled`` is needed for FDMA)."""
    if kind == "dedicated":
        return Dedicated(env)
    if kind == "fdma":
        if n_scheduled is None:
            raise ConfigError("medium.n_scheduled", "FDMA needs the number of clients scheduled in the round")
        return FDMA(env, n_scheduled)
    if kind == "tdma":
        return TDMA(env)
    if kind == "processor_sharing":
        return ProcessorSharing(env)
    raise ConfigError("medium.kind", f"unknown medium {kind!r} (allowed: {', '.join(MEDIA)})")


def cut_transfer_values(now: float, nbytes: int, t0: float, prog: Progress) -> tuple[int, float, float]:
    """Bytes sent, wait and airtime of a transfer of ``nbytes`` requested at ``t0`` and cut at ``now``: the one
    rule for both engines (the vector engine's :class:`fedsim.system.chains.ChainRound` cuts its chains by it)."""
    bits = 8.0 * nbytes
    sent = nbytes if prog.done else int(prog.bits_sent(now, bits) // 8)
    airtime = prog.airtime(now, bits)
    if prog.start is None:
        wait = now - t0
    elif prog.sent_fn is not None:  # shared in time: the rest of the sojourn is the slowdown
        wait = max(0.0, (now - t0) - airtime)
    else:
        wait = prog.start - t0
    return sent, wait, airtime
