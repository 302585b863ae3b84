"""The shared pieces every algorithm is built from: one pipeline from assignment to applied update.

    Assignment (what this client trains) → client_task (download, train, upload, in virtual time)
    → Update (tensors + coverage mask) → a pure server rule → ``VersionKeeper.apply`` (records every ``apply``
    event, staleness and coverage once, and installs the new version)

- ``Assignment``: the sub-model a client trains (``fedsim.learn.submodel.SubModel``; None = the whole
  model), the update kind, and an optional local trainer replacing plain local SGD.
- ``Update``: what a client sends back (tensors, coverage mask, weight, base version, costs).
  These messages live in ``fedsim.messages`` (at the bottom of the import graph) and are re-exported here.
- The one averaging rule and the other state-dict operations live in ``fedsim.learn.state``.
- staleness functions (constant, polynomial, hinge, fedbuff) that scale an update's weight by its staleness.
- ``client_task``: download → local training → upload as one SimPy process, with training computed at
  the virtual moment the client starts computing, on the model it downloaded.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generator, Literal, Sequence

import numpy as np
import simpy

from fedsim.algorithms.server_opt import ServerStep
from fedsim.config import num, positive, require
from fedsim.learn.costs import state_bytes
from fedsim.learn.state import State, state_sub
from fedsim.messages import Assignment, Contribution, LocalTrainer, TrainOutcome, Update, Work
from fedsim.system.availability import AlwaysOn
from fedsim.algorithms.configs import LoopConfig, RoundsConfig, STALENESS_FUNCTIONS, SemiAsyncConfig, SlotsConfig, validate_staleness
from fedsim.training import ClientWork

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.runtime import Context
    from fedsim.training import TrainResult

#: the messages (``fedsim.messages``) stay importable from here, where algorithms have always found them
__all__ = ["Algorithm", "Assignment", "AsyncSlots", "Contribution", "LocalTrainer", "RoundsConfig", "SemiAsyncConfig",
           "SemiAsyncRounds", "SlotScheduler", "SlotsConfig", "SyncRounds", "TaskCounter", "TrainOutcome", "Update",
           "Work", "client_task", "guarded", "quorum", "staleness_weight", "validate_staleness"]


# ------------------------------------------------------------------------------------------ staleness


def staleness_weight(tau: float, kind: str = "constant", a: float = 0.5, b: float = 4.0) -> float:
    """Staleness scaling s(τ) of Xie et al. 2019 (FedAsync, §5.2) and FedBuff.

    constant: 1;  polynomial: (τ + 1)^(−a);  hinge: 1 if τ ≤ b else 1 / (a(τ − b) + 1);
    fedbuff: 1/√(1 + τ) (Nguyen et al. 2022, the polynomial with a = 0.5).
    """
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((tau + 1.0) ** (-a))
    if kind == "hinge":
        return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)
    if kind == "fedbuff":
        return 1.0 / math.sqrt(1.0 + tau)
    raise ValueError(f"unknown staleness function {kind!r} (allowed: {', '.join(STALENESS_FUNCTIONS)})")


# ------------------------------------------------------------------------------------------ client task

def client_task(
    ctx: "Context",
    client: int,
    base_state: State,
    base_version: int,
    *,
    task: int,
    assignment: Assignment | None = None,
    work: "ClientWork | None" = None,
    extra_downloads: Sequence[int] = (),
    extra_uploads: Sequence[tuple[int, str]] = (),
) -> Generator[simpy.events.Event, Any, Update]:
    """One client participation: download the (sub-)model, train locally, upload the update.

    ``base_state`` is the model the server sent at dispatch (the caller snapshots it); training runs
    on exactly that, at the virtual moment computing starts, with the client's own batch stream for
    this task.  Bytes in both directions are those of the tensors that travel (the sub-model's only).
    The framework times it (:meth:`fedsim.runtime.Context.run_client`: the world writes the ``download``,
    ``compute`` and ``upload`` records).

    ``work`` (:class:`fedsim.training.ClientWork`) replaces the assignment's training when the client program
    is decided on the device (Co-S²P's mask phase): its ``download_bytes`` travel, its ``start()`` computes,
    and its result (state, mask, statistics, FLOPs, upload bytes, ``info``) becomes the ``Update`` as any
    training's does.  ``extra_downloads`` (bytes, each its own record, before the model) and
    ``extra_uploads`` ((bytes, what), after the update) are what else the participation moves (FedSwitch's
    teacher, FedMatch's helpers).  Returns the ``Update`` (``info["arrived"]``: when its upload ended); a SimPy
    interrupt (deadline, going offline) propagates to the caller, who records the drop.
    """
    a = assignment if assignment is not None else Assignment()
    if work is None:
        down = ctx.training.download_bytes(a)
        if a.objective is not None:  # declared extra tensors travel with the model (costed)
            down += state_bytes(a.objective.download())
        work = ClientWork(down, lambda: ctx.training.start(client, base_state, task=task, assignment=a))
    sent: dict[str, Any] = {}

    def upload_bytes(result: "TrainResult") -> int:
        """What travels back: the update's tensors (the sub-model's only) and the objective's extras."""
        tensors = state_sub(result.state, base_state) if a.kind == "delta" else result.state
        nbytes = ctx.training.update_bytes(tensors) if result.upload_bytes is None else result.upload_bytes
        extras = a.objective.upload() if a.objective is not None else {}
        sent["tensors"], sent["extras"] = tensors, extras
        return nbytes + (state_bytes(extras) if extras else 0)

    run = yield from ctx.run_client(client, work, version=base_version, upload_bytes=upload_bytes,
                                    extra_downloads=extra_downloads, extra_uploads=extra_uploads)
    result = run.result
    return Update(
        client=client,
        tensors=sent["tensors"],
        kind=a.kind,
        mask=result.mask if a.coverage is None else a.coverage,
        weight=float(result.stats.samples),
        base_version=base_version,
        download_time=run.download_start,
        num_samples=int(len(ctx.parts[client])),
        costs={"flops": result.flops, "bytes_up": run.upload_bytes, "bytes_down": work.download_bytes},
        info={"loss": result.stats.mean_loss, "steps": result.stats.steps, "round": a.round, "assignment": a,
              **result.info, "arrived": run.upload_end},
        extras=sent["extras"],
    )


#: the hooks the framework calls on the class, with the validated ``Config``, before the algorithm exists (the
#: run's up-front estimate and its checks): an override must stay a ``@classmethod``
CLASS_HOOKS = ("work", "fits_devices", "buffer_size_of")


class Algorithm:
    """Base class: an algorithm is a SimPy process over a Context, with a validated Config.

    Every hook is an instance method (``self.cfg`` is the validated ``Config``, ``self.ctx`` the run), except
    the ones in :data:`CLASS_HOOKS` (``work``, ``fits_devices``, ``buffer_size_of``): the runner calls those on
    the class with the ``Config`` before the algorithm is built, so they are ``@classmethod`` s here and must
    stay so in a subclass (defining one as a plain method is refused when the class is created)."""

    name = "base"
    #: True for algorithms that fit a sub-model to each client's device themselves (``TrainingExecutor.fit_submodel``):
    #: the runner then skips its check that the whole model fits every device.
    fits_submodels: bool = False
    #: names the algorithm's random streams (the slot schedulers' and split rounds' client selection): a
    #: subclass inherits its parent's, so a variant that changes only a rule draws the same clients as the
    #: built-in it extends; the first named class of a line sets it to its own ``name``.  Set it to a new
    #: string to draw streams of your own.
    family: str = ""
    #: The theory this algorithm is checked against: ids of the theorem modules ``fedsim check`` evaluates
    #: (``local_sgd``, ``fedasync``, ``fedbuff``, ``cos2p``, ``fedraa``, ``gas``, ``semisfl``, ``embracingfl``; see
    #: docs/extending.md).  The runner writes it into ``summary.json`` so the check reads it from the run
    #: folder; a name never decides.  Empty: no theorem, only the trace and measured-quantity rows.
    theorems: tuple[str, ...] = ()

    @dataclass
    class Config:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.family and "name" in cls.__dict__ and "family" not in cls.__dict__:
            cls.family = cls.name  # the first named class of a line names the streams its subclasses inherit
        for hook in CLASS_HOOKS:
            if hook in cls.__dict__ and not isinstance(cls.__dict__[hook], classmethod):
                raise TypeError(f"{cls.__module__}:{cls.__qualname__}.{hook} must be a @classmethod: the framework "
                                f"calls it on the class with the Config before the algorithm exists "
                                f"(write `@classmethod` and `def {hook}(cls, config)`)")

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        """Whether this algorithm, so configured, keeps every client within its device's memory itself (the
        runner then skips its whole-model check): sub-model algorithms, or FedAvg sampling only the devices
        that fit (``only_fitting``)."""
        return cls.fits_submodels

    @classmethod
    def work(cls, config: Any) -> Work:
        """What this algorithm, so configured, asks of a run (:class:`Work`): the runner's up-front estimate
        asks here and never guesses from config field names.  The loop shapes declare theirs; an algorithm
        with other knobs (a server phase of its own: ``server_steps``) overrides this."""
        return Work()

    def __init__(self, ctx: "Context", config: Any) -> None:
        self.ctx = ctx
        self.cfg = config
        #: the server step the loop shapes apply to every rule's output (``server_lr`` / ``server_opt``, when
        #: the ``Config`` declares ``server_opt``; :class:`fedsim.algorithms.server_opt.ServerStep`)
        self.server_step_of: ServerStep | None = ServerStep.of(config)

    def server_update(self, base: State, aggregate: State) -> State:
        """The model installed after a server rule returned ``aggregate`` from ``base`` (the model its updates
        started from): the configured server step applied to it, or the aggregate itself.  The loop shapes
        call this; a rule never applies ``server_lr`` or ``server_opt`` itself."""
        return aggregate if self.server_step_of is None else self.server_step_of(base, aggregate)

    def run(self) -> Generator[simpy.events.Event, Any, None]:  # pragma: no cover - abstract
        raise NotImplementedError

    # helpers shared by the families ------------------------------------------------------------
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """What ``client`` trains in this task: the whole model by default.  Sub-model algorithms override
        this one method (a template method: HeteroFL's fixed width, FedRolex's rolling window, ...)."""
        return Assignment(round=round_)

    def dispatch(self, client: int, tasks: "TaskCounter", *, kind: Literal["weights", "delta"] = "weights",
                 round_: int | None = None, assignment: Assignment | None = None,
                 base: State | None = None) -> simpy.Process:
        """Send the current global model (or ``base``, a model of the current version the server keeps
        apart from its global one) to ``client``, record the ``dispatch`` and start its task
        (:meth:`client_job`).

        ``assignment`` defaults to :meth:`assign`; ``kind`` sets its update kind.  The process's value is
        the ``Update``, or None if the task was dropped."""
        ctx = self.ctx
        a = assignment if assignment is not None else self.assign(client, round_)
        a.kind = kind if assignment is None else a.kind
        if a.round is None:
            a.round = round_
        base, version = (ctx.global_state if base is None else base), ctx.version
        ctx.versions.record_dispatch(client, version, round_, submodel=a.submodel)
        k = tasks.next(client)
        ctx.training.note_dispatch(client, k, base, a)
        return self.launch(client, self.client_job(client, base, version, k, a), round_)

    def client_job(self, client: int, base: State, version: int, task: int,
                   assignment: Assignment) -> Generator[simpy.events.Event, Any, Update]:
        """One participation in virtual time: :func:`client_task` (download, train, upload) of ``assignment``
        on ``base``.  Override only when a participation moves more than the model and its declared extras
        (FedSwitch's teacher, FedMatch's helpers) or decides its sub-model on the device after the download
        (Co-S²P's mask phase); the dispatch, the drop and the records stay the framework's."""
        # the pipeline's generator itself, not wrapped in another: one frame less on every event of every task
        return client_task(self.ctx, client, base, version, task=task, assignment=assignment)

    def task_done(self, client: int, update: Update | None) -> None:
        """A client's task ended: its upload arrived (``update``) or it was dropped (None).  The loop shapes
        call this before the server sees the update, for an algorithm's count of work in flight (Fed-RAA's
        fragments being trained); no records, no time.  Default: nothing."""

    def before_apply(self, updates: list[Update], weights: list[float], round_: int | None) -> None:
        """Called by the loop shapes after :meth:`server_rule` and just before its result is installed
        (``VersionKeeper.apply``): the place for an algorithm's own measurements (``ctx.measure``, e.g. Fed-RAA's
        ``fragment``, Co-S²P's ``cos2p_round``) and its counters of applied updates (Fed-RAA's q(j)).  The
        framework's records are not written here.  Default: nothing."""

    def launch(self, client: int, body: Generator[simpy.events.Event, Any, Update], round_: int | None = None) -> simpy.Process:
        """Start a client process whose interruption (deadline, going offline) is recorded as a drop."""
        proc = self.ctx.env.process(guarded(self.ctx, client, body, round_))
        self.ctx.world.watch(client, proc)
        return proc

    def eligible(self, client: int) -> bool:
        """Whether ``client`` may be selected at all (every client by default; e.g. FedAvg restricted to the
        devices that fit the full model overrides this)."""
        return True

    def everyone_eligible(self) -> bool:
        """Whether :meth:`eligible` is true for every client (lets sampling skip listing them)."""
        return type(self).eligible is Algorithm.eligible

    def sample_clients(self, k: int, stream: tuple, exclude: set[int] | None = None) -> list[int]:
        """``k`` distinct clients (uniform, without replacement) among the eligible ones, excluding busy ones.

        When every client is eligible and always online (the common case, and every systems-only study of
        10^5+ devices), the draw is made on positions among the non-excluded clients without listing them
        all: the same positions ``rng.choice`` picks from the listed pool, so the same clients, in
        O(k · |exclude|) instead of O(number of clients) per call.
        """
        ctx = self.ctx
        if self.everyone_eligible() and isinstance(ctx.world.availability, AlwaysOn):
            skip = sorted(exclude) if exclude else []
            size = ctx.num_clients - len(skip)
            if size <= 0:
                return []
            rng = ctx.streams.numpy(*stream)
            picks = rng.choice(size, size=min(k, size), replace=False)
            return sorted(_nth_not_excluded(int(i), skip) for i in picks)
        pool = np.array([c for c in range(ctx.num_clients) if (not exclude or c not in exclude) and self.eligible(c)],
                        dtype=np.int64)
        pool = pool[[ctx.world.is_available(int(c)) for c in pool]] if len(pool) else pool
        if len(pool) == 0:
            return []
        rng = ctx.streams.numpy(*stream)
        k = min(k, len(pool))
        return sorted(int(c) for c in rng.choice(pool, size=k, replace=False))


def _nth_not_excluded(i: int, skip: list[int]) -> int:
    """The ``i``-th (from 0) of 0, 1, 2, ... once the sorted values ``skip`` are left out."""
    c = i
    for e in skip:
        if e <= c:
            c += 1
        else:
            break
    return c


def guarded(
    ctx: "Context", client: int, body: Generator[simpy.events.Event, Any, Update], round_: int | None = None
) -> Generator[simpy.events.Event, Any, Update | None]:
    """Run a client process; an interrupt (deadline passed, client went offline) becomes a recorded drop."""
    try:
        return (yield from body)
    except simpy.Interrupt as intr:
        ctx.versions.record_drop(client, str(intr.cause), round_)
        return None


class TaskCounter:
    """Per-client participation counter: task k of client c trains with stream ("client", c, "task", k)."""

    def __init__(self, num_clients: int) -> None:
        self._n = np.zeros(num_clients, dtype=np.int64)

    def next(self, client: int) -> int:
        k = int(self._n[client])
        self._n[client] += 1
        return k


class SyncRounds(Algorithm):
    """Loop shape: synchronous rounds (FedAvg and everything built on its rounds).

    The framework owns the loop: each round it runs the server's own phase if any (:meth:`server_phase`),
    samples the round's clients (:meth:`select`), dispatches to each the model (:meth:`client_model`) and
    its assignment (:meth:`assign`), waits for every upload or, with a deadline, for the deadline
    (stragglers are interrupted and recorded as drops), queues for an aggregation worker, and installs
    what :meth:`server_rule` returns through the one ``apply`` record (with the round's record).  When
    nobody is reachable it records an empty round and retries later.  The round size, deadline and retry
    wait are those the algorithm declares in :meth:`work` (``slots``, ``deadline_s``, ``retry_s``; from
    :class:`RoundsConfig` by default), so the estimate and the loop read one declaration.  A subclass
    decides only: :meth:`assign` (what a client trains and its local objective), :meth:`server_rule` (a
    pure function of the round's updates and the model they started from), and, if it differs,
    :meth:`select`, :meth:`server_phase` and :meth:`client_model`.  Its ``Config`` extends
    :class:`RoundsConfig`.
    """

    Config = RoundsConfig
    cfg: RoundsConfig  # the validated Config (a subclass's extends RoundsConfig)
    #: what clients send back: full weights or deltas from the model they downloaded
    update_kind: Literal["weights", "delta"] = "weights"

    @classmethod
    def work(cls, config: RoundsConfig) -> Work:
        k = int(config.clients_per_round)
        return Work(slots=k, slots_field="clients_per_round", per_version=k, retry_s=config.retry_s,
                    deadline_s=config.deadline_s)

    def select(self, k: int, round_: int) -> list[int]:
        """The clients of round ``round_``: ``k`` drawn uniformly without replacement among the eligible,
        reachable ones (stream ``("fedavg", "select", round)``, shared by every algorithm on these rounds)."""
        return self.sample_clients(k, ("fedavg", "select", round_))

    def server_phase(self, round_: int) -> Generator[simpy.events.Event, Any, None]:
        """The server's own work at the start of round ``round_``, before its clients are sampled (SemiFL's
        labeled phase): it may take server time (``world.serve``) and change the model the clients get
        (:meth:`client_model`).  Default: none."""
        return
        yield  # pragma: no cover - makes this a generator

    def client_model(self) -> State:
        """The model this round's clients download and :meth:`server_rule` starts from: the global model by
        default; a server that evaluates another model than it sends (FedSwitch's teacher) returns the one
        it sends."""
        return self.ctx.global_state

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:  # pragma: no cover
        """The next global state from a round's updates and the model they started from, and each update's
        weight in it (for the trace).  Pure: no time, no records."""
        raise NotImplementedError

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, env = self.ctx, self.ctx.env
        work = self.work(self.cfg)
        tasks = TaskCounter(ctx.num_clients)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            start = env.now
            yield from self.server_phase(rnd)
            base = self.client_model()
            clients = self.select(work.slots, rnd)
            if not clients:  # nobody reachable: try again a little later
                ctx.versions.record_round(rnd, start=start, clients=[], dropped=[])
                yield env.timeout(work.retry_s)
                continue
            ctx.world.schedule(len(clients))
            procs = {}
            for c in clients:
                procs[c] = self.dispatch(c, tasks, kind=self.update_kind, round_=rnd, base=base)
            everyone = env.all_of(list(procs.values()))
            if work.deadline_s is not None:
                yield env.any_of([everyone, env.timeout(work.deadline_s)])
            else:
                yield everyone
            dropped = [c for c, p in procs.items() if not p.triggered]
            for c in dropped:
                procs[c].interrupt("deadline")
            if dropped:
                yield env.timeout(0)  # let the interrupted processes record their drop
            for c, p in procs.items():
                self.task_done(c, p.value if p.triggered else None)
            updates = [p.value for c, p in procs.items() if c not in dropped and p.value is not None]
            if updates:
                yield from ctx.world.serve(None, ctx.aggregation_service_time(len(updates)), what="aggregate")
                new, weights = self.server_rule(updates, base)
                new = self.server_update(base, new)
                self.before_apply(updates, weights, rnd)
                record = {"start": start, "end": env.now, "clients": clients, "dropped": dropped}
                ctx.versions.apply(new, updates, weights, round_=rnd, base=base, round_record=record)
            else:
                ctx.versions.record_round(rnd, start=start, clients=clients, dropped=dropped)


class SlotScheduler(Algorithm):
    """Asynchronous scheduling shared by FedAsync, FedBuff (and CA2FL) and asynchronous split FL.

    ``concurrency`` clients work at once.  A freed slot goes to an idle, online client drawn uniformly
    from the stream ``(family, "select", k)`` (k counts launches), so variants sharing a ``family``
    dispatch the same clients until their timelines diverge; when nobody is reachable the slot retries
    after ``cfg.retry_s``.  Subclasses write ``_participate(client)`` and call ``_launch()`` when a slot
    frees.  With ``watch_participation`` the whole participation (not only the client task) is cut short
    if the client goes offline.
    """

    family = ""
    watch_participation = False
    cfg: LoopConfig  # the validated Config: ``retry_s`` (SlotsConfig, SplitSlotsConfig and FedRAAConfig extend it)

    def start_slots(self, concurrency: int) -> None:
        ctx = self.ctx
        self.tasks = TaskCounter(ctx.num_clients)
        self.active: set[int] = set()
        self.started = 0
        ctx.world.schedule(concurrency)
        for _ in range(concurrency):
            self._launch()

    def _launch(self) -> None:
        ctx = self.ctx
        if ctx.done.triggered:
            return
        self.started += 1
        picked = self.sample_clients(1, (self.family or self.name, "select", self.started), exclude=self.active)
        if not picked:  # nobody reachable now: keep the slot and try again later
            ctx.env.process(self._retry())
            return
        c = picked[0]
        self.active.add(c)
        proc = ctx.env.process(self._participate(c))
        if self.watch_participation:
            ctx.world.watch(c, proc)

    def _retry(self) -> Generator[simpy.events.Event, Any, None]:
        yield self.ctx.env.timeout(self.cfg.retry_s)
        self._launch()

    def _participate(self, client: int) -> Generator[simpy.events.Event, Any, None]:  # pragma: no cover
        raise NotImplementedError


class AsyncSlots(SlotScheduler):
    """Loop shape: asynchronous slots with a buffer (FedAsync, FedBuff, CA2FL).

    The framework owns the loop: ``concurrency`` clients train at once; each arriving update is checked
    against ``max_staleness`` (staler ones are recorded as drops), put in the buffer, and when the buffer
    holds :meth:`buffer_size_of` updates the server queues for a worker and installs what :meth:`server_rule`
    returns (through the server step, :meth:`server_update`) with the one ``apply`` record.  The rule gets,
    besides the buffer and the current model, the model each buffered update started from (``bases``).

    Class flags (a subclass sets them as class attributes; the built-ins set theirs explicitly):

    - ``update_kind = "weights"``: what clients send back (``"delta"``: differences from the model they
      downloaded);
    - ``refill_on_arrival = True``: the slot goes to the next client as soon as the upload arrives (FedBuff);
      False: once the server has applied it (FedAsync);
    - ``serve_each = False``: one ``aggregate`` service per full buffer; True: each arrival is served as the
      client's own ``apply`` request (FedAsync);
    - ``client_slots = False``: True gives every client a slot of its own that it keeps (Fed-RAA's workers:
      it starts again as soon as its last update was applied or dropped, and waits ``retry_s`` while offline).

    The defaults are FedBuff's buffered scheduling; FedAsync sets ``refill_on_arrival = False,
    serve_each = True``, and a subclass of a built-in inherits that built-in's flags.  A subclass decides
    only: :meth:`assign`, :meth:`server_rule`, :meth:`buffer_size_of`, :meth:`max_staleness` and the flags.
    Staleness is the framework's (``VersionKeeper.staleness``).  Its ``Config`` has ``concurrency`` and
    ``retry_s``.
    """

    update_kind: Literal["weights", "delta"] = "weights"
    cfg: SlotsConfig  # the validated Config: ``concurrency`` and ``retry_s``
    refill_on_arrival = True
    serve_each = False
    #: one slot per client, which the client keeps (``concurrency`` is then the number of clients)
    client_slots = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        rule = cls.__dict__.get("server_rule")
        if rule is not None and _positional_arity(rule) < 4:  # self, batch, base, bases
            raise TypeError(f"{cls.__module__}:{cls.__qualname__}.server_rule must take (self, batch, base, bases): "
                            "AsyncSlots passes the model each buffered update started from as `bases`")

    @classmethod
    def work(cls, config: SlotsConfig) -> Work:
        return Work(slots=int(config.concurrency), per_version=cls.buffer_size_of(config), retry_s=config.retry_s)

    @classmethod
    def buffer_size_of(cls, config: Any) -> int:
        """Updates the server waits for before it applies them (1: every arrival is applied on its own).  A
        class hook: called on the class with the ``Config`` (the run's estimate) as well as by the loop."""
        return 1

    def buffer_size(self) -> int:
        return self.buffer_size_of(self.cfg)

    def max_staleness(self) -> int | None:
        """Updates staler than this (in versions) are dropped on arrival (None: none are)."""
        return None

    def server_rule(self, batch: list[Update], base: State,
                    bases: list[State]) -> tuple[State, list[float]]:  # pragma: no cover - abstract
        """The next global state from a full buffer, the current model ``base`` and the model each buffered
        update started from (``bases``, parallel to ``batch``), and each update's weight in it.  Pure: no time,
        no records; the server step (``server_lr``, ``server_opt``) is applied to its output by the shape."""
        raise NotImplementedError

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        #: the buffered updates and the model each started from
        self.buffer: list[Update] = []
        self.buffer_bases: list[State] = []
        ctx = self.ctx
        if self.client_slots:
            self.tasks = TaskCounter(ctx.num_clients)
            ctx.world.schedule(ctx.num_clients)
            for c in range(ctx.num_clients):
                ctx.env.process(self._client_slot(c))
        else:
            self.start_slots(self.cfg.concurrency)
        yield ctx.done

    def _client_slot(self, c: int) -> Generator[simpy.events.Event, Any, None]:
        """Client ``c``'s own slot (``client_slots``): dispatch, arrival, again, until the run ends."""
        ctx, env = self.ctx, self.ctx.env
        while not ctx.done.triggered:
            if not ctx.world.is_available(c):
                yield env.timeout(self.cfg.retry_s)
                continue
            base = ctx.global_state
            update = yield self.dispatch(c, self.tasks, kind=self.update_kind, base=base)
            self.task_done(c, update)
            if update is not None and not ctx.done.triggered:
                yield from self._arrive(c, update, base)

    def _release(self, client: int) -> None:
        self.active.discard(client)
        self._launch()

    def _participate(self, c: int) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        base = ctx.global_state  # the model this task starts from, handed to the rule with its update
        update = yield self.dispatch(c, self.tasks, kind=self.update_kind, base=base)
        self.task_done(c, update)
        if self.refill_on_arrival:
            self._release(c)
        if update is not None and not ctx.done.triggered:
            yield from self._arrive(c, update, base)
        if not self.refill_on_arrival:
            self._release(c)

    def _arrive(self, c: int, update: Update, started_from: State) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        if self.serve_each:
            yield from ctx.world.serve(c, ctx.aggregation_service_time(1), what="apply")
        limit = self.max_staleness()
        tau = ctx.versions.staleness(update)
        if limit is not None and tau > limit:
            ctx.versions.record_drop(c, f"staleness {tau} > {limit}", None)
            return
        if ctx.done.triggered:
            return
        self.buffer.append(update)
        self.buffer_bases.append(started_from)
        if len(self.buffer) < self.buffer_size():
            return
        batch, self.buffer = self.buffer, []
        bases, self.buffer_bases = self.buffer_bases, []
        if not self.serve_each:
            yield from ctx.world.serve(None, ctx.aggregation_service_time(len(batch)), what="aggregate")
            if ctx.done.triggered:
                return
        base = ctx.global_state
        new, weights = self.server_rule(batch, base, bases)
        new = self.server_update(base, new)
        self.before_apply(batch, weights, ctx.version + 1)
        ctx.versions.apply(new, batch, weights, round_=ctx.version + 1)


def _positional_arity(fn: Any) -> int:
    """How many positional arguments ``fn`` takes (a large number for ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a builtin or an odd callable: do not judge it
        return 10**6
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 10**6
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def quorum(mu: float, n: int) -> int:
    """⌈μN⌉ (at least 1, at most N): the arrivals that open a semi-asynchronous round's clock.  A loop
    ``while cnt < μN`` stops at the first cnt ≥ μN, which is ⌈μN⌉ (⌊μN⌋ would take one update fewer whenever
    μN is not an integer)."""
    return max(1, min(n, math.ceil(mu * n - 1e-9)))


class SemiAsyncRounds(Algorithm):
    """Loop shape: semi-asynchronous rounds (Co-S²P): every client always in flight; a round closes
    :meth:`quorum` arrivals (⌈μN⌉) and then a clock (:meth:`clock` seconds) later.

    The framework owns the loop: at the start it dispatches every client (:meth:`assign`,
    :meth:`client_job`); arrivals queue at the server; round q collects them until :meth:`quorum` have
    arrived, then keeps collecting until the clock runs out (every arrival that is already queued by the
    close is taken, ones queued while the server was busy included).  The server queues for an
    aggregation worker, installs what :meth:`server_rule` returns through the one ``apply`` record with the
    round's record, and sends the new model only to the clients whose updates it consumed; the others keep
    training on their stale version, and an update arriving after the close counts towards the next
    round.  A dropped task (the client went offline) is dispatched again ``retry_s`` later.  The framework
    keeps the model each update started from (the base-state history, only the versions still in flight),
    so a staleness-aware rule gets them.  A subclass decides only: :meth:`quorum`, :meth:`clock`,
    :meth:`assign` (and :meth:`client_job` if a participation is more than the pipeline), and
    :meth:`server_rule`.  Its ``Config`` has ``retry_s``.
    """

    cfg: SemiAsyncConfig  # the validated Config: ``retry_s``

    @classmethod
    def work(cls, config: SemiAsyncConfig) -> Work:
        """Every client works at once; a round's updates are not known before it runs (at least one)."""
        return Work(retry_s=config.retry_s)

    def quorum(self) -> int:  # pragma: no cover - abstract
        """Arrivals that open the round's clock (⌈μN⌉: :func:`quorum`; 1 with no clock: asynchronous)."""
        raise NotImplementedError

    def clock(self) -> float | None:
        """Seconds the round stays open after its quorum (T_clk).  0 still takes what is already queued;
        None closes the round at the quorum itself (each round exactly :meth:`quorum` updates)."""
        return 0.0

    def server_rule(self, updates: list[Update], base: State,
                    bases: list[State]) -> tuple[State, list[float]]:  # pragma: no cover - abstract
        """The next global state from a round's updates, the current model ``base`` and the model each update
        started from (``bases``, parallel to ``updates``), and each update's weight in it.  No time, no
        records."""
        raise NotImplementedError

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, env = self.ctx, self.ctx.env
        n = ctx.num_clients
        self.tasks = TaskCounter(n)
        self.inbox: simpy.Store = simpy.Store(env)
        #: the model each version in flight started from, and how many tasks in flight started from it
        self.history: dict[int, State] = {ctx.version: ctx.global_state}
        self.pending: dict[int, int] = {}
        need, clock = self.quorum(), self.clock()
        ctx.world.schedule(n)
        for c in range(n):
            self._send(c)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            #: when the round started and when its quorum arrived (for an algorithm's own round measurements)
            self.round_start = start = env.now
            batch: list[Update] = []
            while len(batch) < need:
                batch.append((yield self.inbox.get()))
            self.quorum_at = env.now
            if clock is not None:
                yield from self._collect_until(batch, env.now + clock)
            if ctx.done.triggered:
                return
            yield from ctx.world.serve(None, ctx.aggregation_service_time(len(batch)), what="aggregate")
            if ctx.done.triggered:
                return
            new, weights = self.server_rule(batch, ctx.global_state, [self.history[u.base_version] for u in batch])
            new = self.server_update(ctx.global_state, new)
            self.before_apply(batch, weights, rnd)
            for u in batch:
                self._forget(u.base_version)
            self.history[ctx.version + 1] = new
            record = {"start": start, "end": env.now, "clients": [u.client for u in batch], "dropped": []}
            ctx.versions.apply(new, batch, weights, round_=rnd, round_record=record)
            self._forget(None)
            for u in batch:
                self._send(u.client)

    def _collect_until(self, batch: list[Update], close: float) -> Generator[simpy.events.Event, Any, None]:
        """Add to ``batch`` every arrival queued or arriving until ``close``."""
        env = self.ctx.env
        while True:
            if self.inbox.items:
                batch.append((yield self.inbox.get()))
                continue
            if env.now >= close:
                return
            get = self.inbox.get()
            got = yield get | env.timeout(close - env.now)
            if get in got:
                batch.append(got[get])
            else:
                get.cancel()
                return

    def _forget(self, version: int | None) -> None:
        """One task from ``version`` is done with it (None: none); drop the states nobody in flight started
        from (the current one is always kept)."""
        if version is not None:
            self.pending[version] = self.pending.get(version, 1) - 1
        for v in [v for v in self.history if v != self.ctx.version and self.pending.get(v, 0) <= 0]:
            del self.history[v]
            self.pending.pop(v, None)

    def _send(self, client: int) -> None:
        """Dispatch ``client`` on the current model and deliver its update to the inbox."""
        ctx = self.ctx
        version = ctx.version
        self.history.setdefault(version, ctx.global_state)
        self.pending[version] = self.pending.get(version, 0) + 1
        proc = self.dispatch(client, self.tasks)
        ctx.env.process(self._deliver(client, proc, version))

    def _deliver(self, client: int, proc: simpy.Process, version: int) -> Generator[simpy.events.Event, Any, None]:
        update = yield proc
        self.task_done(client, update)
        if update is None:  # dropped (went offline): try again later from the then-current model
            self._forget(version)
            yield self.ctx.env.timeout(self.cfg.retry_s)
            if not self.ctx.done.triggered:
                self._send(client)
            return
        yield self.inbox.put(update)
