"""FedAvg rounds computed in numpy: the vector engine for systems-only studies of 10^5–10^6 devices.

In a systems-only FedAvg round without a deadline, every sampled client runs the same chain on its own
resources — download, compute, upload — and nothing one client does changes another's times: dedicated
links, or FDMA with one sub-band per scheduled client, and a device per client.  So the round's times
follow in closed form from each client's rate, FLOPs and the link latency, and the event engine's
millions of SimPy steps can be replaced by array arithmetic, with the records written in columns by the
world (:meth:`fedsim.system.world.World.client_chains`) and the version keeper
(:meth:`fedsim.versions.VersionKeeper.record_dispatches`, :meth:`~fedsim.versions.VersionKeeper.apply_columns`).

The result is the event engine's trace, byte for byte (tested on dedicated and FDMA links, fixed and
per-client rates, path-loss channels with fading, jitter, latency, several rounds, sampled and full
participation): the same draws from the same named streams, the same float operations in the same
order, and records in SimPy's order.  SimPy processes events by (time, priority, insertion order), and
an event is inserted when the event before it in its process is processed, so among equal times the
order is that of the chains of times back to the round's start; the world sorts each record by that
chain (``fedsim.system.chains``).  The server's aggregation, the stop rules and the evaluation clock stay SimPy
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
from fedsim.learn.sgd import num_steps, samples_processed

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.algorithms.loops.sync_rounds import SyncRounds
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


def vector_rounds(algo: "SyncRounds") -> Generator[simpy.events.Event, Any, None]:
    """FedAvg's round loop with each round's client chains computed in numpy (module docstring)."""
    ctx, env, cfg = algo.ctx, algo.ctx.env, algo.cfg
    world = ctx.world
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

    nbytes = int(ctx.training.model_bytes)
    rnd = 0
    while not ctx.done.triggered:
        rnd += 1
        t0 = env.now
        base = ctx.global_state
        clients = algo.sample_clients(cfg.clients_per_round, ("fedavg", "select", rnd))
        if not clients:
            ctx.versions.record_round(rnd, start=t0, clients=[], dropped=[])
            yield env.timeout(cfg.retry_s)
            continue
        world.schedule(len(clients))
        c = np.asarray(clients, dtype=np.int64)
        n = len(c)
        version = ctx.version
        ctx.versions.record_dispatches(c, version, rnd)
        steps, samples = costs(c)
        flops = ctx.training.flop_cost.total * samples
        chains = world.client_chains(c, nbytes, flops, samples, steps, version=version)
        times = chains.times
        # write up to the next event another process (evaluation clock, time limit) has scheduled, then let it run
        i = 0

        def write(upto: int) -> int:
            chains.write(i, upto)
            return max(i, upto)

        while i < len(times):
            nxt = env.peek()
            i = write(int(np.searchsorted(times, nxt, side="left")))
            if i < len(times):
                yield env.timeout(max(0.0, nxt - env.now))
                i = write(int(np.searchsorted(times, env.now, side="right")))
        t_end = float(times[-1])
        if t_end > env.now:
            yield env.timeout(t_end - env.now)
        if ctx.done.triggered:
            return
        yield from ctx.serve(None, ctx.aggregation_service_time(n), what="aggregate")
        w = samples.astype(np.float64)
        total = sum(w.tolist())  # left to right, as the event engine's rule sums its updates' weights
        ctx.versions.apply_columns(base, c, w / total, np.full(n, version), np.full(n, float(t0)), round_=rnd,
                                   round_record={"start": t0, "end": env.now, "clients": clients, "dropped": []})
