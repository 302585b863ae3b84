"""What every split-federated-learning algorithm shares: the cut model, its costs, timing, the two sides,
and the two loop shapes the family runs on (:class:`SplitRounds`, :class:`SplitSlots`).

The global model is kept as two halves: ``wc`` (the aggregated client part) and the server part, which
the server trains step by step.  A model *version* (``VersionKeeper.commit``) is one client-side aggregation
("global iteration"); the evaluated model is ``wc`` composed with the server part as it is then.

Client state is data: a participating client holds its own copy of ``wc`` (and its momentum buffer) only
for the duration of its participation.  The server's optimizer state persists for the run.

``train.systems_only`` runs the same processes with no tensors at all (costs still come from the real model);
``cost_input_shape`` (and ``cost_model``) then let the costs be those of a model built for another input
shape (e.g. the GAS AlexNet, ``cost_model: alexnet_cifar``, on 3×32×32 CIFAR images, while the partition
comes from an offline dataset); no model is trained then, so the cut refers to that cost model.
"""
from __future__ import annotations

import itertools
import math

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generator, Literal

import numpy as np
import simpy
import torch

from fedsim.algorithms.base import Algorithm, Contribution, SlotScheduler, TaskCounter, Update, Work, guarded
from fedsim.system.split_timing import SplitTiming
from fedsim.config import num, positive, require
from fedsim.learn.losses import label_log_prior
from fedsim.learn.models import build_model
from fedsim.learn.state import masked_weighted_average
from fedsim.learn.split import SideOptimizer, SplitComputer, SplitCosts, check_cut, merge_state, split_costs, split_state
from fedsim.learn.train import batch_schedule, num_steps
from fedsim.algorithms.configs import SplitConfig, SplitRoundsConfig, SplitSlotsConfig

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.runtime import Context


