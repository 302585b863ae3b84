"""Where and how a local training computes: the execution modes, one small strategy class each.

- :class:`InProcessTraining`: local SGD on the run's worker model, now (also what every mode falls back to for
  a task that is not plain local SGD: a sub-model, a custom trainer, a local objective, a sample order);
- :class:`SystemsOnlyTraining`: no tensors (``train.systems_only``): the steps, samples and FLOPs of the task,
  the downloaded state sent back;
- :class:`BatchedTraining`: the plain tasks dispatched from one base state train together (``train.batched``,
  ``torch.func.vmap``) when the first of them starts computing;
- :class:`RemoteTraining`: plain tasks shipped to a remote executor (``train.executor``: Ray workers) and
  collected when the update is needed.

:func:`execution_mode` picks one per run from the scenario; the executor (:mod:`fedsim.training.executor`)
asks it to ``start`` each task.  Every mode gives the same numbers for the same task (tested); only where and
when they are computed differ.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from fedsim.learn.state import State, clone_state
from fedsim.learn.submodel import extract, full_submodel, insert
from fedsim.learn.sgd import SGDConfig, TrainStats, local_sgd, num_steps, samples_processed
from fedsim.learn.models import BlockModel
from fedsim.training.results import PendingTraining, TrainResult

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.learn.costs import FlopCost
    from fedsim.learn.data import FederatedData
    from fedsim.learn.submodel import SubModel, SubModelCosts
    from fedsim.messages import Assignment
    from fedsim.scenario_sections import Scenario
    from fedsim.sim.executor import Executor
    from fedsim.sim.rng import Streams

__all__ = ["BatchedTraining", "ExecutionMode", "InProcessTraining", "RemoteTraining", "SystemsOnlyTraining",
           "TrainingHost", "execution_mode", "train_task"]


class TrainingHost(Protocol):
    """What a mode uses of the training executor (:class:`fedsim.training.TrainingExecutor` is one): typed here
    so this module does not import the executor, which imports it."""

    scenario: "Scenario"
    streams: "Streams"
    executor: "Executor"
    worker: BlockModel
    data: "FederatedData"
    parts: list[np.ndarray]
    sgd: SGDConfig
    input_shape: tuple[int, ...]
    flop_cost: "FlopCost"

    def load_worker(self, state: State) -> None: ...
    def worker_state(self) -> State: ...
    def part_tensor(self, client: int) -> torch.Tensor: ...
    def check_submodel_memory(self, client: int, sub: "SubModel") -> "SubModelCosts": ...


def _plain(assignment: "Assignment | None") -> bool:
    """Whether a task is plain local SGD of the whole model (what batched and remote training can run):
    no sub-model, no custom trainer, no local objective."""
    return assignment is None or (assignment.submodel is None and assignment.trainer is None
                                  and assignment.objective is None)


def _ordered(assignment: "Assignment | None") -> bool:
    """Whether a task visits its samples in an order of its own (``Assignment.order``)."""
    return assignment is not None and assignment.order is not None


def _shippable(assignment: "Assignment | None") -> bool:
    """Whether a task may leave the process or join a batch: plain local SGD in the partition's own order (a
    sample order is a local callable: it trains here, one task at a time)."""
    return _plain(assignment) and not _ordered(assignment)


class ExecutionMode:
    """How one run's trainings compute.  ``start`` begins a task (:class:`PendingTraining`); ``note_dispatch``
    hears of a task before it starts (only batching uses it)."""

    def __init__(self, ex: "TrainingHost") -> None:
        self.ex = ex

    def note_dispatch(self, client: int, task: int, base_state: State, assignment: "Assignment | None") -> None:
        """A task was dispatched from ``base_state`` (nothing to do but in the batched mode)."""

    def start(self, client: int, base_state: State, task: int,
              assignment: "Assignment | None") -> PendingTraining:  # pragma: no cover - abstract
        raise NotImplementedError


class InProcessTraining(ExecutionMode):
    """Every task trains now, on the worker model, through the run's executor (in process by default)."""

    def start(self, client: int, base_state: State, task: int, assignment: "Assignment | None") -> PendingTraining:
        return PendingTraining(done=self.ex.executor.submit(self.train, client, base_state, task, assignment).result())

    def train(self, client: int, base_state: State, task: int, assignment: "Assignment | None" = None) -> TrainResult:
        """One task now: an assignment's sub-model (:func:`train_assignment`) or plain local SGD."""
        if not _plain(assignment):
            return train_assignment(self.ex, client, base_state, task, assignment)  # type: ignore[arg-type]
        return self.train_plain(client, base_state, task, assignment)

    def train_plain(self, client: int, base_state: State, task: int,
                    assignment: "Assignment | None") -> TrainResult:
        ex = self.ex
        ex.load_worker(base_state)
        gen = ex.streams.torch("client", client, "task", task)
        stats = local_sgd(ex.worker, ex.data.train.x, ex.data.train.y, ex.part_tensor(client), ex.sgd, gen,
                          task=ex.data.train.task, order=None if assignment is None else assignment.order)
        flops = ex.flop_cost.total * stats.samples
        return TrainResult(state=ex.worker_state(), stats=stats, flops=flops)


