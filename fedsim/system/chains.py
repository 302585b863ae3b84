"""A round of independent client chains (download → compute → upload) in closed form, for the vector engine.

When every scheduled client downloads the same bytes at the same moment, computes on its own device and
uploads on its own link or sub-band (dedicated links, FDMA), nothing one client does changes another's times:
the round's times follow from each client's rates, FLOPs and the link latency as arrays.  The world builds a
:class:`ChainRound` (:meth:`fedsim.system.world.World.client_chains`) and is the one that writes its
``download``, ``compute`` and ``upload`` records and charges its bytes, busy time and energy, the same bytes and
the same charges as its SimPy processes would, in SimPy's order.

SimPy processes events by (time, priority, insertion order), and an event is inserted when the event before
it in its process is processed, so among equal times the order is that of the chains of times back to the
round's start: each record is sorted by that chain (:func:`event_order`).
"""
from __future__ import annotations

from typing import Any

import numpy as np


def _chains(t0: float, a1: np.ndarray, t1: np.ndarray, t2: np.ndarray, a3: np.ndarray, t3: np.ndarray,
            latency: bool, fdma_down: bool, fdma_up: bool) -> list[list[tuple[Any, int]]]:
    """Per record kind (download, compute, upload), the chain of (time, priority) of the SimPy events from
    the one that writes the record back to the client process's start (URGENT, priority 0); every other
    link is a NORMAL (1) event: a timeout, or a resource request granted at once."""
    root = [(t0, 0)]
    down = [(t1, 1)] + ([(a1, 1)] if latency else []) + ([(t0, 1)] if fdma_down else []) + root
    comp = [(t2, 1), (t1, 1)] + down
    up = [(t3, 1)] + ([(a3, 1)] if latency else []) + ([(t2, 1)] if fdma_up else []) + comp
    return [down, comp, up]


def event_order(chains: list[list[tuple[Any, int]]], clients: np.ndarray) -> np.ndarray:
    """Positions of the records (kinds laid end to end) in SimPy's processing order: lexicographic in each
    record's chain of (time, priority), then the client's place in the dispatch order.  Two chains can
    only agree up to where one ends if both end there (a start event closes every chain), so padding the
    shorter ones does not change the order."""
    n = len(clients)
    depth = max(len(c) for c in chains)
    keys: list[np.ndarray] = [np.tile(np.arange(n), len(chains))]  # dispatch order (clients are sorted)
    for level in reversed(range(depth)):
        times, prios = [], []
        for chain in chains:
            t, p = chain[level] if level < len(chain) else (0.0, 0)
            times.append(np.broadcast_to(np.asarray(t, dtype=np.float64), (n,)))
            prios.append(np.full(n, p, dtype=np.int8))
        keys.append(np.concatenate(prios))
        keys.append(np.concatenate(times))
    return np.lexsort(keys)


def _rates(bits: float, airtime: np.ndarray) -> Any:
    """``rate_bps`` of each transfer record: bits / airtime, or None (null) where the airtime is zero."""
    if bool((airtime > 0).all()):
        return bits / airtime
    return [bits / a if a > 0 else None for a in airtime.tolist()]


