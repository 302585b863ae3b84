"""FedAvg (McMahan et al., AISTATS 2017): synchronous rounds over C sampled clients.

A round dispatches the current model to C clients sampled uniformly without replacement; it ends when
all return or, with ``deadline_s``, at the deadline, when the stragglers are interrupted and recorded as
dropped.  The server then queues for an aggregation worker, averages the updates weighted by the
samples each client processed, and installs the new version.

``only_fitting: true`` is the baseline of the sub-model papers, "FedAvg with the full model on the devices
that can hold it": only clients whose device memory fits the full model's training memory (the estimate
of the run's memory check) are ever sampled; the others sit out.  The run is refused only when no device
class fits.

``server_opt`` hands the aggregate to a server optimiser (the loop shape's server step, as for every rule) (``fedsim.algorithms.server_opt``: FedAvgM, FedAdam,
FedYogi, FedAdagrad as settings, not algorithms).  ``engine: vector`` computes each systems-only round in numpy
(the loop ``fedsim.algorithms.loops.fedavg_vector``): the same trace as this module's SimPy rounds, for studies of
10^5-10^6 devices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Literal

import numpy as np
import simpy

from fedsim.algorithms.loops.sync_rounds import SyncRounds

from fedsim.messages import Update
from fedsim.errors import ConfigError
from fedsim.learn.state import State, masked_weighted_average, state_toward
from fedsim.algorithms.configs import FedAvgConfig, RoundsConfig

__all__ = ["FedAvg", "RoundsConfig", "fedavg_rule"]


def fedavg_rule(updates: list[Update], base: State, server_lr: float = 1.0) -> tuple[State, list[float]]:
    """FedAvg's server rule: the masked weighted average of the updates (weights = samples processed),
    moved by ``server_lr`` from ``base`` when it is not 1.  Returns the new state and each update's share."""
    avg = masked_weighted_average(updates, base)
    new = state_toward(base, avg, server_lr)
    total = sum(float(u.weight) for u in updates)
    return new, [float(u.weight) / total for u in updates]


class FedAvg(SyncRounds):
    name = "fedavg"
    theorems = ("local_sgd",)  # Yang, Fang & Liu (ICLR 2021); fedsim check judges where its conditions hold

    Config = FedAvgConfig

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        return super().fits_devices(config) or bool(config.only_fitting)

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        self._fits: np.ndarray | None = None
        if self.cfg.only_fitting:
            self._fits = self._fitting_clients()
        if self.vector():
            from fedsim.algorithms.loops.fedavg_vector import check_vector

            check_vector(ctx.scenario, self.cfg.deadline_s)
            changed = [h for h in _VECTOR_SKIPS if getattr(type(self), h) is not getattr(FedAvg, h)]
            if changed:  # the vector loop would silently skip them
                raise ConfigError("algorithm.engine", f"{type(self).__name__} overrides {', '.join(changed)}, which the "
                                  "vector engine does not call (it runs FedAvg's own decisions): use engine: event")

    def _fitting_clients(self) -> np.ndarray:
        """Per client: does its device hold the full model's training memory?  Refuses when none does."""
        from fedsim.learn.submodel import full_submodel

        ctx = self.ctx
        if not ctx.scenario.devices.check_memory:
            return np.ones(ctx.num_clients, dtype=bool)
        need = ctx.training.submodel_costs(full_submodel(ctx.training.worker)).memory.total
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
        """The masked weighted average of the round's updates (subclasses may replace the rule); the loop shape
        then takes the server step toward it (``server_lr``, or ``server_opt`` over the pseudo-gradient)."""
        return fedavg_rule(updates, base)

    def vector(self) -> bool:
        """Whether this run takes the vector loop: ``engine: vector`` in a ``Config`` that declares ``engine``
        (FedAvg's and a subclass's that extends it; a ``Config`` without it, such as HeteroFL's, runs events)."""
        return getattr(self.cfg, "engine", "event") == "vector"

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        """The loop the config asks for: the vector engine's rounds or the event loop of :class:`SyncRounds`."""
        if self.vector():
            from fedsim.algorithms.loops.fedavg_vector import vector_rounds

            return (yield from vector_rounds(self))
        return (yield from super().run())


#: the decisions the vector engine does not call: it samples with FedAvg's stream, trains nothing and writes
#: the round's records as columns, so a class that overrides one of these must run on the event loop
_VECTOR_SKIPS = ("select", "assign", "server_rule", "server_phase", "client_model", "client_job", "task_done",
                 "before_apply", "dispatch")
