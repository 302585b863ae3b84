"""When clients are reachable: always on, Bernoulli per round, exponential on/off sessions, or a trace.

Every model answers ``is_online(client, t)`` and ``next_change(client, t)`` (the first time after t at
which the answer flips, ``inf`` if never), and ``available_in_round(client, round, t)`` for round-based
schedulers.  Online intervals are half-open, ``[start, end)``.  Randomness comes from the named stream
``("availability", client)``, one per client, consumed in order of time (or round), and is generated
lazily: asking about client 9 never changes client 2's history.
"""
from __future__ import annotations

import bisect
import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams

AVAILABILITY_MODELS = ("always", "bernoulli", "exponential", "trace")


class Availability:
    """Interface of an availability model."""

    def is_online(self, client: Any, t: float) -> bool:
        raise NotImplementedError

    def next_change(self, client: Any, t: float) -> float:
        raise NotImplementedError

    def available_in_round(self, client: Any, round: int, t: float) -> bool:
        """Whether ``client`` can be scheduled in ``round`` starting at time ``t``."""
        return self.is_online(client, t)

    def online_intervals(self, client: Any, t0: float, t1: float) -> list[tuple[float, float]]:
        """Online intervals clipped to [t0, t1), built from ``is_online`` and ``next_change``."""
        out, t = [], t0
        while t < t1:
            nxt = min(self.next_change(client, t), t1)
            if self.is_online(client, t):
                out.append((t, nxt))
            if nxt <= t:
                break
            t = nxt
        return out


class AlwaysOn(Availability):
    """Every client is always reachable (the default, as in most FL papers)."""

    def is_online(self, client, t):
        return True

    def next_change(self, client, t):
        return math.inf


class BernoulliPerRound(Availability):
    """Each client is available in each round independently with probability ``p`` (e.g. FedAvg's C).

    ``slot_s`` maps time to rounds for ``is_online`` (round = floor(t / slot_s)); without it only
    ``available_in_round`` is meaningful.
    """

    def __init__(self, p: float, streams: Streams, slot_s: float | None = None) -> None:
        if not 0.0 <= p <= 1.0:
            raise ConfigError("availability.p", f"must be in [0, 1], got {p!r}")
        if slot_s is not None and slot_s <= 0:
            raise ConfigError("availability.slot_s", f"must be positive, got {slot_s!r}")
        self.p, self.streams, self.slot_s = p, streams, slot_s
        self._draws: dict[Any, list[float]] = {}
        self._rngs: dict[Any, Any] = {}

    def _u(self, client, round: int) -> float:
        if round < 0:
            raise ConfigError("availability.round", f"must be >= 0, got {round!r}")
        draws = self._draws.setdefault(client, [])
        if client not in self._rngs:
            self._rngs[client] = self.streams.numpy("availability", client)
        while len(draws) <= round:
            draws.append(float(self._rngs[client].random()))
        return draws[round]

    def available_in_round(self, client, round, t=0.0):
        return self._u(client, int(round)) < self.p

    def _slot(self, t: float) -> int:
        if self.slot_s is None:
            raise ConfigError("availability.slot_s", "Bernoulli availability needs slot_s to answer questions about time")
        return int(math.floor(t / self.slot_s))

    def is_online(self, client, t):
        return self.available_in_round(client, self._slot(t))

    def next_change(self, client, t, horizon_rounds: int = 100_000):
        k = self._slot(t)
        now = self.available_in_round(client, k)
        for j in range(k + 1, k + 1 + horizon_rounds):
            if self.available_in_round(client, j) != now:
                return j * self.slot_s
        return math.inf


class _Intervals(Availability):
    """Shared logic for models given as sorted change times with a known initial state."""

    def _changes(self, client, t: float) -> tuple[bool, list[float]]:
        raise NotImplementedError

    def is_online(self, client, t):
        start_online, changes = self._changes(client, t)
        n = bisect.bisect_right(changes, t)  # changes at or before t have happened
        return start_online ^ (n % 2 == 1)

    def next_change(self, client, t):
        _, changes = self._changes(client, t)
        i = bisect.bisect_right(changes, t)
        return changes[i] if i < len(changes) else math.inf


class ExponentialOnOff(_Intervals):
    """Alternating online/offline sessions with exponential lengths (means ``mean_on_s``, ``mean_off_s``).

    The state at t = 0 is online with the stationary probability mean_on / (mean_on + mean_off); by
    memorylessness the first session is then exponential with the same mean, so the process is
    stationary from t = 0.
    """

    def __init__(self, mean_on_s: float, mean_off_s: float, streams: Streams) -> None:
        if not (mean_on_s > 0 and mean_off_s > 0):
            raise ConfigError("availability.mean_on_s", f"mean session lengths must be positive, got {mean_on_s!r}, {mean_off_s!r}")
        self.mean_on, self.mean_off, self.streams = mean_on_s, mean_off_s, streams
        self._state: dict[Any, tuple[bool, list[float], Any]] = {}

    def _changes(self, client, t):
        if client not in self._state:
            rng = self.streams.numpy("availability", client)
            online = bool(rng.random() < self.mean_on / (self.mean_on + self.mean_off))
            self._state[client] = (online, [], rng)
        online, changes, rng = self._state[client]
        while not changes or changes[-1] <= t:
            state_now = online ^ (len(changes) % 2 == 1)
            last = changes[-1] if changes else 0.0
            changes.append(last + float(rng.exponential(self.mean_on if state_now else self.mean_off)))
        return online, changes


