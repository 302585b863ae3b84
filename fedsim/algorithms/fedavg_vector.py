"""FedAvg rounds computed in numpy: the vector engine for systems-only studies of 10^5–10^6 devices.

In a systems-only FedAvg round without a deadline, every sampled client runs the same chain on its own
resources — download, compute, upload — and nothing one client does changes another's times: dedicated
links, or FDMA with one sub-band per scheduled client, and a device per client.  So the round's times
follow in closed form from each client's rate, FLOPs and the link latency, and the event engine's
millions of SimPy steps can be replaced by array arithmetic, with the trace written in columns
(:meth:`fedsim.sim.trace.Trace.write_columns`).

The result is the event engine's trace, byte for byte (tested on dedicated and FDMA links, fixed and
per-client rates, path-loss channels with fading, jitter, latency, several rounds, sampled and full
participation): the same draws from the same named streams, the same float operations in the same
order, and records in SimPy's order.  SimPy processes events by (time, priority, insertion order), and
an event is inserted when the event before it in its process is processed, so among equal times the
order is that of the chains of times back to the round's start; the engine sorts each record by that
chain (``_chains``).  The server's aggregation, the stop rules and the evaluation clock stay SimPy
processes: records are written up to the next event another process has scheduled, and the clock then
advances to it, so evaluations and a time limit cut the round where they would.  One difference is
documented: when another process's event falls at exactly the same instant as a client's, the engine
writes the client's records after it (the event engine orders the two by when each was scheduled).

Systems-only runs train nothing, so the global model does not change (the event engine's average of
identical models is that model again).  What the engine does not cover it refuses, before the run
(``FedAvg`` checks ``engine: vector``): training, a deadline, availability models other than ``always``
(going offline interrupts a task), the hierarchical topology, and TDMA or processor-sharing access
(clients wait for each other there).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator

import numpy as np
import simpy

from fedsim.errors import ConfigError
from fedsim.learn.train import num_steps, samples_processed

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.algorithms.base import SyncRounds
    from fedsim.scenario import Scenario

#: access models under which clients never wait for each other within a FedAvg round
VECTOR_ACCESS = ("dedicated", "fdma")


def check_vector(scenario: "Scenario", deadline_s: float | None) -> None:
    """Refuse, with one line, a scenario the vector engine does not cover."""
    problems = []
    if not scenario.train.systems_only:
        problems.append(("train.systems_only", "it costs training it does not run: set train.systems_only: true"))
    if deadline_s is not None:
        problems.append(("algorithm.deadline_s", "a deadline interrupts stragglers; leave it unset or use engine: event"))
    if scenario.availability.model != "always":
        problems.append(("availability.model", f"got {scenario.availability.model!r}; only 'always' (clients going "
                                               "offline interrupt tasks: use engine: event)"))
    net = scenario.network
    if net.topology.kind != "star":
        problems.append(("network.topology.kind", f"got {net.topology.kind!r}; only 'star' (use engine: event)"))
    for name, access in (("network.access", net.access), ("network.downlink_access", net.downlink_access)):
        if access not in VECTOR_ACCESS:
            problems.append((name, f"got {access!r}; the vector engine supports {' and '.join(VECTOR_ACCESS)} (clients "
                                   "queue for each other under the others: use engine: event)"))
    if problems:
        field, why = problems[0]
        raise ConfigError(field, f"{why} (algorithm.engine: vector)")


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


def vector_rounds(algo: "SyncRounds") -> Generator[simpy.events.Event, Any, None]:
    """FedAvg's round loop with each round's client chains computed in numpy (module docstring)."""
    ctx, env, cfg = algo.ctx, algo.ctx.env, algo.cfg
    world, trace = ctx.world, ctx.trace
    cost_of: dict[int, tuple[int, int]] = {}  # samples held -> (SGD steps, samples processed), as _train counts them

    def costs(clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sizes = np.fromiter((len(ctx.parts[i]) for i in clients.tolist()), dtype=np.int64, count=len(clients))
        uniq, inv = np.unique(sizes, return_inverse=True)
        for k in uniq.tolist():
            if k not in cost_of:
                steps = num_steps(k, ctx.training.sgd)
                cost_of[k] = (steps, samples_processed(k, steps, ctx.training.sgd.batch_size))
        table = np.array([cost_of[k] for k in uniq.tolist()], dtype=np.int64).reshape(-1, 2)
        return table[inv, 0], table[inv, 1]

    latency = float(ctx.scenario.network.latency_s)
    nbytes = int(ctx.training.model_bytes)
    bits = 8.0 * nbytes
    rnd = 0
    while not ctx.done.triggered:
        rnd += 1
        t0 = env.now
        base = ctx.global_state
        clients = algo.sample_clients(cfg.clients_per_round, ("fedavg", "select", rnd))
        if not clients:
            trace.emit(env.now, "round", round=rnd, start=t0, end=env.now, clients=[], dropped=[])
            yield env.timeout(cfg.retry_s)
            continue
        world.schedule(len(clients))
        c = np.asarray(clients, dtype=np.int64)
        n = len(c)
        version = ctx.version
        trace.write_columns([("dispatch", np.full(n, float(t0)), {"client": c, "version": version, "round": rnd})])
        steps, samples = costs(c)
        flops = ctx.training.flop_cost.total * samples
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
        world.bytes_down += nbytes * n  # every download starts now

        def account(written: np.ndarray) -> None:
            """Charge what the records just written did, as the event engine charges it when they happen:
            a compute record ends the device's busy time and starts the upload (bytes); an upload record
            ends the radio's airtime."""
            comp = written[(written >= n) & (written < 2 * n)] - n
            if len(comp):
                world.busy_s[c[comp]] += dt[comp]
                world.energy.compute_many(c[comp], dt[comp], power[comp])
                world.bytes_up += nbytes * len(comp)
            up = written[written >= 2 * n] - 2 * n
            up = up[airtime_u[up] > 0]
            if len(up):
                world.energy.transmit_many(c[up], airtime_u[up], tx_w[up])

        parts = [
            ("download", t1, {"client": c, "start": t0, "end": t1, "bytes": nbytes,
                              # start - request, as the medium writes it: zero, but of the clock's type
                              # (an int at the run's start), where a dedicated link writes 0.0
                              "wait": (t0 - t0) if down_access == "fdma" else 0.0,
                              "airtime": airtime_d, "rate_bps": _rates(bits, airtime_d), "energy": 0.0, "version": version}),
            ("compute", t2, {"client": c, "start": t1, "end": t2, "wait": 0.0, "flops": flops, "steps": steps,
                             "what": "train", "energy": e_comp}),
            ("upload", t3, {"client": c, "start": t2, "end": t3, "bytes": nbytes, "wait": 0.0,
                            "airtime": airtime_u, "rate_bps": _rates(bits, airtime_u), "energy": e_up}),
        ]
        order = event_order(_chains(t0, a1, t1, t2, a3, t3, latency > 0, down_access == "fdma", up_access == "fdma"), c)
        times = np.concatenate([t1, t2, t3])[order]
        # write up to the next event another process (evaluation clock, time limit) has scheduled, then let it run
        i = 0

        def write(upto: int) -> int:
            if upto > i:
                trace.write_columns(parts, order[i:upto])
                account(order[i:upto])
            return max(i, upto)

        while i < len(order):
            nxt = env.peek()
            i = write(int(np.searchsorted(times, nxt, side="left")))
            if i < len(order):
                yield env.timeout(max(0.0, nxt - env.now))
                i = write(int(np.searchsorted(times, env.now, side="right")))
        t_end = float(times[-1])
        if t_end > env.now:
            yield env.timeout(t_end - env.now)
        if ctx.done.triggered:
            return
        yield from world.serve(None, ctx.aggregation_service_time(n), what="aggregate")
        w = samples.astype(np.float64)
        total = sum(w.tolist())  # left to right, as the event engine's rule sums its updates' weights
        ctx.versions.apply_columns(base, c, w / total, np.full(n, version), np.full(n, float(t0)), round_=rnd,
                                   round_record={"start": t0, "end": env.now, "clients": clients, "dropped": []})


def _rates(bits: float, airtime: np.ndarray) -> Any:
    """``rate_bps`` of each transfer record: bits / airtime, or None (null) where the airtime is zero."""
    if bool((airtime > 0).all()):
        return bits / airtime
    return [bits / a if a > 0 else None for a in airtime.tolist()]
