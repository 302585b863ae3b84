"""FedAvg (McMahan et al., AISTATS 2017): synchronous rounds over C sampled clients.

A round dispatches the current model to C clients sampled uniformly without replacement; it ends when
all return or, with ``deadline_s``, at the deadline, when the stragglers are interrupted and recorded as
dropped.  The server then queues for an aggregation worker, averages the updates weighted by the
samples each client processed, and installs the new version.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator

import simpy

from fedsim.algorithms.base import Algorithm, TaskCounter, Update
from fedsim.config import positive
from fedsim.learn.state import State, masked_weighted_average, state_axpy, state_sub


def fedavg_rule(updates: list[Update], base: State, server_lr: float = 1.0) -> tuple[State, list[float]]:
    """FedAvg's server rule: the masked weighted average of the updates (weights = samples processed),
    moved by ``server_lr`` from ``base`` when it is not 1.  Returns the new state and each update's share."""
    avg = masked_weighted_average(updates, base)
    new = avg if server_lr == 1.0 else state_axpy(base, state_sub(avg, base), server_lr)
    total = sum(float(u.weight) for u in updates)
    return new, [float(u.weight) / total for u in updates]


class FedAvg(Algorithm):
    name = "fedavg"

    @dataclass
    class Config:
        clients_per_round: int = 10
        deadline_s: float | None = None
        server_lr: float = 1.0
        retry_s: float = 10.0

        def validate(self, prefix: str) -> None:
            positive(self.clients_per_round, f"{prefix}.clients_per_round")
            positive(self.retry_s, f"{prefix}.retry_s")
            positive(self.deadline_s, f"{prefix}.deadline_s")
            positive(self.server_lr, f"{prefix}.server_lr")

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        """The pure rule that turns a round's updates into the next global state (subclasses may replace it)."""
        return fedavg_rule(updates, base, self.cfg.server_lr)

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, env, cfg = self.ctx, self.ctx.env, self.cfg
        tasks = TaskCounter(ctx.num_clients)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            start = env.now
            base = ctx.global_state
            clients = self.sample_clients(cfg.clients_per_round, ("fedavg", "select", rnd))
            if not clients:  # nobody reachable: try again a little later
                ctx.trace.emit(env.now, "round", round=rnd, start=start, end=env.now, clients=[], dropped=[])
                yield env.timeout(cfg.retry_s)
                continue
            ctx.world.schedule(len(clients))
            procs = {}
            for c in clients:
                procs[c] = self.dispatch(c, tasks, round_=rnd)
            everyone = env.all_of(list(procs.values()))
            if cfg.deadline_s is not None:
                yield env.any_of([everyone, env.timeout(cfg.deadline_s)])
            else:
                yield everyone
            dropped = [c for c, p in procs.items() if not p.triggered]
            for c in dropped:
                procs[c].interrupt("deadline")
            if dropped:
                yield env.timeout(0)  # let the interrupted processes record their drop
            updates = [p.value for c, p in procs.items() if c not in dropped and p.value is not None]
            if updates:
                yield from ctx.world.serve(None, ctx.aggregation_service_time(len(updates)), what="aggregate")
                new, weights = self.server_rule(updates, base)
                ctx.apply(new, updates, weights, round_=rnd, base=base,
                          round_record={"start": start, "end": env.now, "clients": clients, "dropped": dropped})
            else:
                ctx.trace.emit(env.now, "round", round=rnd, start=start, end=env.now, clients=clients, dropped=dropped)