class TraceAvailability(_Intervals):
    """Online intervals read from a CSV file ``client,start,end`` (seconds); clients absent are offline.

    Overlapping or touching intervals of a client are merged.
    """

    def __init__(self, intervals: Mapping[Any, list[tuple[float, float]]]) -> None:
        self._by_client: dict[Any, list[float]] = {}
        for client, ivs in intervals.items():
            merged: list[list[float]] = []
            for s, e in sorted(ivs):
                if e < s:
                    raise ConfigError("availability.path", f"client {client}: interval end {e} before start {s}")
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            self._by_client[client] = [x for iv in merged if iv[1] > iv[0] for x in iv]

    @classmethod
    def from_csv(cls, path: str | Path) -> "TraceAvailability":
        import io

        from fedsim.config import read_text

        p = Path(path)
        text = read_text(p, "availability.path", "CSV file (client,start,end)")
        ivs: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not {"client", "start", "end"} <= set(reader.fieldnames or []):
            raise ConfigError("availability.path", f"{p.name}: needs columns client,start,end, found {str(reader.fieldnames)[:200]}")
        for i, row in enumerate(reader):
            try:
                c = int(row["client"]) if row["client"].strip().lstrip("-").isdigit() else row["client"]
                start, end = float(row["start"]), float(row["end"])
            except (ValueError, TypeError, AttributeError):  # TypeError/AttributeError: a short row
                raise ConfigError("availability.path", f"{p.name}: row {i + 2} is not client,start,end numbers: "
                                  f"{str(row)[:200]}") from None
            if not (math.isfinite(start) and math.isfinite(end)):
                raise ConfigError("availability.path", f"{p.name}: row {i + 2} has a non-finite time: {str(row)[:200]}")
            ivs[c].append((start, end))
        return cls(ivs)

    def _changes(self, client, t):
        return False, self._by_client.get(client, [])

    def check_clients(self, num_clients: int, field: str = "availability.path") -> list[str]:
        """Hold the trace against the run's clients ``0..num_clients-1``: a trace in which none of them is
        ever online leaves the run nothing to do (a ConfigError, never a run that ends "ok" with no update);
        ids naming no client of the run, or clients never online, are legitimate (a trace recorded for a
        larger population, a client that stays away) and returned as one warning line each."""
        named = list(self._by_client)
        real = [c for c in named if isinstance(c, int) and 0 <= c < num_clients]
        online = [c for c in real if self._by_client[c]]
        foreign = [c for c in named if not (isinstance(c, int) and 0 <= c < num_clients)]

        def some(ids: list[Any]) -> str:
            shown = ", ".join(str(c)[:40] for c in sorted(ids, key=str)[:5])
            return shown + (f", … ({len(ids):,} in all)" if len(ids) > 5 else "")

        if not online:
            what = (f"names no client of this run (ids {some(foreign)}; the run's clients are 0..{num_clients - 1})"
                    if not real else f"has no online interval for any of the clients it names ({some(real)})")
            raise ConfigError(field, f"the trace {what}, so no client is ever reachable and the run would do nothing "
                              f"(allowed: a trace with online intervals client,start,end for clients 0..{num_clients - 1})")
        lines = []
        if foreign:
            lines.append(f"{field}: the trace names {len(foreign):,} ids that are no client of this run ({some(foreign)}; "
                         f"clients are 0..{num_clients - 1}); their intervals are ignored")
        never = num_clients - len(online)
        if never:
            lines.append(f"{field}: {never:,} of {num_clients:,} clients are never online in the trace (absent or "
                         "with only empty intervals); they never train")
        return lines


def make_availability(kind: str, streams: Streams | None = None, **kw) -> Availability:
    """An availability model by name: always | bernoulli(p, slot_s) | exponential(mean_on_s, mean_off_s) | trace(path)."""
    if kind == "always":
        return AlwaysOn()
    if kind in ("bernoulli", "exponential") and streams is None:
        raise ConfigError("availability", f"model {kind!r} needs named streams")
    if kind == "bernoulli":
        return BernoulliPerRound(streams=streams, **kw)
    if kind == "exponential":
        return ExponentialOnOff(streams=streams, **kw)
    if kind == "trace":
        return TraceAvailability.from_csv(kw["path"])
    raise ConfigError("availability.model", f"unknown model {kind!r} (allowed: {', '.join(AVAILABILITY_MODELS)})")
