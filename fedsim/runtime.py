"""The run-time context an algorithm works in: the run's environment and its two workers.

- the environment: the scenario, the SimPy environment, the world (devices, links, server), the data and
  its partition, the named random streams and the trace;
- ``training`` (:class:`fedsim.training.TrainingExecutor`): runs local trainings and evaluations and knows
  what they cost;
- ``versions`` (:class:`fedsim.versions.VersionKeeper`): the global model's versions and the one writer
  of the bookkeeping records (dispatch, apply, round, aggregate, eval), staleness and the stop rules.

An algorithm reads the current model as ``ctx.global_state`` and ``ctx.version`` and waits on
``ctx.done``; it changes them only through ``ctx.versions``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import simpy

from fedsim.learn.data import FederatedData
from fedsim.learn.models import BlockModel
from fedsim.learn.state import State
from fedsim.scenario import Scenario
from fedsim.sim.executor import Executor
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace
from fedsim.system.world import World
from fedsim.training import TrainingExecutor
from fedsim.versions import VersionKeeper


class Context:
    """Everything one algorithm run needs; the algorithm decides the global model's evolution and the
    version keeper records it."""

    def __init__(
        self,
        scenario: Scenario,
        env: simpy.Environment,
        streams: Streams,
        trace: Trace,
        world: World,
        data: FederatedData,
        parts: list[np.ndarray],
        model: BlockModel,
        *,
        progress: Callable[[float, int], None] | None = None,
        executor: Executor | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.scenario = scenario
        self.env = env
        self.streams = streams
        self.trace = trace
        self.world = world
        self.parts = parts
        self.num_clients = len(parts)
        #: local training and evaluation (the worker model, costs, the host device)
        self.training = TrainingExecutor(scenario, streams, world, data, parts, model, executor=executor)
        #: the data, on the training device
        self.data: FederatedData = self.training.data
        self.device = self.training.device
        #: the global model's versions and the run's records
        self.versions = VersionKeeper(scenario, env, trace, world, self.training, self.training.reference_state,
                                      owner=self, progress=progress, run_dir=run_dir)

    @property
    def global_state(self) -> State:
        """The current global model (read-only here: new versions are installed by ``versions``)."""
        return self.versions.global_state

    @property
    def version(self) -> int:
        """The current global model's version (0 before the first update)."""
        return self.versions.version

    @property
    def done(self) -> simpy.Event:
        """Triggered when a stop rule fires; every loop ends once it has."""
        return self.versions.done

    def aggregation_service_time(self, n_updates: int) -> float:
        """Server time to fold ``n_updates`` models: ~2 FLOPs per parameter per update, on the server."""
        return self.world.server_compute_time(2.0 * self.training.num_params * max(1, n_updates))