class SystemsOnlyTraining(InProcessTraining):
    """``train.systems_only``: nothing is trained; a task's steps, samples and FLOPs are counted and the
    downloaded state goes back (sub-models too: :func:`train_assignment` sends their downloaded values)."""

    def train_plain(self, client: int, base_state: State, task: int,
                    assignment: "Assignment | None") -> TrainResult:
        ex = self.ex
        n = len(ex.parts[client])
        steps = num_steps(n, ex.sgd)
        samples = samples_processed(n, steps, ex.sgd.batch_size)
        return TrainResult(state=base_state, stats=TrainStats(steps, samples, math.nan, math.nan),
                           flops=ex.flop_cost.total * samples)


class BatchedTraining(InProcessTraining):
    """``train.batched``: the plain tasks noted for one base state train together (``torch.func.vmap``) when
    the first of them starts computing; the others collect their results when they start."""

    def __init__(self, ex: "TrainingHost") -> None:
        super().__init__(ex)
        self._notes: dict[int, tuple[State, list[tuple[int, int]]]] = {}
        self._results: dict[tuple[int, int], TrainResult] = {}

    def note_dispatch(self, client: int, task: int, base_state: State, assignment: "Assignment | None") -> None:
        if not _shippable(assignment):
            return
        entry = self._notes.get(id(base_state))
        if entry is None or entry[0] is not base_state:
            entry = self._notes[id(base_state)] = (base_state, [])
            while len(self._notes) > 8:  # groups whose clients all dropped before computing
                del self._notes[next(iter(self._notes))]
        entry[1].append((client, task))

    def start(self, client: int, base_state: State, task: int, assignment: "Assignment | None") -> PendingTraining:
        if not _shippable(assignment):
            return super().start(client, base_state, task, assignment)
        return PendingTraining(done=self._result(client, task, base_state))

    def _result(self, client: int, task: int, base_state: State) -> TrainResult:
        from fedsim.learn.batched import batched_local_sgd

        ex = self.ex
        done = self._results.pop((client, task), None)
        if done is not None:
            return done
        entry = self._notes.get(id(base_state))
        group = [(client, task)]
        if entry is not None and entry[0] is base_state and (client, task) in entry[1]:
            group = [ct for ct in entry[1] if ct not in self._results]
            del self._notes[id(base_state)]
        outs = batched_local_sgd(ex.worker, base_state, ex.data.train.x, ex.data.train.y,
                                 [ex.part_tensor(c) for c, _ in group], ex.sgd,
                                 [ex.streams.torch("client", c, "task", k) for c, k in group])
        for (c, k), (state, stats) in zip(group, outs):
            self._results[(c, k)] = TrainResult(state=state, stats=stats, flops=ex.flop_cost.total * stats.samples)
        return self._results.pop((client, task))


class RemoteTraining(InProcessTraining):
    """``train.executor`` names a remote executor: a plain task is shipped (:func:`train_task`) and its costs,
    known from the client's sample count alone, let the client's virtual compute time run meanwhile."""

    def __init__(self, ex: "TrainingHost") -> None:
        super().__init__(ex)
        self._shared_state: tuple[State, Any] | None = None  # the last base state shipped to remote workers

    def start(self, client: int, base_state: State, task: int, assignment: "Assignment | None") -> PendingTraining:
        if not _shippable(assignment):
            return super().start(client, base_state, task, assignment)
        ex = self.ex
        remote = ex.executor
        m = ex.scenario.model
        hidden = m.hidden if m.hidden is None or isinstance(m.hidden, int) else tuple(m.hidden)
        spec = (m.name, ex.input_shape, ex.data.train.num_outputs, hidden, m.width)
        if self._shared_state is None or self._shared_state[0] is not base_state:
            self._shared_state = (base_state, remote.put(base_state))
        handle = remote.submit(train_task, spec, remote.share("x", ex.data.train.x),
                               remote.share("y", ex.data.train.y), self._shared_state[1], ex.part_tensor(client),
                               ex.sgd, ex.streams.int_seed("client", client, "task", task), ex.data.train.task)
        n = len(ex.parts[client])
        steps = num_steps(n, ex.sgd)
        samples = samples_processed(n, steps, ex.sgd.batch_size)
        flops = ex.flop_cost.total * samples

        def finish(out: tuple[State, TrainStats]) -> TrainResult:
            state, stats = out
            return TrainResult(state=state, stats=stats, flops=ex.flop_cost.total * stats.samples)

        return PendingTraining(handle=handle, steps=steps, samples=samples, flops=flops, finish=finish)