class ChainRound:
    """One round of client chains started at ``t0`` (the clock as it is: an int at the run's start, which the records
    keep): every record's time (:attr:`times`, in SimPy's order) and
    :meth:`write`, which writes records ``[lo, hi)`` of that order and charges what they did.  ``world`` is the
    :class:`fedsim.system.world.World` that builds it (typed loosely: this module sits below the world)."""

    def __init__(self, world: Any, clients: np.ndarray, t0: float, nbytes: int, flops: np.ndarray,
                 samples: np.ndarray, steps: np.ndarray, version: int, latency: float) -> None:
        c = np.asarray(clients, dtype=np.int64)
        n = len(c)
        bits = 8.0 * nbytes
        down_access, down_share = world.transfer_share("down")
        up_access, up_share = world.transfer_share("up")
        # download: the medium's airtime, then the link latency
        r_down = world.transfer_rates("down", c, down_share, np.full(n, float(t0)))
        air_d = np.where(np.isfinite(r_down), bits / r_down, 0.0)
        a1 = t0 + air_d
        t1 = a1 + latency if latency > 0 else a1
        # compute on the client's own device (free: one task per client per round)
        dt = world.compute_seconds_many(c, flops, samples)
        t2 = t1 + dt
        r_up = world.transfer_rates("up", c, up_share, t2)
        air_u = np.where(np.isfinite(r_up), bits / r_up, 0.0)
        a3 = t2 + air_u
        t3 = a3 + latency if latency > 0 else a3
        # what the records say: a slotted medium (FDMA) reports airtime as end - start
        airtime_d = (a1 - t0) if down_access == "fdma" else air_d
        airtime_u = (a3 - t2) if up_access == "fdma" else air_u
        power = world.compute_power_many(c)
        e_comp = dt * power
        tx_w = world.tx_power_many(c)
        e_up = np.where(airtime_u > 0, airtime_u * tx_w, 0.0)
        # each chain's task: the id of the client's dispatch this round (the world's ``task_of``, set by then)
        task: Any = [world.task_of[i] for i in c.tolist()]
        if None not in task:
            task = np.asarray(task, dtype=np.int64)
        self._task = task
        self._world, self._c, self._n, self._nbytes = world, c, n, nbytes
        self._dt, self._power, self._airtime_u, self._tx_w = dt, power, airtime_u, tx_w
        self._t0, self._version, self._flops = t0, version, flops
        self._r_down, self._r_up, self._a1, self._a3, self._t1, self._t2 = r_down, r_up, a1, a3, t1, t2
        #: which records (download, compute, upload laid end to end) have been written
        self.written = np.zeros(3 * n, dtype=bool)
        #: the world's key for this round while some of its work is under way
        self.open_key: int | None = None
        self._parts = [
            ("download", t1, {"client": c, "start": t0, "end": t1, "bytes": nbytes,
                              # start - request, as the medium writes it: zero, but of the clock's type
                              # (an int at the run's start), where a dedicated link writes 0.0
                              "wait": (t0 - t0) if down_access == "fdma" else 0.0,
                              "airtime": airtime_d, "rate_bps": _rates(bits, airtime_d), "energy": 0.0, "version": version,
                              "task": task}),
            ("compute", t2, {"client": c, "start": t1, "end": t2, "wait": 0.0, "flops": flops, "steps": steps,
                             "what": "train", "energy": e_comp, "task": task}),
            ("upload", t3, {"client": c, "start": t2, "end": t3, "bytes": nbytes, "wait": 0.0,
                            "airtime": airtime_u, "rate_bps": _rates(bits, airtime_u), "energy": e_up, "task": task}),
        ]
        self._order = event_order(_chains(t0, a1, t1, t2, a3, t3, latency > 0, down_access == "fdma",
                                          up_access == "fdma"), c)
        #: every record's time, in the order :meth:`write` writes them
        self.times: np.ndarray = np.concatenate([t1, t2, t3])[self._order]

    def __len__(self) -> int:
        return len(self._order)

    def write(self, lo: int, hi: int) -> None:
        """Write records ``[lo, hi)`` (in :attr:`times` order) and charge what they did, as the event engine
        charges it when they happen: a download record counts its bytes; a compute record ends the device's busy
        time; an upload record counts its bytes and ends the radio's airtime."""
        if hi <= lo:
            return
        world, c, n = self._world, self._c, self._n
        written = self._order[lo:hi]
        world.trace.write_columns(self._parts, written)
        self.written[written] = True
        if self.open_key is not None and bool(self.written.all()):
            world._open.pop(self.open_key, None)
            self.open_key = None
        world.bytes_down += self._nbytes * int((written < n).sum())
        comp = written[(written >= n) & (written < 2 * n)] - n
        if len(comp):
            world.busy_s[c[comp]] += self._dt[comp]
            world.energy.compute_many(c[comp], self._dt[comp], self._power[comp])
        up = written[written >= 2 * n] - 2 * n
        world.bytes_up += self._nbytes * len(up)
        up = up[self._airtime_u[up] > 0]
        if len(up):
            world.energy.transmit_many(c[up], self._airtime_u[up], self._tx_w[up])

    def cut(self, reason: str) -> None:
        """Write a cut record for every chain whose current step is under way now (the run ended mid-round),
        with the values and in the order the event engine's processes would write them: a step is opened by
        the record before it (a download by the round's start), so the open steps are ordered by that."""
        from fedsim.system.medium import Progress
        from fedsim.system.medium import cut_transfer_values

        world, c, n = self._world, self._c, self._n
        self.open_key = None
        now = world.env.now
        w = self.written
        down_open, comp_open, up_open = ~w[:n], w[:n] & ~w[n:2 * n], w[n:2 * n] & ~w[2 * n:]
        pos = np.empty(3 * n, dtype=np.int64)
        pos[self._order] = np.arange(3 * n)
        key = np.where(down_open, -1, np.where(comp_open, pos[:n], pos[n:2 * n]))
        idx = np.nonzero(down_open | comp_open | up_open)[0]
        idx = idx[np.lexsort((idx, key[idx]))]
        nbytes = self._nbytes
        for i in idx.tolist():
            client = int(c[i])
            if comp_open[i]:
                start, dt = float(self._t1[i]), float(self._dt[i])
                spent = min(now - start, dt)
                flops = float(self._flops[i])
                done = flops * (spent / dt) if dt > 0 else flops
                world.busy_s[client] += spent
                joules = world.energy.compute(client, spent, float(self._power[i]))
                world.trace.put(world._h_compute_cut, (now, client, start, now, start - start, done, None, "train",
                                                       joules, self._task[i], reason, flops))
                continue
            up = bool(up_open[i])
            prog = Progress()
            t0 = float(self._t2[i]) if up else self._t0
            prog.start, prog.rate = t0, float((self._r_up if up else self._r_down)[i])
            prog.done = bool(now >= (self._a3 if up else self._a1)[i])
            sent, wait, airtime = cut_transfer_values(now, nbytes, t0, prog)
            joules = 0.0
            if up:
                world.bytes_up += sent
                if airtime > 0:
                    joules = world.energy.transmit(client, airtime, float(self._tx_w[i]))
            else:
                world.bytes_down += sent
            handle = world._h_cut[world._h_upload if up else world._h_download]
            extra = (self._task[i],) if up else (self._version, self._task[i])
            world.trace.put(handle, (now, client, t0, now, sent, wait, airtime,
                                     (8.0 * sent / airtime) if airtime > 0 else None, joules, *extra, reason, nbytes))
