"""What a local training hands back: its result (:class:`TrainResult`), a training that has started
(:class:`PendingTraining`) and a client program for the framework to time (:class:`ClientWork`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from fedsim.learn.state import Mask, State
from fedsim.learn.sgd import TrainStats

__all__ = ["ClientWork", "PendingTraining", "TrainResult"]


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
