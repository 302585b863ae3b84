"""The run-time context an algorithm works in: world, data, model, global state, metrics, stop rules.

Client state is data, not live models: a client is its index array, its device/link parameters and
its named RNG streams.  One worker model is reused for every local training (training happens inside
a SimPy step, so one at a time), and the global model is a state dict.

Host device (``train.device``): the worker model, the dataset, the client index tensors and so the global
state and every client state live on ``Context.device``; random streams are CPU generators (the same
draws on every device) and checkpoints are saved as CPU tensors (``fedsim.learn.accelerator``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import simpy
import torch

from fedsim.learn.accelerator import cpu_state, data_on, run_device
from fedsim.learn.costs import FlopCost, flops_per_sample, state_bytes
from fedsim.learn.data import FederatedData
from fedsim.learn.models import BlockModel
from fedsim.learn.state import Mask, State, clone_state, coverage_counts
from fedsim.learn.submodel import SubModel, SubModelCosts, extract, full_submodel, insert, sub_state_bytes, submodel_costs
from fedsim.learn.train import (SGDConfig, TrainStats, evaluate, local_sgd, num_steps, samples_processed,
                                static_bn_statistics)
from fedsim.scenario import Scenario
from fedsim.sim.executor import Executor, InProcessExecutor
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace
from fedsim.system.devices import check_memory
from fedsim.system.world import World

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.algorithms.base import Assignment, Contribution, Update


@dataclass
class TrainResult:
    """One local training: the full-shape state after it, the coverage mask (None: the whole model was
    trained), its statistics and FLOPs, and the bytes of what the client uploads (None: the whole state)."""

    state: State
    stats: TrainStats
    flops: float
    mask: Mask | None = None
    upload_bytes: int | None = None


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


def _plain(assignment: "Assignment | None") -> bool:
    """Whether a task is plain local SGD of the whole model (what batched and remote training can run):
    no sub-model, no custom trainer, no local objective."""
    return assignment is None or (assignment.submodel is None and assignment.trainer is None
                                  and assignment.objective is None)


_TASK_MODELS: dict[tuple, BlockModel] = {}


def train_task(model_spec: tuple, x: torch.Tensor, y: torch.Tensor, base_state: State, indices: torch.Tensor,
               sgd: SGDConfig, seed: int, task: str) -> tuple[State, TrainStats]:
    """Plain local SGD as a self-contained task (what a remote executor runs): build (once per process) the
    model ``model_spec`` = (name, input shape, outputs, hidden, width), load ``base_state``, train with the
    batch stream seeded ``seed``.  Same inputs, same numbers as :meth:`Context._train`."""
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


class Context:
    """Everything one algorithm run needs; the algorithm owns the global model's evolution."""

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
        #: where training, evaluation and probes compute (``train.device`` resolved on this machine)
        self.device: torch.device = run_device(scenario.train)
        self.data = data = data_on(data, self.device)
        self.parts = parts
        self.num_clients = len(parts)
        self.worker = model.to(self.device)
        #: the worker's live parameter and buffer tensors by state-dict name: loading a state is one copy
        #: per tensor (what ``load_state_dict`` does, without its per-call module walk)
        self._slots: dict[str, torch.Tensor] = dict(model.state_dict(keep_vars=True))
        self._part_tensors: dict[int, torch.Tensor] = {}
        self._shared_state: tuple[State, Any] | None = None  # the last base state shipped to remote workers
        from fedsim.learn.batched import can_batch

        #: train.batched: plain-SGD tasks dispatched from the same base state train together (vmap)
        self.batched = bool(scenario.train.batched and not scenario.train.systems_only
                            and can_batch(model, data.train.task))
        self._batch_notes: dict[int, tuple[State, list[tuple[int, int]]]] = {}
        self._batch_results: dict[tuple[int, int], TrainResult] = {}
        self.global_state: State = clone_state(model.state_dict())
        self.version = 0
        self.updates_applied = 0
        self.metrics: list[dict[str, Any]] = []
        self.client_metrics: list[dict[str, Any]] = []  # with eval.per_client: global model on each client's own data
        self.done = env.event()
        self.stop_reason = ""
        self.progress = progress
        self.executor: Executor = executor or InProcessExecutor()
        self.weight_by_samples = True
        self.sgd = self.sgd_config(scenario)
        self.input_shape = tuple(data.train.input_shape)
        self.flop_cost: FlopCost = flops_per_sample(model, self.input_shape)
        self.model_bytes = state_bytes(self.global_state)
        world.model_name = scenario.model.name
        self.num_params = sum(v.numel() for v in self.global_state.values() if torch.is_floating_point(v))
        ev = scenario.eval
        test = data.test
        if ev.max_samples is not None and ev.max_samples < len(test):
            idx = streams.numpy("eval", "subset").choice(len(test), size=ev.max_samples, replace=False)
            idx = torch.as_tensor(np.sort(idx), device=self.device)
            test = type(test)(x=test.x[idx], y=test.y[idx], num_classes=test.num_classes, name=test.name, task=test.task)
        self.test = test
        self.bn_data: torch.Tensor | None = None  # static-BN statistics at evaluation (eval.bn_stats: train)
        if ev.bn_stats == "train":
            pool = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if parts else np.zeros(0, np.int64)
            pool = np.unique(pool)
            if ev.bn_samples is not None and ev.bn_samples < len(pool):
                pool = np.sort(streams.numpy("eval", "bn").choice(pool, size=ev.bn_samples, replace=False))
            self.bn_data = data.train.x[torch.as_tensor(pool, device=self.device)]
        self._last_eval_time = -math.inf
        self._wall0 = time.perf_counter()
        self.run_dir = None if run_dir is None else Path(run_dir)
        #: Called as ``hook(ctx, final)`` at every snapshot (version 0, each commit, the end of the run);
        #: live probes hang here.  Hooks must not change the context.
        self.version_hooks: list[Callable[["Context", bool], None]] = []
        self._snapshot_version = -1
        self._saved_version = -1

    # ----------------------------------------------------------------------------------- training
    @staticmethod
    def sgd_config(scenario: Scenario) -> SGDConfig:
        """The local optimiser of a scenario (``local_steps`` wins over ``local_epochs``)."""
        names = {f.name for f in dataclasses.fields(SGDConfig)}
        return SGDConfig(**{k: v for k, v in dataclasses.asdict(scenario.train).items() if k in names})

    def train_client(self, client: int, base_state: State, *, task: int, assignment: "Assignment | None" = None,
                     **kwargs: Any) -> TrainResult:
        """Local training of ``client`` from ``base_state`` with the client's stream for this task (via the
        executor): plain local SGD of the whole model, or the assignment's sub-model and trainer."""
        return self.start_training(client, base_state, task=task, assignment=assignment, **kwargs).result()

    def start_training(self, client: int, base_state: State, *, task: int, assignment: "Assignment | None" = None,
                       **kwargs: Any) -> PendingTraining:
        """Start ``client``'s local training; see :class:`PendingTraining`.

        In-process (and for sub-models, custom trainers and systems-only runs) the task runs now.  With a
        remote executor, plain local SGD is shipped to a worker and collected by ``result()``."""
        custom = not _plain(assignment)
        if self.batched and not custom and not kwargs:
            return PendingTraining(done=self._batched_result(client, task, base_state))
        if not self.executor.remote or custom or kwargs or self.scenario.train.systems_only:
            return PendingTraining(done=self.executor.submit(self._train, client, base_state, task, assignment,
                                                             **kwargs).result())
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

    def _train(self, client: int, base_state: State, task: int, assignment: "Assignment | None" = None,
               **kwargs: Any) -> TrainResult:
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
        kwargs.setdefault("task", self.data.train.task)
        stats = local_sgd(self.worker, self.data.train.x, self.data.train.y, self.part_tensor(client), self.sgd, gen,
                          **kwargs)
        flops = self.flop_cost.total * stats.samples
        return TrainResult(state=clone_state(self._slots), stats=stats, flops=flops)

    def note_dispatch(self, client: int, task: int, base_state: State, assignment: "Assignment | None" = None) -> None:
        """Tell the context that ``client``'s task ``task`` will train from ``base_state`` (the algorithm's
        dispatch calls this).  With ``train.batched``, the tasks noted for one base state train together when
        the first of them starts computing; otherwise this does nothing."""
        if not self.batched or not _plain(assignment):
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
                                  task=self.data.train.task, objective=assignment.objective)
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
                              momentum=self.sgd.momentum > 0, state=self.global_state)

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
        return int(sub_state_bytes(self.worker, assignment.submodel, state=self.global_state))

    def submodel_summary(self, sub: SubModel) -> dict[str, Any]:
        """The compact trace description of a sub-model (kept fraction per block, block states)."""
        return sub.summary(self.worker)

    def aggregation_service_time(self, n_updates: int) -> float:
        """Server time to fold ``n_updates`` models: ~2 FLOPs per parameter per update, on the server."""
        return self.world.server_compute_time(2.0 * self.num_params * max(1, n_updates))

    # ----------------------------------------------------------------------------------- versions
    def staleness(self, update: "Update | Contribution") -> int:
        """How many versions were installed since ``update``'s client downloaded its model: the one place
        staleness (in versions) is computed."""
        return self.version - update.base_version

    def record_dispatch(self, client: int, version: int, round_: int | None, *,
                        submodel: SubModel | None = None) -> None:
        """The ``dispatch`` record: ``client`` is sent model ``version`` (and, for a sub-model, its compact
        description).  The one writer of dispatch records (the vector engine's column writer aside)."""
        extra = {} if submodel is None else {"submodel": self.submodel_summary(submodel)}
        self.trace.emit(self.env.now, "dispatch", client=client, version=version, round=round_, **extra)

    def record_round(self, round_: int, *, start: float, clients: list[int], dropped: list[int]) -> None:
        """The ``round`` record of a round that installed no new version (nobody reachable, or every client
        dropped); a round that does install one is recorded by :meth:`apply`."""
        self.trace.emit(self.env.now, "round", round=round_, start=start, end=self.env.now, clients=clients,
                        dropped=dropped)

    def apply(self, new_state: State, updates: Sequence["Update"], weights: Sequence[float], *,
              round_: int | None = None, base: State | None = None,
              round_record: dict[str, Any] | None = None) -> None:
        """Install the result of a server rule: the one place that records applied updates.

        Emits one ``apply`` event per update (its base version, staleness in versions and in seconds, its
        weight in the aggregate as the rule reports it, and, for a partial update, its ``coverage``: the
        covered fraction of each tensor; for a sub-model update also its ``submodel`` summary, as on its
        dispatch: kept fraction per block and block states), then commits ``new_state`` as the next version.  When any update
        is partial, the ``aggregate`` event also carries N_q^i over the entries of ``base`` (default: the
        current global state): ``coverage_min`` and ``coverage_mean``.  A synchronous round passes its
        ``round_record`` (start, clients, dropped), emitted as the ``round`` event before the new version.
        """
        env = self.env
        partial = any(u.mask is not None for u in updates)
        for u, w in zip(updates, weights):
            extra: dict[str, Any] = {}
            if partial:
                extra["coverage"] = _coverage_fractions(u, self.global_state)
            sub = getattr(u.info.get("assignment"), "submodel", None)
            if sub is not None:  # what the update trained, as its dispatch said (compact)
                extra["submodel"] = self.submodel_summary(sub)
            self.trace.emit(env.now, "apply", client=u.client, base_version=u.base_version, version=self.version + 1,
                            staleness=self.staleness(u), staleness_s=env.now - u.download_time,
                            weight=float(w), round=round_, **extra)
        agg: dict[str, Any] = {}
        if partial:
            lo, mean, _ = coverage_counts(updates, self.global_state if base is None else base)
            agg = {"coverage_min": lo, "coverage_mean": mean}
        if round_record is not None:
            self.trace.emit(env.now, "round", round=round_, **round_record)
        self.commit(new_state, round_=round_, n_updates=len(updates), clients=[u.client for u in updates], **agg)

    def apply_columns(self, new_state: State, clients: np.ndarray, weights: np.ndarray, base_versions: np.ndarray,
                      download_times: np.ndarray, *, round_: int | None = None,
                      round_record: dict[str, Any] | None = None) -> None:
        """:meth:`apply` for whole-model updates given as columns (one entry per update, in the order the
        rule listed them): the same ``apply``, ``round`` and ``aggregate`` records, written in bulk.  The
        vector FedAvg engine applies a round of 10^6 updates through here without building 10^6 ``Update``
        objects."""
        now = self.env.now
        base_versions = np.asarray(base_versions, dtype=np.int64)
        self.trace.write_columns([("apply", np.full(len(clients), float(now)), {
            "client": np.asarray(clients, dtype=np.int64), "base_version": base_versions, "version": self.version + 1,
            "staleness": self.version - base_versions, "staleness_s": now - np.asarray(download_times, dtype=np.float64),
            "weight": np.asarray(weights, dtype=np.float64), "round": round_})])
        if round_record is not None:
            self.trace.emit(now, "round", round=round_, **round_record)
        self.commit(new_state, round_=round_, n_updates=len(clients), clients=np.asarray(clients).tolist())

    def commit(self, state: State, *, round_: int | None = None, n_updates: int = 1, clients: list[int] | None = None,
               **fields: Any) -> None:
        """Install a new global model version; evaluate and check the stop rules.

        Algorithms whose updates are not ``Update`` objects (the split-learning server side) commit
        directly; everything else goes through :meth:`apply`."""
        self.global_state = state
        self.version += 1
        self.updates_applied += n_updates
        self.trace.emit(self.env.now, "aggregate", version=self.version, round=round_, n_updates=n_updates,
                        clients=clients or [], **fields)
        ev = self.scenario.eval
        due = ev.every_versions is not None and self.version % ev.every_versions == 0
        if due:
            self.evaluate(round_=round_)
        self.snapshot()
        if self.progress is not None:
            self.progress(self.env.now, self.version)
        self.check_stop()

    def snapshot(self, *, final: bool = False) -> None:
        """Checkpoint the global state (every ``output.checkpoints`` versions, version 0 and ``final``) and
        run the version hooks, at most once per version (hooks see ``final`` on the last call).  Costs no
        virtual time."""
        if self._snapshot_version == self.version and not final:
            return
        every = self.scenario.output.checkpoints
        due = every is not None and (final or self.version % every == 0)
        if due and self.run_dir is not None and self._saved_version != self.version:
            folder = self.run_dir / "checkpoints"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(cpu_state(self.global_state), folder / f"v{self.version:06d}.pt")  # loads anywhere
            self._saved_version = self.version
        self._snapshot_version = self.version
        for hook in self.version_hooks:
            hook(self, final)

    def evaluate(self, *, round_: int | None = None) -> dict[str, Any]:
        per_client = self.scenario.eval.per_client and not self.scenario.train.systems_only
        client_rows: list[tuple[int, float, float]] = []
        if self.scenario.train.systems_only:
            acc, loss = math.nan, math.nan
        else:
            self.load_worker(self.global_state)
            bs = self.scenario.eval.batch_size
            with static_bn_statistics(self.worker, self.bn_data, bs):
                acc, loss = evaluate(self.worker, self.test, batch_size=bs)
                if per_client:
                    client_rows = [(c, *evaluate(self.worker, self.data.train.subset(idx), batch_size=bs))
                                   for c, idx in enumerate(self.parts)]
        row = {
            "t": float(self.env.now),
            "version": self.version,
            "round": round_,
            "updates": self.updates_applied,
            "accuracy": float(acc),
            "loss": float(loss),
            "bytes_up": self.world.bytes_up,
            "bytes_down": self.world.bytes_down,
            "wall_s": time.perf_counter() - self._wall0,
        }
        self.metrics.append(row)
        for c, c_acc, c_loss in client_rows:
            self.client_metrics.append({"t": row["t"], "version": self.version, "client": c,
                                        "accuracy": float(c_acc), "loss": float(c_loss)})
        self._last_eval_time = self.env.now
        self.trace.emit(self.env.now, "eval", version=self.version, round=round_, accuracy=row["accuracy"], loss=row["loss"])
        return row

    def check_stop(self) -> None:
        if self.done.triggered:
            return
        st = self.scenario.stop
        reason = ""
        if st.max_versions is not None and self.version >= st.max_versions:
            reason = f"reached {st.max_versions} model versions"
        elif st.max_updates is not None and self.updates_applied >= st.max_updates:
            reason = f"applied {st.max_updates} updates"
        elif st.target_accuracy is not None and self.metrics and self.metrics[-1]["accuracy"] >= st.target_accuracy:
            reason = f"reached target accuracy {st.target_accuracy}"
        if reason:
            self.stop_reason = reason
            self.done.succeed(reason)

    def eval_clock(self) -> Any:
        """A SimPy process evaluating every ``eval.every_s`` virtual seconds (when configured)."""
        every = self.scenario.eval.every_s
        while every is not None and not self.done.triggered:
            yield self.env.timeout(every)
            if not self.done.triggered:
                self.evaluate()
                self.check_stop()

    def stop_clock(self) -> Any:
        """Ends the run at ``stop.max_time_s`` of virtual time."""
        limit = self.scenario.stop.max_time_s
        if limit is None:
            return
        yield self.env.timeout(limit)
        if not self.done.triggered:
            self.stop_reason = f"reached {limit} s of virtual time"
            self.done.succeed(self.stop_reason)


def _coverage_fractions(update: "Update", reference: State) -> dict[str, float]:
    """Covered fraction of each floating tensor of ``reference`` by ``update`` (0 where it sent nothing)."""
    out: dict[str, float] = {}
    for name, ref in reference.items():
        if not torch.is_floating_point(ref):
            continue
        if name not in update.tensors:
            out[name] = 0.0
            continue
        m = None if update.mask is None else update.mask.get(name)
        out[name] = 1.0 if m is None else round(float((m != 0).sum()) / max(1, m.numel()), 6)
    return out
