"""The shared pieces every algorithm is built from: one pipeline from assignment to applied update.

    Assignment (what this client trains) → client_task (download, train, upload, in virtual time)
    → Update (tensors + coverage mask) → a pure server rule → ``Context.apply`` (records every ``apply``
    event, staleness and coverage once, and installs the new version)

- ``Assignment``: the sub-model a client trains (``fedsim.learn.submodel.SubModel``; None = the whole
  model), the update kind, and an optional local trainer replacing plain local SGD.
- ``Update``: what a client sends back (tensors, coverage mask, weight, base version, costs).
- The one averaging rule and the other state-dict operations live in ``fedsim.learn.state``.
- staleness functions (constant, polynomial, hinge, fedbuff) that scale an update's weight by its staleness.
- ``client_task``: download → local training → upload as one SimPy process, with training computed at
  the virtual moment the client starts computing, on the model it downloaded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Generator, Literal, Mapping

import numpy as np
import simpy
import torch

from fedsim.config import positive, require
from fedsim.learn.state import Mask, State, state_sub
from fedsim.learn.train import TrainStats
from fedsim.system.availability import AlwaysOn

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.learn.models import BlockModel
    from fedsim.learn.submodel import SubModel
    from fedsim.runtime import Context


@dataclass
class TrainOutcome:
    """What a custom local trainer reports: its statistics and, when it knows them better than the
    extracted module's measured FLOPs × samples (extra heads, cached forwards), its FLOPs."""

    stats: TrainStats
    flops: float | None = None


#: ``trainer(module, ctx, client, indices, generator) -> TrainOutcome``: trains ``module`` (the client's
#: extracted sub-model, already holding the downloaded weights) in place.
LocalTrainer = Callable[["BlockModel", "Context", int, np.ndarray, torch.Generator], TrainOutcome]


@dataclass
class Assignment:
    """What one client does in one task.

    ``submodel`` None trains the whole model; otherwise the client downloads, trains and uploads only the
    sub-model's tensors, and its update's mask covers exactly the entries it trained.  ``trainer`` None is
    plain local SGD (``fedsim.learn.train.local_sgd``) with the scenario's ``train`` settings.
    """

    submodel: "SubModel | None" = None
    kind: Literal["weights", "delta"] = "weights"
    trainer: LocalTrainer | None = None
    round: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Update:
    """A client's contribution.

    ``tensors`` holds full weights (``kind='weights'``) or differences from the base model
    (``kind='delta'``), in full-model shapes.  ``mask`` maps a tensor name to a 0/1 tensor of the same
    shape (entries the client trained); a name absent from ``mask`` or ``mask=None`` means fully covered,
    a name absent from ``tensors`` not covered at all.  ``weight`` is a scalar or a per-tensor mapping
    (Co-S²P scores segments separately).
    """

    client: int
    tensors: State
    kind: Literal["weights", "delta"] = "weights"
    mask: Mask | None = None
    weight: float | dict[str, float] = 1.0
    base_version: int = 0
    download_time: float = 0.0
    num_samples: int = 0
    costs: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def weight_of(self, name: str) -> float:
        if isinstance(self.weight, Mapping):
            return float(self.weight.get(name, 0.0))
        return float(self.weight)

    def scaled(self, factor: float) -> "Update":
        """The same update with every weight multiplied by ``factor`` (e.g. a staleness factor)."""
        w = ({k: float(v) * factor for k, v in self.weight.items()} if isinstance(self.weight, Mapping)
             else float(self.weight) * factor)
        return Update(client=self.client, tensors=self.tensors, kind=self.kind, mask=self.mask, weight=w,
                      base_version=self.base_version, download_time=self.download_time,
                      num_samples=self.num_samples, costs=self.costs, info=self.info)


# ------------------------------------------------------------------------------------------ staleness

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge", "fedbuff")


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


def validate_staleness(kind: str, a: float, b: float, prefix: str) -> None:
    require(kind in STALENESS_FUNCTIONS, f"{prefix}.staleness", f"got {kind!r} (allowed: {', '.join(STALENESS_FUNCTIONS)})")
    positive(a, f"{prefix}.staleness_a", allow_zero=True)
    positive(b, f"{prefix}.staleness_b", allow_zero=True)


# ------------------------------------------------------------------------------------------ client task

