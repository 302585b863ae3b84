"""A server with ``c`` identical workers and a FIFO queue (an M/G/c station when arrivals are Poisson).

Waiting and service are recorded separately for every request, and the station keeps time-weighted
queue length and busy-worker counts, so its statistics can be held against queueing theory
(Kleinrock, *Queueing Systems* vol. 1: M/M/1 W_q = rho / (mu - lambda); Pollaczek-Khinchine for M/D/1
W_q = rho / (2 mu (1 - rho)); Erlang C for M/M/c).
"""
from __future__ import annotations

from array import array
from typing import Any, Generator, NamedTuple

import numpy as np
import simpy

from fedsim.errors import ConfigError


class ServiceRecord(NamedTuple):
    """One request: when it arrived, started and ended; ``wait`` is queueing only, ``service`` is work.

    A named tuple: immutable, and made once per request for a fraction of a frozen dataclass's cost."""

    what: str
    client: Any
    arrival: float
    start: float
    end: float
    queue_on_arrival: int

    @property
    def wait(self) -> float:
        return self.start - self.arrival

    @property
    def service(self) -> float:
        return self.end - self.start

    @property
    def sojourn(self) -> float:
        return self.end - self.arrival


class Server:
    """``workers`` parallel workers behind one FIFO queue, wrapping ``simpy.Resource``.

    Use inside a SimPy process: ``rec = yield from server.serve(0.3, what="aggregate", client=4)``
    (or ``yield env.process(server.serve(...))``).  The service time is fixed by the caller when the
    request is made; if it depends on the state at the moment service starts (e.g. the current model
    version), pass a callable ``service_time(start_time) -> seconds``.
    """

    def __init__(self, env: simpy.Environment, workers: int = 1, name: str = "server") -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ConfigError("server.workers", f"must be an integer >= 1, got {workers!r}")
        self.env = env
        self.workers = workers
        self.name = name
        self.resource = simpy.Resource(env, capacity=workers)
        self.reset_stats()

    # -- time-weighted accumulators ---------------------------------------------------------------
    def reset_stats(self) -> None:
        """Forget everything measured so far (e.g. after a warm-up period); state in flight is kept."""
        self._t0 = self.env.now
        self._last = self.env.now
        self._q_area = 0.0
        self._busy_area = 0.0
        self._max_queue = len(self.resource.queue)
        # waits and services as packed doubles (16 bytes a request, not a record object each), so memory
        # stays small over millions of requests; the records themselves go to the trace
        self._waits = array("d")
        self._services = array("d")

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            self._q_area += dt * len(self.resource.queue)
            self._busy_area += dt * self.resource.count
            self._last = now

    @property
    def queue_length(self) -> int:
        return len(self.resource.queue)

    @property
    def busy(self) -> int:
        return self.resource.count

    def serve(self, service_time, *, what: str = "", client: Any = None,
              progress: list | None = None) -> Generator[simpy.Event, Any, ServiceRecord]:
        """Queue, then hold a worker for ``service_time`` seconds; returns the ServiceRecord.  ``progress``, when
        given, gets ``[arrival, queue on arrival]`` and then the service start appended as they happen (why: a
        request cut by an interrupt or the run's end is still recorded with the time it held a worker)."""
        env = self.env
        resource = self.resource
        self._advance()
        arrival = env.now
        q0 = len(resource.queue)
        req = resource.request()
        if len(resource.queue) > self._max_queue:
            self._max_queue = len(resource.queue)
        if progress is not None:
            progress[:] = [arrival, q0]
        try:
            yield req
            self._advance()
            start = env.now
            if progress is not None:
                progress.append(start)
            dur = service_time(start) if callable(service_time) else service_time
            if dur < 0:
                raise ConfigError("server.service_time", f"must be >= 0, got {dur!r}")
            # the queue shrank and a worker became busy at `start`; accumulators were advanced first
            yield env.timeout(dur)
            end = env.now
        finally:
            self._advance()  # at `end` (or where an interrupt left the request), before the worker is freed
            req.cancel()  # a request interrupted while queued leaves the queue (else it would later hold a worker)
            resource.release(req)
        self._waits.append(start - arrival)
        self._services.append(end - start)
        return ServiceRecord(what, client, arrival, start, end, q0)

    def summary(self) -> dict[str, float]:
        """Statistics since the last reset: waits, services, time-averaged queue length and utilisation."""
        self._advance()
        span = self.env.now - self._t0
        waits = np.frombuffer(self._waits, dtype=np.float64) if self._waits else np.zeros(0)
        services = np.frombuffer(self._services, dtype=np.float64) if self._services else np.zeros(0)
        n = len(self._waits)
        return {
            "requests": n,
            "mean_wait": float(waits.mean()) if n else 0.0,
            "p95_wait": float(np.quantile(waits, 0.95)) if n else 0.0,
            "max_wait": float(waits.max()) if n else 0.0,
            "mean_service": float(services.mean()) if n else 0.0,
            "mean_sojourn": float((waits + services).mean()) if n else 0.0,
            "mean_queue_length": self._q_area / span if span > 0 else 0.0,
            "max_queue_length": float(self._max_queue),
            "utilisation": self._busy_area / (span * self.workers) if span > 0 else 0.0,
            "span": span,
            "workers": float(self.workers),
        }


# ----------------------------------------------------------------------------------------- theory

def mm1_wait(lam: float, mu: float) -> float:
    """Mean waiting time in queue of M/M/1: rho / (mu - lambda)."""
    rho = lam / mu
    return rho / (mu - lam)


def md1_wait(lam: float, mu: float) -> float:
    """Mean waiting time of M/D/1 (Pollaczek-Khinchine with zero service variance): rho / (2 mu (1 - rho))."""
    rho = lam / mu
    return rho / (2 * mu * (1 - rho))


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load a = lambda / mu (< c)."""
    from math import factorial

    rho = a / c
    top = a**c / factorial(c) / (1 - rho)
    return top / (sum(a**k / factorial(k) for k in range(c)) + top)


def mmc_wait(lam: float, mu: float, c: int) -> float:
    """Mean waiting time in queue of M/M/c: C(c, a) / (c mu - lambda)."""
    return erlang_c(c, lam / mu) / (c * mu - lam)
