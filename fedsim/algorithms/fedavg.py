"""FedAvg (McMahan et al., AISTATS 2017): synchronous rounds over C sampled clients.

A round dispatches the current model to C clients sampled uniformly without replacement; it ends when
all return or, with ``deadline_s``, at the deadline, when the stragglers are interrupted and recorded as
dropped.  The server then queues for an aggregation worker, averages the updates weighted by the
samples each client processed, and installs the new version.

``only_fitting: true`` is the baseline of the sub-model papers, "FedAvg with the full model on the devices
that can hold it": only clients whose device memory fits the full model's training memory (the estimate
of the run's memory check) are ever sampled; the others sit out.  The run is refused only when no device
class fits.

``engine: vector`` computes each systems-only round in numpy (``fedsim.algorithms.fedavg_vector``): the
same trace as this module's SimPy rounds, for studies of 10^5-10^6 devices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Literal

import numpy as np
import simpy

from fedsim.algorithms.base import Algorithm, TaskCounter, Update
from fedsim.config import num, positive
from fedsim.errors import ConfigError
from fedsim.learn.state import State, masked_weighted_average, state_axpy, state_sub


def fedavg_rule(updates: list[Update], base: State, server_lr: float = 1.0) -> tuple[State, list[float]]:
    """FedAvg's server rule: the masked weighted average of the updates (weights = samples processed),
    moved by ``server_lr`` from ``base`` when it is not 1.  Returns the new state and each update's share."""
    avg = masked_weighted_average(updates, base)
    new = avg if server_lr == 1.0 else state_axpy(base, state_sub(avg, base), server_lr)
    total = sum(float(u.weight) for u in updates)
    return new, [float(u.weight) / total for u in updates]


@dataclass
class RoundsConfig:
    """The settings of a synchronous round (FedAvg and the algorithms built on its rounds)."""

    clients_per_round: int = num(10, ge=1, unit="clients")
    deadline_s: float | None = num(None, gt=0, le=1e9, unit="s", doc="round deadline; stragglers are dropped")
    server_lr: float = num(1.0, gt=0, le=1e6)
    retry_s: float = num(10.0, gt=0, le=1e9, unit="s", doc="wait before retrying when nobody is reachable")
    #: sample only clients whose device fits the full model (the others never train)
    only_fitting: bool = False

    def validate(self, prefix: str) -> None:
        positive(self.clients_per_round, f"{prefix}.clients_per_round")
        positive(self.retry_s, f"{prefix}.retry_s")
        positive(self.deadline_s, f"{prefix}.deadline_s")
        positive(self.server_lr, f"{prefix}.server_lr")


class FedAvg(Algorithm):
    name = "fedavg"

    @dataclass
    class Config(RoundsConfig):
        #: ``vector``: each round's client chains computed in numpy, for systems-only studies of 10^5-10^6
        #: devices (``fedsim.algorithms.fedavg_vector``: the same trace as ``event``, refused where it
        #: does not apply)
        engine: Literal["event", "vector"] = "event"

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        return super().fits_devices(config) or bool(getattr(config, "only_fitting", False))

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        self._fits: np.ndarray | None = None
        if getattr(self.cfg, "only_fitting", False):
            self._fits = self._fitting_clients()
        if getattr(self.cfg, "engine", "event") == "vector":
            from fedsim.algorithms.fedavg_vector import check_vector

            if type(self) is not FedAvg:
                raise ConfigError("algorithm.engine", f"'vector' runs plain FedAvg only, not {self.name!r}")
            check_vector(ctx.scenario, self.cfg.deadline_s)

    def _fitting_clients(self) -> np.ndarray:
        """Per client: does its device hold the full model's training memory?  Refuses when none does."""
        from fedsim.learn.submodel import full_submodel

        ctx = self.ctx
        if not ctx.scenario.devices.check_memory:
            return np.ones(ctx.num_clients, dtype=bool)
        need = ctx.submodel_costs(full_submodel(ctx.worker)).memory.total
        have = np.array([ctx.world.device(c).memory_bytes for c in range(ctx.num_clients)], dtype=np.float64)
        fits = have >= need
        if not fits.any():
            best = max(range(ctx.num_clients), key=lambda c: have[c])
            raise ConfigError("algorithm.only_fitting",
                              f"no device fits model {ctx.scenario.model.name!r}: it needs {need / 2**20:.2f} MiB "
                              f"({need} bytes), the largest device {ctx.world.device_class(best)!r} has "
                              f"{have[best] / 2**20:.2f} MiB ({have[best]:.0f} bytes)")
        return fits

    def eligible(self, client: int) -> bool:
        """Every client, or with ``only_fitting`` those whose device holds the full model."""
        return True if self._fits is None else bool(self._fits[client])

    def everyone_eligible(self) -> bool:
        return type(self).eligible is FedAvg.eligible and self._fits is None

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        """The pure rule that turns a round's updates into the next global state (subclasses may replace it)."""
        return fedavg_rule(updates, base, self.cfg.server_lr)

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        if getattr(self.cfg, "engine", "event") == "vector":
            from fedsim.algorithms.fedavg_vector import vector_rounds

            return (yield from vector_rounds(self))
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
