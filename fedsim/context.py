"""The run-time context an algorithm works in: the run's environment and its two workers.

- the environment: the scenario, the SimPy environment, the world (devices, links, server), the data and
  its partition, the named random streams and the trace;
- ``training`` (:class:`fedsim.training.TrainingExecutor`): runs local trainings and evaluations and knows
  what they cost;
- ``versions`` (:class:`fedsim.versions.VersionKeeper`): the global model's versions and the one writer
  of the bookkeeping records (dispatch, apply, round, aggregate, drop, eval, slots), staleness and the stop rules.

An algorithm reads the current model as ``ctx.global_state`` and ``ctx.version`` and waits on
``ctx.done``; it changes them only through ``ctx.versions``.  It never writes to the trace and never times
a transfer itself: the world writes every world record (``download``, ``compute``, ``upload``, ``server``,
``offline``), the version keeper every bookkeeping record (``dispatch``, ``apply``, ``round``, ``aggregate``,
``drop``, ``eval``, ``slots``), the client pipeline times a participation through :meth:`Context.run_client`, and an
algorithm's own measurements go through :meth:`Context.measure` and :meth:`Context.measurement`, which stamp
them with the virtual time and refuse the framework's record kinds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Generator, NamedTuple, Sequence

import numpy as np
import simpy

from fedsim.learn.data import FederatedData
from fedsim.learn.models import BlockModel
from fedsim.learn.state import State
from fedsim.scenario import Scenario
from fedsim.sim.executor import Executor
from fedsim.sim.rng import Streams
from fedsim.sim.trace import Trace
from fedsim.system.split_timing import SplitTiming
from fedsim.system.world import World
from fedsim.training import ClientWork, TrainingExecutor, TrainResult
from fedsim.versions import VersionKeeper


#: the record kinds the framework writes (the world and the version keeper): an algorithm's measurement may not
#: take one of these names, so a reader of the trace can trust them
FRAMEWORK_KINDS = frozenset({"dispatch", "download", "compute", "upload", "server", "offline", "apply", "aggregate",
                             "round", "drop", "eval", "slots"})


def _check_kind(kind: str) -> None:
    if kind in FRAMEWORK_KINDS:
        raise ValueError(f"a measurement cannot be named {kind!r}: the framework writes the {kind!r} records "
                         f"(pick another name; reserved: {', '.join(sorted(FRAMEWORK_KINDS))})")


class ClientRun(NamedTuple):
    """What :meth:`Context.run_client` reports of one participation it timed."""

    result: TrainResult
    #: bytes of the update's upload
    upload_bytes: int
    #: when the download of the model (the work's ``download_bytes``, after any extra downloads) started
    download_start: float
    #: when the update's upload ended (before any extra uploads)
    upload_end: float


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

    # ------------------------------------------------------------------------------ the server's time
    def server_time(self, flops: float) -> float:
        """Seconds the server's profile takes for ``flops`` (one worker), for a :meth:`serve` of its own."""
        return self.world.server_compute_time(flops)

    def serve(self, client: int | None, service_s: float, *, what: str,
              task: int | None = None) -> Generator[Any, Any, Any]:
        """Queue for a server worker and hold it ``service_s`` seconds of virtual time (``yield from``): the one
        way a loop or an algorithm takes server time (an aggregation, an ``apply`` request, SemiFL's labeled
        phase, a split server step).  The world writes the ``server`` record with its wait and service;
        ``client`` is the client the work is for (None: the server's own); ``task`` the task whose update it
        serves when that is not the client's current one (an update served after its client was dispatched
        again: ``ctx.versions.task_of(update)``)."""
        return self.world.serve(client, service_s, what=what, task=task)

    def split_timing(self, convention: Any, costs: Any) -> SplitTiming:
        """The timing of split learning's steps over this run's world (:class:`fedsim.system.split_timing.SplitTiming`)
        under ``convention`` (an algorithm's ``timing`` config) for the cut model's ``costs``."""
        return SplitTiming(self.world, convention, costs)

    # ------------------------------------------------------------------------------ the client pipeline
    def run_client(self, client: int, work: ClientWork, *, version: int | None,
                   upload_bytes: Callable[[TrainResult], int], extra_downloads: Sequence[int] = (),
                   extra_uploads: Sequence[tuple[int, str]] = ()) -> Generator[Any, Any, ClientRun]:
        """One client participation in virtual time, timed by the world (the client pipeline,
        ``fedsim.algorithms.pipeline.client_task``, calls this; an algorithm calls ``client_task``).

        ``extra_downloads`` (bytes each, in order: FedSwitch's teacher, FedMatch's helpers) and then the work's
        ``download_bytes`` travel to the client, each its own ``download`` record of model ``version``; when the
        client starts computing, ``work.start()`` runs and the device is held for its FLOPs (one ``compute``
        record); then ``upload_bytes(result)`` bytes travel back, then each of ``extra_uploads`` (bytes, what).
        Returns a :class:`ClientRun`.  An interrupt (deadline, going offline) propagates to the caller."""
        world, env = self.world, self.env
        for nbytes in extra_downloads:
            yield from world.download(client, nbytes, version=version)
        t0 = env.now
        yield from world.download(client, work.download_bytes, version=version)
        pending = work.start()  # at the virtual moment computing starts, on the model downloaded
        yield from world.compute(client, pending.flops, what="train", steps=pending.steps, samples=pending.samples)
        result = pending.result()  # a remote executor computed it meanwhile; in process it is already done
        nbytes = upload_bytes(result)
        yield from world.upload(client, nbytes)
        arrived = env.now
        for extra, what in extra_uploads:
            yield from world.upload(client, extra, what=what)
        return ClientRun(result, nbytes, t0, arrived)

    # ------------------------------------------------------------------------------ measurements
    def measure(self, kind: str, **fields: Any) -> None:
        """Record one of the algorithm's own measurements (Co-S²P's ``cos2p_round``, Fed-RAA's ``fragment``)
        at the current virtual time, with ``fields`` in the order given.  The framework's record kinds
        (:data:`FRAMEWORK_KINDS`) are refused: those are written by the world and the version keeper."""
        _check_kind(kind)
        self.trace.emit(self.env.now, kind, **fields)

    def measurement(self, kind: str, fields: Sequence[str]) -> Callable[..., None]:
        """A writer for a measurement taken often (GAS's ``activation`` per minibatch): ``write(v1, v2, ...)``
        records one, the values in the order of ``fields``, stamped with the current virtual time; the same
        record :meth:`measure` would write, for less.  Values must be plain (int, float, str, bool, None) or
        lists not changed afterwards."""
        _check_kind(kind)
        names = tuple(fields)
        trace, env = self.trace, self.env
        handle = trace.kind(kind, names)
        n = len(names)

        def write(*values: Any) -> None:
            if len(values) != n:
                raise TypeError(f"measurement {kind!r} takes {n} values ({', '.join(names)}), got {len(values)}")
            trace.put(handle, (env.now, *values))

        return write
