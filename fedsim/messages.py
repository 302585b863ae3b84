"""The messages between the framework and an algorithm: what a client is asked to do (``Assignment``), what
it sends back (``Update``, or a ``Contribution`` when the server trained on what it sent), what a custom local
trainer reports (``TrainOutcome``), what an algorithm asks of a run (``Work``) and what one local iteration of
split learning moves and computes (``Exchange``).

Plain data at the bottom of the import graph: this module imports nothing from fedsim at run time (the
``fedsim.learn`` names below are type hints only, from modules that never import the framework), so the
framework's workers (``fedsim.training``, ``fedsim.versions``) and the loop shapes can all name these types
without importing each other.  ``fedsim.algorithms`` re-exports every name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

import math

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from fedsim.learn.models import BlockModel
    from fedsim.learn.state import Mask, State
    from fedsim.learn.submodel import SubModel
    from fedsim.learn.sgd import LocalObjective, SampleOrder, TrainStats

__all__ = ["Assignment", "Contribution", "Exchange", "ExchangeError", "LocalTrainer", "TrainOutcome", "Update", "Work"]


@dataclass
class TrainOutcome:
    """What a custom local trainer reports: its statistics and, when it knows them better than the
    extracted module's measured FLOPs × samples (extra heads, cached forwards), its FLOPs."""

    stats: TrainStats
    flops: float | None = None


@dataclass(frozen=True)
class Work:
    """What one configured algorithm asks of a run, declared by the algorithm (``Algorithm.work``) for the
    estimate the runner makes before anything runs.

    ``slots``: clients working at once (``slots_field`` names the setting); ``per_version``: updates one
    model version needs; ``steps_per_task``: fixed local SGD steps per task (None: from each client's data
    and the ``train`` settings; ``steps_field`` names the setting); ``server_steps``: the server's own SGD
    steps per version (``server_field``); ``exchanges_per_step``: split learning, where every local step
    exchanges messages with the server; ``retry_s`` and ``deadline_s``: the algorithm's idle retry and
    round deadline, checked against the run's horizon and its fastest task; ``all_clients``: every client
    may hold a task in every model version (semi-asynchronous rounds, Fed-RAA's rounds over every reachable
    client), so ``slots`` and ``per_version`` are the run's number of clients."""

    slots: int = 1
    slots_field: str = "concurrency"
    per_version: int = 1
    steps_per_task: int | None = None
    steps_field: str = "train.local_steps"
    server_steps: int = 0
    server_field: str | None = None
    exchanges_per_step: bool = False
    retry_s: float | None = None
    deadline_s: float | None = None
    all_clients: bool = False


#: ``trainer(module, training, client, indices, generator) -> TrainOutcome``: trains ``module`` (the client's
#: extracted sub-model, already holding the downloaded weights) in place; ``training`` is the run's
#: :class:`fedsim.training.TrainingExecutor` (data, SGD settings, costs), typed ``Any`` here because the
#: executor itself names these messages (naming it back would be an import cycle).
LocalTrainer = Callable[["BlockModel", Any, int, np.ndarray, "torch.Generator"], TrainOutcome]


@dataclass
class Assignment:
    """What one client does in one task.

    ``submodel`` None trains the whole model; otherwise the client downloads, trains and uploads only the
    sub-model's tensors, and its update's mask covers exactly the entries it trained.  ``trainer`` None is
    plain local SGD (``fedsim.learn.sgd.local_sgd``) with the scenario's ``train`` settings and the
    assignment's ``objective``; a ``trainer`` replaces the whole local step.
    """

    submodel: "SubModel | None" = None
    kind: Literal["weights", "delta"] = "weights"
    trainer: LocalTrainer | None = None
    round: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    #: what plain local SGD minimises beyond the task loss, and the extra tensors it sends each way
    #: (``fedsim.learn.sgd.LocalObjective``; e.g. FedProx's ``Proximal``)
    objective: LocalObjective | None = None
    #: the entries the update covers when the trainer knows better than the sub-model (a whole model trained
    #: under a gradient mask: Fed-RAA's frozen fragments); None: what training reports
    coverage: Mask | None = None
    #: the order in which local SGD visits the client's samples, pass by pass (``fedsim.learn.sgd.SampleOrder``:
    #: ``order(n_samples, epoch, generator) -> permutation``); None: a fresh random permutation per pass from the
    #: client's stream.  A task with an order trains in process (not batched, not on a remote executor).
    order: SampleOrder | None = None

    def __post_init__(self) -> None:
        if self.trainer is not None and self.objective is not None:  # else the objective would be ignored
            raise ValueError("an Assignment takes a trainer or an objective, not both: a trainer replaces the whole "
                             "local step, so give the objective to the trainer itself")
        if self.trainer is not None and self.order is not None:  # else the order would be ignored
            raise ValueError("an Assignment takes a trainer or a sample order, not both: a trainer replaces the whole "
                             "local step, so let the trainer order its own batches")


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
    #: extra tensors the client's local objective uploaded with the update (``LocalObjective.upload``)
    extras: State = field(default_factory=dict)

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
                      num_samples=self.num_samples, costs=self.costs, info=self.info, extras=self.extras)