class SplitAlgorithm(Algorithm):
    """Base of the SFL family: set-up of the halves, costs, timing, client sessions and aggregation."""

    name = "sfl-base"
    family = ""  # not a named algorithm: its subclasses name their own streams
    Config = SplitConfig

    @classmethod
    def work(cls, config: Any) -> Work:
        """Split learning: every local step exchanges activations and gradients with the server; a fixed
        ``local_iterations`` sets the steps per task.  Families add their clients per round."""
        return Work(steps_per_task=config.local_iterations, steps_field="local_iterations", exchanges_per_step=True)

    def __init__(self, ctx: "Context", config: Any) -> None:
        super().__init__(ctx, config)
        # the split shapes install the averaged client part, not a rule's aggregate: no server step to apply
        require(self.server_step_of is None, "algorithm.server_opt", "split learning has no server rule for a server "
                "optimiser to step on (the server part trains by SGD itself); remove server_opt")
        self.setup()  # here, not in run(): a bad cut is reported before the simulation starts

    def setup(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        self.training = not ctx.scenario.train.systems_only
        task = getattr(ctx.data.train, "task", "classification")
        require(task == "classification", "data.name",
                f"split learning here trains classifiers (label priors, cross-entropy); dataset "
                f"'{ctx.data.train.name}' is a {task} task (use fedavg, fedasync, fedbuff or ca2fl)")
        model = ctx.training.worker
        if cfg.cost_input_shape is not None:
            require(not self.training, "algorithm.cost_input_shape",
                    "only allowed with train.systems_only: true (a trained model's costs come from that model)")
            name = cfg.cost_model or ctx.scenario.model.name
            hidden = ctx.scenario.model.hidden if cfg.cost_model is None else None
            probe = build_model(name, tuple(cfg.cost_input_shape), ctx.data.train.num_classes, hidden=hidden,
                                width=ctx.scenario.model.width)
            check_cut(probe, cfg.cut)
            self.costs: SplitCosts = split_costs(probe, tuple(cfg.cost_input_shape), cfg.cut)
            self.computer = None
            self.order = list(ctx.global_state)
            self.wc = {}
        else:
            check_cut(model, cfg.cut)
            self.computer = SplitComputer(model, cfg.cut)
            self.costs = split_costs(model, ctx.training.input_shape, cfg.cut)
        self.timing = SplitTiming(ctx.world, cfg.timing, self.costs)
        self.order = list(ctx.global_state)
        sgd = ctx.training.sgd
        if self.computer is not None:
            wc, ws = split_state(ctx.global_state, cfg.cut)
            self.wc = {k: v.clone() for k, v in wc.items()}
            self.server = SideOptimizer(ws, sgd)
        self.server_steps = 0
        y = ctx.data.train.y.cpu().numpy()
        m = ctx.data.train.num_classes
        self.num_classes = m
        self.label_counts = np.stack([np.bincount(y[p], minlength=m) for p in ctx.parts]) if ctx.num_clients else None
        self.sizes = np.array([len(p) for p in ctx.parts], dtype=np.int64)
        self.x_train, self.y_train = ctx.data.train.x, ctx.data.train.y

    # ---------------------------------------------------------------------------------- clients
    def local_iterations(self, client: int) -> int:
        """E: ``local_iterations`` if set, else the scenario's local steps (or epochs) for this client."""
        if self.cfg.local_iterations is not None:
            return int(self.cfg.local_iterations)
        return num_steps(int(self.sizes[client]), self.ctx.training.sgd)

    def schedule(self, client: int, task: int, steps: int, batch: int) -> list[np.ndarray]:
        """Dataset indices of each minibatch of one participation (the client's stream for this task)."""
        gen = self.ctx.streams.torch("client", client, "task", task)
        part = self.ctx.parts[client]
        positions = batch_schedule(len(part), steps, batch, gen)
        if not positions:
            return []
        # one index for the whole participation, then a view per minibatch (not one tensor → numpy
        # conversion and one gather per minibatch)
        flat = part[torch.cat(positions).numpy()]
        ends = list(itertools.accumulate(p.shape[0] for p in positions))
        return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends)]

    def client_optimizer(self, state: dict[str, torch.Tensor]) -> SideOptimizer:
        """A participation's own optimizer: momentum is local to one participation (as in local SGD).

        Choice: GAS's code shares one optimizer object (and its momentum) across all clients; a real
        deployment cannot, since each client trains on its own device.
        """
        return SideOptimizer(state, self.ctx.training.sgd)

    def log_prior(self, client: int) -> torch.Tensor:
        return label_log_prior(torch.as_tensor(self.label_counts[client], dtype=torch.float32,
                                               device=self.x_train.device))

    # ---------------------------------------------------------------------------------- server
    def aggregate_clients(self, states: list[dict[str, torch.Tensor]], clients: list[int]) -> dict[str, torch.Tensor]:
        """GAS eq. (10): the models averaged with |D_k| weights (or uniformly, as GAS's code does)."""
        w = self.client_weights(clients)
        return masked_weighted_average([Update(client=c, tensors=s, weight=wi) for s, c, wi in zip(states, clients, w)],
                                       states[0])

    def full_state(self) -> dict[str, torch.Tensor]:
        return merge_state(self.wc, self.server.params, self.order)

    def client_weights(self, clients: list[int]) -> list[float]:
        """Each client model's weight in the average (eq. 10): |D_k|, or 1 (``aggregate_weights: uniform``)."""
        return [1.0 if self.cfg.aggregate_weights == "uniform" else float(self.sizes[c]) for c in clients]

    def client_shares(self, clients: list[int]) -> list[float]:
        """Each client model's share in the average, as the ``apply`` records report it."""
        w = self.client_weights(clients)
        total = sum(w)
        return [x / total for x in w]

    def install(self, applied: list[Contribution], *, round_: int | None = None,
                round_record: dict[str, Any] | None = None) -> None:
        """Install the aggregated client part with the server part as it is now: the shapes' one call of
        ``VersionKeeper.apply``, which writes the ``apply`` records (staleness from ``VersionKeeper.staleness``), the
        round's record and the ``aggregate`` record."""
        ctx = self.ctx
        state = self.full_state() if self.training else ctx.global_state
        ctx.versions.apply(state, applied, self.client_shares([a.client for a in applied]), round_=round_,
                           round_record=round_record)

    def server_grad_vector(self, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        grads, _ = self.computer.server_grads(self.server, a, y)
        return torch.cat([g.reshape(-1) for g in grads]).to(torch.float64)

    def as_activation(self, rows: torch.Tensor) -> torch.Tensor:
        """Flattened rows (e.g. generated, float64) in the cut layer's shape and the model's dtype."""
        dtype = next(iter(self.server.params.values())).dtype
        return rows.to(dtype).reshape(rows.shape[0], *self.costs.activation_shape)


# ------------------------------------------------------------------------------------------ loop shapes

@dataclass
class SplitSession:
    """One client's participation: its minibatches (dataset indices), its own copy of the client model and
    optimizer (None in systems-only runs), and what it exchanged last with the server (activations up, their
    gradient down).  ``extra`` holds what an algorithm keeps per participation (a label prior, an RNG)."""

    client: int
    task: int
    base_version: int
    download_time: float
    batches: list[np.ndarray]
    opt: SideOptimizer | None = None
    x: torch.Tensor | None = None
    act: torch.Tensor | None = None
    grad: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class SplitRounds(SplitAlgorithm):
    """Loop shape: synchronous split-learning rounds (MiniBatch-SFL, S2FL, SemiSFL and its baselines).

    The framework owns the loop.  Each round: the server's own phase (:meth:`server_phase`, nothing by
    default); ``clients_per_round`` clients drawn by :meth:`select`; for each a task, a session and the
    ``dispatch`` record; then the exchange, one barrier per local iteration: each client downloads the
    client model (then, from the second iteration on, the gradient of its last activations, and runs its
    backward pass), runs its forward pass and uploads; once the last upload has arrived the server queues
    for a worker for :meth:`step_flops` and takes its step.  After ``self.steps`` iterations the clients
    upload their client models, the server queues for the aggregation, averages them (eq. 10) and installs
    the new version through the one ``apply`` with the round's ``Contribution`` s and its ``round`` record.
    A round with no client and no server phase records an empty round and waits ``idle_s``.

    A subclass decides only: :meth:`client_forward` and :meth:`client_backward` (the client's computation),
    :meth:`server_step` (the server's, setting each session's ``grad``), and if it differs :meth:`select`,
    :meth:`batch_sizes`, :meth:`begin`, :meth:`begin_round`, :meth:`open_session`, :meth:`end_client_phase`,
    :meth:`server_phase` and :meth:`end_round`.  ``steps`` (set in ``setup``) is the common number of local
    iterations; its ``Config`` has ``clients_per_round``.
    """

    #: the model a client downloads at the start of a round, in client models (SemiSFL: bottom and teacher)
    download_models = 1
    #: what a client's per-iteration upload is called in the trace
    upload_what = "activations"
    #: what a server step is called in the trace
    step_what = "sfl-step"
    #: a round installs a version even with no client (the server trained on its own)
    version_per_round = False
    #: the wait after a round in which nothing happened (no client reachable, no server phase)
    idle_s = 1.0
    #: local iterations per round, common to the round's clients (a subclass sets it in ``setup``)
    steps: int = 0
    #: names the client-selection stream: algorithms sharing it draw the same clients (paired comparisons)
    family = ""

    @classmethod
    def work(cls, config: Any) -> Work:
        k = int(config.clients_per_round)
        return replace(super().work(config), slots=k, slots_field="clients_per_round", per_version=max(1, k))

    # ---------------------------------------------------------------------------------- decisions
    def select(self, rnd: int) -> list[int]:
        """The clients of round ``rnd``: drawn uniformly among the reachable ones from the stream
        ``(family, "select", rnd)`` (shared by the algorithms of one family, for paired comparisons)."""
        k = int(self.cfg.clients_per_round)
        if k <= 0 or self.steps <= 0:
            return []
        return self.sample_clients(k, (self.family or self.name, "select", rnd))

    def batch_sizes(self, clients: list[int]) -> list[int]:
        """Each client's minibatch size this round (the scenario's batch size by default)."""
        return [self.ctx.training.sgd.batch_size] * len(clients)

    def begin(self) -> None:
        """Before the first round: the algorithm's own measurements or state (nothing by default)."""

    def begin_round(self, clients: list[int], rnd: int) -> None:
        """Before the dispatch: what the algorithm prepares for this round's clients (nothing by default)."""

    def open_session(self, s: SplitSession, rnd: int) -> None:
        """A new participation (its batches and optimizer are set): per-client extras (nothing by default)."""

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:  # pragma: no cover - abstract
        """Iteration ``e``'s forward pass on the client (set ``s.act``): (samples of the pass, bytes uploaded)."""
        raise NotImplementedError

    def client_backward(self, s: SplitSession, e: int) -> None:  # pragma: no cover - abstract
        """The client's step for iteration ``e`` with the gradient the server returned (``s.grad``)."""
        raise NotImplementedError

    def step_flops(self, samples: int) -> float:
        """FLOPs of one server step on ``samples`` activations."""
        return self.costs.server_total * samples

    def server_step(self, sessions: list[SplitSession], e: int) -> None:  # pragma: no cover - abstract
        """Iteration ``e``'s server step on every session's activations; sets each session's ``grad``."""
        raise NotImplementedError

    def end_client_phase(self, sessions: list[SplitSession]) -> None:
        """After the client models were averaged into ``wc`` (nothing by default)."""

    def server_phase(self, rnd: int) -> Generator[simpy.events.Event, Any, bool]:
        """The server's own work before the clients (none by default); True if it trained."""
        return False
        yield  # pragma: no cover - makes this a generator

    def end_round(self, rnd: int, clients: list[int]) -> None:
        """After the round's work, before its version is installed (measurement records; nothing by default)."""

    # ---------------------------------------------------------------------------------- the loop
    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        self.tasks = TaskCounter(ctx.num_clients)
        self.begin()
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            yield from self._round(rnd)

    def _round(self, rnd: int) -> Generator[simpy.events.Event, Any, None]:
        ctx, env = self.ctx, self.ctx.env
        start = env.now
        worked = yield from self.server_phase(rnd)
        clients = self.select(rnd)
        sessions = (yield from self._exchange(clients, rnd)) if clients else []
        if ctx.done.triggered:
            return
        self.end_round(rnd, clients)
        if not clients and not worked:
            yield env.timeout(self.idle_s)  # nothing to do this round: let virtual time pass
        if not clients and not self.version_per_round:
            ctx.versions.record_round(rnd, start=start, clients=[], dropped=[])
            return
        applied = [Contribution(client=s.client, base_version=s.base_version, download_time=s.download_time)
                   for s in sessions]
        self.install(applied, round_=rnd, round_record={"start": start, "end": env.now, "clients": clients,
                                                        "dropped": []})

    def _exchange(self, clients: list[int], rnd: int) -> Generator[simpy.events.Event, Any, list[SplitSession]]:
        ctx, env, timing = self.ctx, self.ctx.env, self.timing
        base_version = ctx.version
        sizes = self.batch_sizes(clients)
        self.begin_round(clients, rnd)
        ctx.world.schedule(len(clients))
        sessions = []
        for c, b in zip(clients, sizes):
            task = self.tasks.next(c)
            s = SplitSession(c, task, base_version, env.now, self.schedule(c, task, self.steps, b),
                             self.client_optimizer(self.wc) if self.training else None)
            self.open_session(s, rnd)
            sessions.append(s)
            ctx.versions.record_dispatch(c, base_version, rnd)
        for e in range(self.steps + 1):
            yield env.all_of([env.process(self._iteration(s, e)) for s in sessions])
            if e == self.steps:
                break
            yield from timing.serve(None, self.step_flops(sum(len(s.batches[e]) for s in sessions)), self.step_what)
            self.server_step(sessions, e)
        yield from timing.aggregate(len(clients), self.costs.client_model_bytes)
        if ctx.done.triggered:
            return sessions
        if self.training:
            self.wc = self.aggregate_clients([s.opt.state() for s in sessions], clients)
        self.end_client_phase(sessions)
        return sessions

    def _iteration(self, s: SplitSession, e: int) -> Generator[simpy.events.Event, Any, None]:
        """One client's part of iteration ``e``: the last gradient down and the backward pass (or, first, the
        model download), then the forward pass and the upload (or, last, the client model's upload)."""
        timing, c = self.timing, s.client
        if e == 0:
            yield from timing.download(c, self.download_models * self.costs.client_model_bytes,
                                       version=s.base_version)
        else:
            b = len(s.batches[e - 1])
            yield from timing.download(c, timing.gradient_bytes(b))
            self.client_backward(s, e - 1)
            yield from timing.client_pass(c, "backward", b)
        if e == self.steps:
            yield from timing.upload(c, self.costs.client_model_bytes, "model")
            return
        samples, nbytes = self.client_forward(s, e)
        yield from timing.client_pass(c, "forward", samples)
        yield from timing.upload(c, nbytes, self.upload_what)


@dataclass
class _ClientModel:
    """A client model arriving at the model buffer: acknowledged when the buffer has taken it."""

    session: SplitSession
    state: dict[str, torch.Tensor] | None
    ack: simpy.Event


class SplitSlots(SlotScheduler, SplitAlgorithm):
    """Loop shape: asynchronous split learning with an activation buffer and a model buffer (AsyncSFL, GAS).

    The framework owns the loop.  ``concurrency`` slots (``SlotScheduler``; stream ``(family, "select", k)``,
    ``retry_s`` when nobody is reachable).  A participation: the ``dispatch`` record, the client model's
    download, then per local iteration the forward pass, the upload of the activations, the server's queue
    and service for this minibatch's gradient (:meth:`server_gradient`), the activations into the activation
    buffer, the gradient's download and the backward pass; then the client model's upload into the model
    buffer, and the slot is refilled once the buffer has taken it.  A client going offline mid-way is a
    ``drop`` (minibatches it already uploaded stay in the buffer; its client model is lost).  A server-step
    process takes ``activation_buffer`` minibatches at a time, queues for :meth:`plan_server_step`'s samples
    and takes :meth:`server_step`; the aggregator averages every ``model_buffer`` client models (eq. 10)
    after queueing for the aggregation and installs a version through the one ``apply`` with their
    ``Contribution`` s.  The client that completed the buffer is acknowledged after the aggregation, so
    its replacement starts from the new model.

    A subclass decides only: :meth:`client_forward`, :meth:`server_gradient`, :meth:`client_backward`,
    :meth:`plan_server_step` and :meth:`server_step`, and if it needs them :meth:`begin` and
    :meth:`open_session`.  Its ``Config`` has ``concurrency``, ``activation_buffer``, ``model_buffer``
    (null: ``concurrency``) and ``retry_s``.
    """

    watch_participation = True  # going offline cuts the whole participation short

    @classmethod
    def work(cls, config: Any) -> Work:
        buffer = config.model_buffer if config.model_buffer is not None else 1
        return replace(super().work(config), slots=int(config.concurrency), per_version=max(1, int(buffer)),
                       retry_s=config.retry_s)

    # ---------------------------------------------------------------------------------- decisions
    def begin(self) -> None:
        """Before the first slot starts: the algorithm's own state (nothing by default)."""

    def open_session(self, s: SplitSession) -> None:
        """A new participation (its batches and optimizer are set): per-client extras (nothing by default)."""

    def client_forward(self, s: SplitSession, e: int) -> Any:  # pragma: no cover - abstract
        """Iteration ``e``'s forward pass on the client: the message the server receives."""
        raise NotImplementedError

    def server_gradient(self, s: SplitSession, msg: Any, e: int) -> torch.Tensor | None:  # pragma: no cover
        """The server's handling of one arrived minibatch (after its service): the gradient sent back."""
        raise NotImplementedError

    def client_backward(self, s: SplitSession, e: int) -> None:  # pragma: no cover - abstract
        """The client's step for iteration ``e`` with the gradient the server returned (``s.grad``)."""
        raise NotImplementedError

    def plan_server_step(self, msgs: list[Any]) -> tuple[int, Any]:  # pragma: no cover - abstract
        """What the next server step trains on, drawn when it is triggered: (its samples, real and any
        generated, which set its service time; the algorithm's plan, handed to :meth:`server_step`)."""
        raise NotImplementedError

    def server_step(self, msgs: list[Any], plan: Any) -> None:  # pragma: no cover - abstract
        """One server step on a full activation buffer, at the end of its service."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- the loop
    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, cfg, env = self.ctx, self.cfg, self.ctx.env
        self.q_s = cfg.activation_buffer or cfg.concurrency
        self.q_c = cfg.model_buffer or cfg.concurrency
        self.begin()
        self.activations = simpy.Store(env)
        self.models = simpy.Store(env)
        env.process(self._server_steps())
        env.process(self._aggregator())
        self.start_slots(cfg.concurrency)
        yield ctx.done

    def _participate(self, c: int) -> Generator[simpy.events.Event, Any, None]:
        """One participation; going offline mid-way is a recorded drop, and either way the slot is refilled."""
        yield from guarded(self.ctx, c, self._session(c))
        self.active.discard(c)
        self._launch()

    def _session(self, c: int) -> Generator[simpy.events.Event, Any, None]:
        ctx, env, timing = self.ctx, self.ctx.env, self.timing
        task = self.tasks.next(c)
        base_version, t0 = ctx.version, env.now
        wc = self.wc  # the client model as dispatched
        ctx.versions.record_dispatch(c, base_version, None)
        yield from timing.download(c, self.costs.client_model_bytes, version=base_version)
        batches = self.schedule(c, task, self.local_iterations(c), ctx.training.sgd.batch_size)
        s = SplitSession(c, task, base_version, t0, batches, self.client_optimizer(wc) if self.training else None)
        self.open_session(s)
        instant = timing.instant_downloads
        server_flops = self.costs.server_total
        for e, idx in enumerate(s.batches):
            b = len(idx)
            msg = self.client_forward(s, e)
            yield from timing.client_pass(c, "forward", b)
            yield from timing.upload(c, timing.activation_upload_bytes(b), "activations")
            yield from timing.serve(c, server_flops * b, "sfl-gradient")
            s.grad = self.server_gradient(s, msg, e)
            yield self.activations.put(msg)
            if instant:
                timing.instant_download(c, timing.gradient_bytes(b))
            else:
                yield from timing.download(c, timing.gradient_bytes(b))
            self.client_backward(s, e)
            yield from timing.client_pass(c, "backward", b)
        yield from timing.upload(c, self.costs.client_model_bytes, "model")
        ack = env.event()
        yield self.models.put(_ClientModel(s, s.opt.state() if s.opt is not None else None, ack))
        yield ack

    def _server_steps(self) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        while True:
            msgs: list[Any] = []
            for _ in range(self.q_s):
                msgs.append((yield self.activations.get()))
            samples, plan = self.plan_server_step(msgs)
            yield from self.timing.serve(None, self.costs.server_total * samples, "sfl-step")
            if ctx.done.triggered:
                return
            self.server_step(msgs, plan)

    def _aggregator(self) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        buf: list[_ClientModel] = []
        while True:
            msg: _ClientModel = yield self.models.get()
            buf.append(msg)
            if len(buf) < self.q_c:
                msg.ack.succeed()
                continue
            batch, buf = buf, []
            yield from self.timing.aggregate(len(batch), self.costs.client_model_bytes)
            if ctx.done.triggered:
                return
            clients = [m.session.client for m in batch]
            if self.training:
                self.wc = self.aggregate_clients([m.state for m in batch], clients)
            self.install([Contribution(client=m.session.client, base_version=m.session.base_version,
                                       download_time=m.session.download_time) for m in batch],
                         round_=ctx.version + 1)
            msg.ack.succeed()