def client_task(
    ctx: "Context",
    client: int,
    base_state: State,
    base_version: int,
    *,
    task: int,
    assignment: Assignment | None = None,
) -> Generator[simpy.events.Event, Any, Update]:
    """One client participation: download the (sub-)model, train locally, upload the update.

    ``base_state`` is the model the server sent at dispatch (the caller snapshots it); training runs
    on exactly that, at the virtual moment computing starts, with the client's own batch stream for
    this task.  Bytes in both directions are those of the tensors that travel (the sub-model's only).
    Returns the ``Update``; a SimPy interrupt (deadline, going offline) propagates to the caller, who
    records the drop.
    """
    a = assignment if assignment is not None else Assignment()
    world = ctx.world
    t0 = ctx.env.now
    down = ctx.download_bytes(a)
    yield from world.download(client, down, version=base_version)
    pending = ctx.start_training(client, base_state, task=task, assignment=a)
    yield from world.compute(client, pending.flops, what="train", steps=pending.steps, samples=pending.samples)
    result = pending.result()  # a remote executor computed it meanwhile; in-process it is already done
    tensors = state_sub(result.state, base_state) if a.kind == "delta" else result.state
    nbytes = ctx.update_bytes(tensors) if result.upload_bytes is None else result.upload_bytes
    yield from world.upload(client, nbytes)
    return Update(
        client=client,
        tensors=tensors,
        kind=a.kind,
        mask=result.mask,
        weight=float(result.stats.samples if ctx.weight_by_samples else 1.0),
        base_version=base_version,
        download_time=t0,
        num_samples=int(len(ctx.parts[client])),
        costs={"flops": result.flops, "bytes_up": nbytes, "bytes_down": down},
        info={"loss": result.stats.mean_loss, "steps": result.stats.steps, "round": a.round, "assignment": a},
    )


class Algorithm:
    """Base class: an algorithm is a SimPy process over a Context, with a validated Config."""

    name = "base"
    #: True for algorithms that fit a sub-model to each client's device themselves (``Context.fit_submodel``):
    #: the runner then skips its check that the whole model fits every device.
    fits_submodels: bool = False

    @dataclass
    class Config:
        pass

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        """Whether this algorithm, so configured, keeps every client within its device's memory itself (the
        runner then skips its whole-model check): sub-model algorithms, or FedAvg sampling only the devices
        that fit (``only_fitting``)."""
        return cls.fits_submodels

    #: the config field holding the SGD steps the server takes on its own per model version (None: none)
    server_phase_field: str | None = None

    @classmethod
    def server_phase_steps(cls, config: Any) -> int:
        """SGD steps the server takes on its own per model version (not per client task), at most: the
        runner's work estimate adds them to the clients' steps so a huge server phase is refused up front."""
        return int(getattr(config, cls.server_phase_field)) if cls.server_phase_field else 0

    def __init__(self, ctx: "Context", config: Any) -> None:
        self.ctx = ctx
        self.cfg = config

    def run(self) -> Generator[simpy.events.Event, Any, None]:  # pragma: no cover - abstract
        raise NotImplementedError

    # helpers shared by the families ------------------------------------------------------------
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """What ``client`` trains in this task: the whole model by default.  Sub-model algorithms override
        this one method (a template method: HeteroFL's fixed width, FedRolex's rolling window, ...)."""
        return Assignment(round=round_)

    def dispatch(self, client: int, tasks: "TaskCounter", *, kind: Literal["weights", "delta"] = "weights",
                 round_: int | None = None, assignment: Assignment | None = None) -> simpy.Process:
        """Send the current global model to ``client`` and start its task (download → train → upload).

        ``assignment`` defaults to :meth:`assign`; ``kind`` sets its update kind.  The process's value is
        the ``Update``, or None if the task was dropped."""
        ctx = self.ctx
        a = assignment if assignment is not None else self.assign(client, round_)
        a.kind = kind if assignment is None else a.kind
        if a.round is None:
            a.round = round_
        base, version = ctx.global_state, ctx.version
        extra = {} if a.submodel is None else {"submodel": ctx.submodel_summary(a.submodel)}
        ctx.trace.emit(ctx.env.now, "dispatch", client=client, version=version, round=round_, **extra)
        k = tasks.next(client)
        ctx.note_dispatch(client, k, base, a)
        body = client_task(ctx, client, base, version, task=k, assignment=a)
        return self.launch(client, body, round_)

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
        ctx.trace.emit(ctx.env.now, "drop", client=client, reason=str(intr.cause), round=round_)
        return None


class TaskCounter:
    """Per-client participation counter: task k of client c trains with stream ("client", c, "task", k)."""

    def __init__(self, num_clients: int) -> None:
        self._n = np.zeros(num_clients, dtype=np.int64)

    def next(self, client: int) -> int:
        k = int(self._n[client])
        self._n[client] += 1
        return k


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

