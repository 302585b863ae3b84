"""The training executor of a run: where local training and evaluation compute, and what they cost.

Client state is data, not live models: a client is its index array, its device/link parameters and
its named RNG streams.  One worker model is reused for every local training (training happens inside
a SimPy step, so one at a time); the global model is a state dict the version keeper holds
(``fedsim.versions``), handed in by whoever asks for a training.

Host device (``train.device``): the worker model, the dataset and the client index tensors live on
``TrainingExecutor.device``; random streams are CPU generators (the same draws on every device).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch

from fedsim.learn.accelerator import data_on, run_device
from fedsim.learn.costs import FlopCost, flops_per_sample, state_bytes
from fedsim.learn.data import ArrayDataset, FederatedData
from fedsim.learn.models import BlockModel
from fedsim.learn.state import Mask, State, clone_state
from fedsim.learn.submodel import (SubModel, SubModelCosts, extract, full_submodel, insert, sub_state_bytes,
                                   submodel_costs)
from fedsim.learn.train import (SGDConfig, TrainStats, evaluate, local_sgd, num_steps, samples_processed,
                                static_bn_statistics)
from fedsim.scenario import Scenario
from fedsim.sim.executor import Executor, InProcessExecutor
from fedsim.sim.rng import Streams
from fedsim.system.devices import check_memory
from fedsim.system.world import World

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.messages import Assignment


def sgd_config(scenario: Scenario) -> SGDConfig:
    """The local optimiser of a scenario (``local_steps`` wins over ``local_epochs``)."""
    names = {f.name for f in dataclasses.fields(SGDConfig)}
    return SGDConfig(**{k: v for k, v in dataclasses.asdict(scenario.train).items() if k in names})


@dataclass
class TrainResult:
    """One local training: the full-shape state after it, the coverage mask (None: the whole model was
    trained), its statistics and FLOPs, and the bytes of what the client uploads (None: the whole state)."""

    state: State
    stats: TrainStats
    flops: float
    mask: Mask | None = None
    upload_bytes: int | None = None
    #: entries the client pipeline adds to the update's ``info`` (a client program's own measurements)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


class PendingTraining:
    """A training task that has started: what it costs is known now, its weights when ``result()`` is called.

    For plain local SGD the steps, samples and FLOPs follow from the client's sample count alone, so the
    client's virtual compute time can run while the task is computed elsewhere (a remote executor);
    ``result()`` is called where the update is needed.  Otherwise (in-process, custom trainers) the task
    has already finished and ``result()`` just returns it.
    """

    def __init__(self, *, done: TrainResult | None = None, handle: Any = None, steps: int = 0, samples: int = 0,
                 flops: float = 0.0, finish: Callable[[Any], TrainResult] | None = None) -> None:
        self._done, self._handle, self._finish = done, handle, finish
        self.steps = done.stats.steps if done is not None else steps
        self.samples = done.stats.samples if done is not None else samples
        self.flops = done.flops if done is not None else flops

    def result(self) -> TrainResult:
        if self._done is None:
            assert self._finish is not None
            self._done = self._finish(self._handle.result())
            self._handle = None
        return self._done


@dataclass
class ClientWork:
    """What a client computes in one participation, for the framework to time (``client_task(work=...)``).

    ``download_bytes`` travel to the client first; ``start()`` is called at the virtual moment the client
    starts computing (on the model it downloaded) and returns the :class:`PendingTraining` whose FLOPs, steps
    and samples the client's device is held for; its result is what the client uploads.  The default work of
    an assignment is :meth:`TrainingExecutor.start`; a client program decided on the device (Co-S²P's mask
    phase: learn the mask, then train the pruned sub-model) brings its own ``start``, and the pipeline still
    times it and builds its ``Update``."""

    download_bytes: int
    start: Callable[[], PendingTraining]


def _plain(assignment: "Assignment | None") -> bool:
    """Whether a task is plain local SGD of the whole model (what batched and remote training can run):
    no sub-model, no custom trainer, no local objective."""
    return assignment is None or (assignment.submodel is None and assignment.trainer is None
                                  and assignment.objective is None)


def _ordered(assignment: "Assignment | None") -> bool:
    """Whether a task visits its samples in an order of its own (``Assignment.order``)."""
    return assignment is not None and assignment.order is not None


_TASK_MODELS: dict[tuple, BlockModel] = {}


def train_task(model_spec: tuple, x: torch.Tensor, y: torch.Tensor, base_state: State, indices: torch.Tensor,
               sgd: SGDConfig, seed: int, task: str) -> tuple[State, TrainStats]:
    """Plain local SGD as a self-contained task (what a remote executor runs): build (once per process) the
    model ``model_spec`` = (name, input shape, outputs, hidden, width), load ``base_state``, train with the
    batch stream seeded ``seed``.  Same inputs, same numbers as :meth:`TrainingExecutor._train`."""
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


class TrainingExecutor:
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
        self._shared_state: tuple[State, Any] | None = None  # the last base state shipped to remote workers
        from fedsim.learn.batched import can_batch

        #: train.batched: plain-SGD tasks dispatched from the same base state train together (vmap)
        self.batched = bool(scenario.train.batched and not scenario.train.systems_only
                            and can_batch(model, data.train.task))
        self._batch_notes: dict[int, tuple[State, list[tuple[int, int]]]] = {}
        self._batch_results: dict[tuple[int, int], TrainResult] = {}
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

    def start(self, client: int, base_state: State, *, task: int,
              assignment: "Assignment | None" = None) -> PendingTraining:
        """Start ``client``'s local training; see :class:`PendingTraining`.

        In-process (and for sub-models, custom trainers and systems-only runs) the task runs now.  With a
        remote executor, plain local SGD is shipped to a worker and collected by ``result()``."""
        custom = not _plain(assignment)
        ordered = _ordered(assignment)  # a sample order is a local callable: it trains here, one task at a time
        if self.batched and not custom and not ordered:
            return PendingTraining(done=self._batched_result(client, task, base_state))
        if not self.executor.remote or custom or ordered or self.scenario.train.systems_only:
            return PendingTraining(done=self.executor.submit(self._train, client, base_state, task,
                                                             assignment).result())
        ex = self.executor
        m = self.scenario.model
        hidden = m.hidden if m.hidden is None or isinstance(m.hidden, int) else tuple(m.hidden)
        spec = (m.name, self.input_shape, self.data.train.num_outputs, hidden, m.width)
        if self._shared_state is None or self._shared_state[0] is not base_state:
            self._shared_state = (base_state, ex.put(base_state))
        handle = ex.submit(train_task, spec, ex.share("x", self.data.train.x), ex.share("y", self.data.train.y),
                           self._shared_state[1], self.part_tensor(client), self.sgd,
                           self.streams.int_seed("client", client, "task", task), self.data.train.task)
        n = len(self.parts[client])
        steps = num_steps(n, self.sgd)
        samples = samples_processed(n, steps, self.sgd.batch_size)
        flops = self.flop_cost.total * samples

        def finish(out: tuple[State, TrainStats]) -> TrainResult:
            state, stats = out
            return TrainResult(state=state, stats=stats, flops=self.flop_cost.total * stats.samples)

        return PendingTraining(handle=handle, steps=steps, samples=samples, flops=flops, finish=finish)

    def _train(self, client: int, base_state: State, task: int,
               assignment: "Assignment | None" = None) -> TrainResult:
        if not _plain(assignment):
            return self._train_assignment(client, base_state, task, assignment)  # type: ignore[arg-type]
        if self.scenario.train.systems_only:
            n = len(self.parts[client])
            steps = num_steps(n, self.sgd)
            samples = samples_processed(n, steps, self.sgd.batch_size)
            return TrainResult(state=base_state, stats=TrainStats(steps, samples, math.nan, math.nan),
                               flops=self.flop_cost.total * samples)
        self.load_worker(base_state)
        gen = self.streams.torch("client", client, "task", task)
        stats = local_sgd(self.worker, self.data.train.x, self.data.train.y, self.part_tensor(client), self.sgd, gen,
                          task=self.data.train.task, order=None if assignment is None else assignment.order)
        flops = self.flop_cost.total * stats.samples
        return TrainResult(state=clone_state(self._slots), stats=stats, flops=flops)

    def note_dispatch(self, client: int, task: int, base_state: State, assignment: "Assignment | None" = None) -> None:
        """Tell the context that ``client``'s task ``task`` will train from ``base_state`` (the loop shape's
        dispatch calls this).  With ``train.batched``, the tasks noted for one base state train together when
        the first of them starts computing; otherwise this does nothing."""
        if not self.batched or not _plain(assignment) or _ordered(assignment):
            return
        entry = self._batch_notes.get(id(base_state))
        if entry is None or entry[0] is not base_state:
            entry = self._batch_notes[id(base_state)] = (base_state, [])
            while len(self._batch_notes) > 8:  # groups whose clients all dropped before computing
                del self._batch_notes[next(iter(self._batch_notes))]
        entry[1].append((client, task))

    def _batched_result(self, client: int, task: int, base_state: State) -> TrainResult:
        from fedsim.learn.batched import batched_local_sgd

        done = self._batch_results.pop((client, task), None)
        if done is not None:
            return done
        entry = self._batch_notes.get(id(base_state))
        group = [(client, task)]
        if entry is not None and entry[0] is base_state and (client, task) in entry[1]:
            group = [ct for ct in entry[1] if ct not in self._batch_results]
            del self._batch_notes[id(base_state)]
        outs = batched_local_sgd(self.worker, base_state, self.data.train.x, self.data.train.y,
                                 [self.part_tensor(c) for c, _ in group], self.sgd,
                                 [self.streams.torch("client", c, "task", k) for c, k in group])
        for (c, k), (state, stats) in zip(group, outs):
            self._batch_results[(c, k)] = TrainResult(state=state, stats=stats, flops=self.flop_cost.total * stats.samples)
        return self._batch_results.pop((client, task))

    def load_worker(self, state: State) -> None:
        """Copy ``state`` into the worker model (same tensors, same values as ``load_state_dict``)."""
        with torch.no_grad():
            for name, live in self._slots.items():
                live.copy_(state[name])

    def part_tensor(self, client: int) -> torch.Tensor:
        """``client``'s sample indices as an int64 tensor on the run's device (converted once per client, on
        first use)."""
        t = self._part_tensors.get(client)
        if t is None:
            t = self._part_tensors[client] = torch.as_tensor(np.asarray(self.parts[client], dtype=np.int64),
                                                             device=self.device)
        return t

    def _train_assignment(self, client: int, base_state: State, task: int, assignment: "Assignment") -> TrainResult:
        """Train the assignment's sub-model: extract -> local SGD (or the assignment's trainer) -> insert.

        FLOPs are measured on the extracted module (per sample, cached per sub-model and architecture) ×
        the samples processed, unless the trainer reports its own; the upload is the trainable blocks'
        tensors only; the module must fit the client's device (:meth:`check_submodel_memory`).  The result's
        state holds the trainable blocks' full-shape tensors and its mask their trained entries (mask None
        only when the whole model was trained).  A systems-only run trains nothing and sends the
        downloaded values back under the same mask, so costs and coverage are those of the real run.
        """
        sub = assignment.submodel if assignment.submodel is not None else full_submodel(self.worker)
        costs = self.check_submodel_memory(client, sub)
        idx = self.parts[client]
        if self.scenario.train.systems_only:
            steps = num_steps(len(idx), self.sgd)
            stats = TrainStats(steps, samples_processed(len(idx), steps, self.sgd.batch_size), math.nan, math.nan)
            flops: float | None = None
            tensors, mask = insert(base_state, sub, None)
        else:
            module = extract(self.worker, base_state, sub)
            gen = self.streams.torch("client", client, "task", task)
            if assignment.trainer is not None:
                outcome = assignment.trainer(module, self, client, idx, gen)
                stats, flops = outcome.stats, outcome.flops
            else:
                stats = local_sgd(module, self.data.train.x, self.data.train.y, idx, self.sgd, gen,
                                  task=self.data.train.task, objective=assignment.objective, order=assignment.order)
                flops = None
            tensors, mask = insert(base_state, sub, module.state_dict())
        if flops is None:
            flops = costs.flops.total * stats.samples
        whole = not mask and set(tensors) == set(base_state)
        return TrainResult(state=tensors, stats=stats, flops=float(flops), mask=None if whole else mask,
                           upload_bytes=costs.upload_bytes)

    def submodel_costs(self, sub: SubModel) -> SubModelCosts:
        """FLOPs per sample, bytes both ways and training memory of ``sub`` at this run's batch size
        (:func:`fedsim.learn.submodel.submodel_costs`, cached per sub-model)."""
        return submodel_costs(self.worker, sub, self.input_shape, self.sgd.batch_size,
                              momentum=self.sgd.momentum > 0, state=self.reference_state)

    def check_submodel_memory(self, client: int, sub: SubModel) -> SubModelCosts:
        """The costs of ``sub``; refuses (one line naming the device, the model and both memory figures) when
        its training memory exceeds the client's device and ``devices.check_memory`` is on."""
        costs = self.submodel_costs(sub)
        device = self.world.device(client)
        if self.scenario.devices.check_memory and costs.memory.total > device.memory_bytes:
            kept = sub.summary(self.worker)["kept"]
            check_memory(device, costs.memory.total,
                         f"training model '{self.scenario.model.name}' as a sub-model keeping {kept:.4g} of it "
                         f"(batch {self.sgd.batch_size})")
        return costs

    def fit_submodel(self, client: int, candidates: Sequence[SubModel]) -> SubModel:
        """The first of ``candidates`` (give them largest first) whose training memory fits the client's
        device; when none does, refuses with the smallest candidate's need (the one that came closest).
        With ``devices.check_memory`` off, the first candidate."""
        if not candidates:
            raise ValueError("fit_submodel needs at least one candidate sub-model")
        if not self.scenario.devices.check_memory:
            return candidates[0]
        budget = self.world.device(client).memory_bytes
        for sub in candidates:
            if self.submodel_costs(sub).memory.total <= budget:
                return sub
        smallest = min(candidates, key=lambda s: self.submodel_costs(s).memory.total)
        self.check_submodel_memory(client, smallest)
        return smallest  # pragma: no cover - check_submodel_memory raised

    def update_bytes(self, tensors: State) -> int:
        return state_bytes(tensors)

    def download_bytes(self, assignment: "Assignment | None" = None) -> int:
        """Bytes a client downloads for ``assignment``: the whole model, or the sub-model's tensors only."""
        if assignment is None or assignment.submodel is None:
            return self.model_bytes
        return int(sub_state_bytes(self.worker, assignment.submodel, state=self.reference_state))

    def submodel_summary(self, sub: SubModel) -> dict[str, Any]:
        """The compact trace description of a sub-model (kept fraction per block, block states)."""
        return sub.summary(self.worker)


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
