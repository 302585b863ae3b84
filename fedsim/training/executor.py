"""The training executor of a run: where local training and evaluation compute.

Client state is data, not live models: a client is its index array, its device/link parameters and
its named RNG streams.  One worker model is reused for every local training (training happens inside
a SimPy step, so one at a time); the global model is a state dict the version keeper holds
(``fedsim.versions``), handed in by whoever asks for a training.  How a training computes (in process,
batched, remote, systems-only) is the run's execution mode (:mod:`fedsim.training.modes`); what it costs is
the cost model (:mod:`fedsim.training.cost_model`).

Host device (``train.device``): the worker model, the dataset and the client index tensors live on
``TrainingExecutor.device``; random streams are CPU generators (the same draws on every device).
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedsim.learn.accelerator import data_on, run_device
from fedsim.learn.costs import FlopCost, flops_per_sample, state_bytes
from fedsim.learn.data import ArrayDataset, FederatedData
from fedsim.learn.models import BlockModel
from fedsim.learn.state import State, clone_state
from fedsim.learn.sgd import SGDConfig, evaluate, static_bn_statistics
from fedsim.scenario import Scenario
from fedsim.sim.executor import Executor, InProcessExecutor
from fedsim.sim.rng import Streams
from fedsim.system.world import World
from fedsim.training.cost_model import TrainingCosts
from fedsim.training.modes import ExecutionMode, execution_mode
from fedsim.training.results import PendingTraining

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.messages import Assignment

__all__ = ["TrainingExecutor", "sgd_config"]


def sgd_config(scenario: Scenario) -> SGDConfig:
    """The local optimiser of a scenario (``local_steps`` wins over ``local_epochs``)."""
    names = {f.name for f in dataclasses.fields(SGDConfig)}
    return SGDConfig(**{k: v for k, v in dataclasses.asdict(scenario.train).items() if k in names})


class TrainingExecutor(TrainingCosts):
    """Runs the local trainings of one run and the evaluations of its global model, and knows what a
    training costs (FLOPs, bytes each way, memory on the client's device).

    It keeps no model version: every training starts from the base state it is handed, every evaluation
    evaluates the state it is handed.  Trainings run in process, batched (``train.batched``: plain-SGD
    tasks from one base state train together) or on a remote executor (``train.executor``)."""

    def __init__(self, scenario: Scenario, streams: Streams, world: World, data: FederatedData,
                 parts: list[np.ndarray], model: BlockModel, *, executor: Executor | None = None) -> None:
        self.scenario = scenario
        self.streams = streams
        self.world = world
        #: where training, evaluation and probes compute (``train.device`` resolved on this machine)
        self.device: torch.device = run_device(scenario.train)
        self.data = data = data_on(data, self.device)
        self.parts = parts
        self.worker = model.to(self.device)
        #: the worker's live parameter and buffer tensors by state-dict name: loading a state is one copy
        #: per tensor (what ``load_state_dict`` does, without its per-call module walk)
        self._slots: dict[str, torch.Tensor] = dict(model.state_dict(keep_vars=True))
        #: the initial state (version 0 of the global model): only its tensors' shapes and dtypes are read
        #: here, to count a sub-model's bytes
        self.reference_state: State = clone_state(model.state_dict())
        self._part_tensors: dict[int, torch.Tensor] = {}
        from fedsim.learn.batched import can_batch

        #: train.batched: plain-SGD tasks dispatched from the same base state train together (vmap)
        self.batched = bool(scenario.train.batched and not scenario.train.systems_only
                            and can_batch(model, data.train.task))
        self.executor: Executor = executor or InProcessExecutor()
        self.sgd = sgd_config(scenario)
        self.input_shape = tuple(data.train.input_shape)
        self.flop_cost: FlopCost = flops_per_sample(model, self.input_shape)
        self.model_bytes = state_bytes(self.reference_state)
        world.model_name = scenario.model.name
        self.num_params = sum(v.numel() for v in self.reference_state.values() if torch.is_floating_point(v))
        ev = scenario.eval
        test = data.test
        if ev.max_samples is not None and ev.max_samples < len(test):
            idx = streams.numpy("eval", "subset").choice(len(test), size=ev.max_samples, replace=False)
            idx = torch.as_tensor(np.sort(idx), device=self.device)
            test = type(test)(x=test.x[idx], y=test.y[idx], num_classes=test.num_classes, name=test.name, task=test.task)
        #: the evaluation set (``eval.max_samples`` of the test split)
        self.test: ArrayDataset = test
        self.bn_data: torch.Tensor | None = None  # static-BN statistics at evaluation (eval.bn_stats: train)
        if ev.bn_stats == "train":
            pool = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
            pool = np.unique(pool)
            if ev.bn_samples is not None and ev.bn_samples < len(pool):
                pool = np.sort(streams.numpy("eval", "bn").choice(pool, size=ev.bn_samples, replace=False))
            self.bn_data = data.train.x[torch.as_tensor(pool, device=self.device)]
        #: how this run's trainings compute (in process, systems-only, batched or remote)
        self.mode: ExecutionMode = execution_mode(self, batched=self.batched)

    def start(self, client: int, base_state: State, *, task: int,
              assignment: "Assignment | None" = None) -> PendingTraining:
        """Start ``client``'s local training (task ``task``, on ``base_state``) in the run's execution mode
        (:mod:`fedsim.training.modes`); see :class:`PendingTraining`."""
        return self.mode.start(client, base_state, task, assignment)

    def note_dispatch(self, client: int, task: int, base_state: State, assignment: "Assignment | None" = None) -> None:
        """Tell the executor that ``client``'s task ``task`` will train from ``base_state`` (the loops' dispatch
        calls this).  With ``train.batched``, the tasks noted for one base state train together when the first
        of them starts computing; otherwise this does nothing."""
        self.mode.note_dispatch(client, task, base_state, assignment)

    def load_worker(self, state: State) -> None:
        """Copy ``state`` into the worker model (same tensors, same values as ``load_state_dict``)."""
        with torch.no_grad():
            for name, live in self._slots.items():
                live.copy_(state[name])

    def worker_state(self) -> State:
        """A copy of the worker model's state (what a training on it hands back)."""
        return clone_state(self._slots)

    def part_tensor(self, client: int) -> torch.Tensor:
        """``client``'s sample indices as an int64 tensor on the run's device (converted once per client, on
        first use)."""
        t = self._part_tensors.get(client)
        if t is None:
            t = self._part_tensors[client] = torch.as_tensor(np.asarray(self.parts[client], dtype=np.int64),
                                                             device=self.device)
        return t

    def evaluate(self, state: State) -> tuple[float, float, list[tuple[int, float, float]]]:
        """Accuracy and loss of ``state`` on the evaluation set, and with ``eval.per_client`` each client's
        (client, accuracy, loss) on its own training data; NaN in a systems-only run."""
        if self.scenario.train.systems_only:
            return math.nan, math.nan, []
        self.load_worker(state)
        bs = self.scenario.eval.batch_size
        with static_bn_statistics(self.worker, self.bn_data, bs):
            acc, loss = evaluate(self.worker, self.test, batch_size=bs)
            rows = ([(c, *evaluate(self.worker, self.data.train.subset(idx), batch_size=bs))
                     for c, idx in enumerate(self.parts)] if self.scenario.eval.per_client else [])
        return acc, loss, rows