def execution_mode(ex: "TrainingHost", *, batched: bool) -> ExecutionMode:
    """The run's mode: batched (``train.batched``, where the model and task allow it), else systems-only,
    else remote (a remote ``train.executor``), else in process."""
    if batched:
        return BatchedTraining(ex)
    if ex.scenario.train.systems_only:
        return SystemsOnlyTraining(ex)
    if ex.executor.remote:
        return RemoteTraining(ex)
    return InProcessTraining(ex)


def train_assignment(ex: "TrainingHost", client: int, base_state: State, task: int,
                     assignment: "Assignment") -> TrainResult:
    """Train the assignment's sub-model: extract -> local SGD (or the assignment's trainer) -> insert.

    FLOPs are measured on the extracted module (per sample, cached per sub-model and architecture) ×
    the samples processed, unless the trainer reports its own; the upload is the trainable blocks'
    tensors only; the module must fit the client's device (``check_submodel_memory``).  The result's
    state holds the trainable blocks' full-shape tensors and its mask their trained entries (mask None
    only when the whole model was trained).  A systems-only run trains nothing and sends the
    downloaded values back under the same mask, so costs and coverage are those of the real run.
    """
    sub = assignment.submodel if assignment.submodel is not None else full_submodel(ex.worker)
    costs = ex.check_submodel_memory(client, sub)
    idx = ex.parts[client]
    if ex.scenario.train.systems_only:
        steps = num_steps(len(idx), ex.sgd)
        stats = TrainStats(steps, samples_processed(len(idx), steps, ex.sgd.batch_size), math.nan, math.nan)
        flops: float | None = None
        tensors, mask = insert(base_state, sub, None)
    else:
        module = extract(ex.worker, base_state, sub)
        gen = ex.streams.torch("client", client, "task", task)
        if assignment.trainer is not None:
            outcome = assignment.trainer(module, ex, client, idx, gen)
            stats, flops = outcome.stats, outcome.flops
        else:
            stats = local_sgd(module, ex.data.train.x, ex.data.train.y, idx, ex.sgd, gen,
                              task=ex.data.train.task, objective=assignment.objective, order=assignment.order)
            flops = None
        tensors, mask = insert(base_state, sub, module.state_dict())
    if flops is None:
        flops = costs.flops.total * stats.samples
    whole = not mask and set(tensors) == set(base_state)
    return TrainResult(state=tensors, stats=stats, flops=float(flops), mask=None if whole else mask,
                       upload_bytes=costs.upload_bytes)


_TASK_MODELS: dict[tuple, BlockModel] = {}


def train_task(model_spec: tuple, x: torch.Tensor, y: torch.Tensor, base_state: State, indices: torch.Tensor,
               sgd: SGDConfig, seed: int, task: str) -> tuple[State, TrainStats]:
    """Plain local SGD as a self-contained task (what a remote executor runs): build (once per process) the
    model ``model_spec`` = (name, input shape, outputs, hidden, width), load ``base_state``, train with the
    batch stream seeded ``seed``.  Same inputs, same numbers as :meth:`InProcessTraining.train_plain`."""
    from fedsim.learn.models import build_model

    model = _TASK_MODELS.get(model_spec)
    if model is None:
        name, shape, outputs, hidden, width = model_spec
        model = _TASK_MODELS[model_spec] = build_model(name, shape, outputs, hidden=hidden, width=width)
    model.load_state_dict(base_state)
    gen = torch.Generator()
    gen.manual_seed(seed)
    stats = local_sgd(model, x, y, indices, sgd, gen, task=task)
    return clone_state(model.state_dict()), stats