@dataclass(frozen=True)
class Contribution:
    """A client's part in a new version when what it sent is not a model update (split learning: the server
    trained on its activations): who, from which version, downloaded when.  ``VersionKeeper.apply`` records it
    as it records an ``Update``."""

    client: int
    base_version: int
    download_time: float
    mask: None = None
    info: dict[str, Any] = field(default_factory=dict)


class ExchangeError(ValueError):
    """A split exchange that cannot run as declared.  Raised where the declaration is made; the split shapes
    report it as an error in the method that declared it (``exchange``, ``client_forward``)."""


@dataclass(frozen=True)
class Exchange:
    """What each local iteration of split learning moves and computes, declared by the algorithm
    (``SplitAlgorithm.exchange``) so that the split shapes time and cost exactly that, and nothing else.

    ``upload_every`` (k ≥ 1): the client uploads its activations on local iterations 0, k, 2k, … (⌈E/k⌉ uploads
    in E iterations); on the others nothing goes up, no gradient comes down and the server takes no step.
    ``gradient``: the server answers each upload with the gradient of those activations, which the client's
    backward pass uses; without it the client trains on a loss of its own (an auxiliary head) on every
    iteration, and the server trains on what arrives.  ``wait``: the client waits for the server before its
    next iteration (``SplitRounds``: the barrier after an upload; a gradient is always waited for); None: wait
    exactly when a gradient comes back.  ``aux_flops``: FLOPs per sample of the client's own loss (the
    auxiliary head's forward and backward), charged on the client on every iteration without a gradient.
    ``server_flops``: FLOPs per sample of a server step (None: the cut model's server part, forward and
    backward).  The default is classic split learning: every iteration uploads, waits and gets a gradient.
    """

    upload_every: int = 1
    gradient: bool = True
    wait: bool | None = None
    aux_flops: float = 0.0
    server_flops: float | None = None

    def __post_init__(self) -> None:
        k = self.upload_every
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ExchangeError(f"Exchange.upload_every must be a whole number >= 1 (upload on every k-th local "
                                f"iteration), got {k!r}")
        for name in ("gradient", "wait"):
            v = getattr(self, name)
            if not isinstance(v, bool) and not (name == "wait" and v is None):
                raise ExchangeError(f"Exchange.{name} must be true or false, got {v!r}")
        for name in ("aux_flops", "server_flops"):
            v = getattr(self, name)
            if v is None and name == "server_flops":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or not math.isfinite(v) or v < 0:
                raise ExchangeError(f"Exchange.{name} must be a finite number of FLOPs per sample >= 0, got {v!r}")
        object.__setattr__(self, "upload_every", int(k))
        if self.wait is None:
            object.__setattr__(self, "wait", self.gradient)
        if self.gradient and not self.wait:
            raise ExchangeError("Exchange(gradient=True, wait=False): a gradient the client does not wait for would "
                                "reach a client that has moved on, which is not modelled; declare wait=True, or "
                                "gradient=False for a client that trains on its own loss")
        if self.gradient and self.upload_every == 1 and self.aux_flops > 0:
            raise ExchangeError(f"Exchange(aux_flops={self.aux_flops!r}) with a gradient on every iteration: the "
                                "auxiliary head would never run; declare gradient=False or upload_every > 1, or "
                                "aux_flops=0")

    def uploads(self, e: int) -> bool:
        """Whether local iteration ``e`` (from 0) uploads activations."""
        return e % self.upload_every == 0

    def answered(self, e: int) -> bool:
        """Whether local iteration ``e`` gets a gradient back (else the client trains on its own loss)."""
        return self.gradient and e % self.upload_every == 0

    def uploads_in(self, steps: int) -> int:
        """How many of ``steps`` local iterations upload: ⌈steps / k⌉."""
        return -(-int(steps) // self.upload_every)
