"""The version keeper of a run: the global model's versions and the records of how each came to be.

It is the one writer of the run's bookkeeping records (``dispatch``, ``apply``, ``round``, ``aggregate``,
``drop``, ``eval``, ``slots``), the one place staleness is computed, and it installs each new version, evaluates it when due,
checkpoints it, runs the version hooks and checks the stop rules.  It computes nothing itself:
evaluation runs on the training executor (``fedsim.training``).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import simpy
import torch

from fedsim.files import writing
from fedsim.learn.accelerator import cpu_state
from fedsim.learn.state import State, coverage_counts
from fedsim.learn.submodel import SubModel
from fedsim.scenario import Scenario
from fedsim.sim.trace import Trace
from fedsim.system.world import World
from fedsim.training import TrainingExecutor

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.messages import Contribution, Update


class VersionKeeper:
    """The global model's versions and the run's records; see the module docstring.

    ``owner`` is what the version hooks are called with (the run's ``Context``)."""

    def __init__(self, scenario: Scenario, env: simpy.Environment, trace: Trace, world: World,
                 training: TrainingExecutor, initial_state: State, *, owner: Any = None,
                 progress: Callable[[float, int], None] | None = None, run_dir: Path | None = None) -> None:
        self.scenario = scenario
        self.env = env
        self.trace = trace
        self.world = world
        self.training = training
        self.owner = owner
        self.global_state: State = initial_state
        self.version = 0
        self.updates_applied = 0
        self.metrics: list[dict[str, Any]] = []
        self.client_metrics: list[dict[str, Any]] = []  # with eval.per_client: global model on each client's own data
        self.done = env.event()
        self.stop_reason = ""
        self.progress = progress
        self._last_eval_time = -math.inf
        self._wall0 = time.perf_counter()
        self.run_dir = None if run_dir is None else Path(run_dir)
        #: Called as ``hook(owner, final)`` at every snapshot (version 0, each commit, the end of the run);
        #: live probes hang here.  Hooks must not change the run.
        self.version_hooks: list[Callable[[Any, bool], None]] = []
        self._snapshot_version = -1
        self._saved_version = -1
        #: the next task id: every dispatch opens a task (0, 1, 2, ... in dispatch order), and each record of
        #: that task, through its apply or drop, carries the id as ``task``
        self._next_task = 0
        self._slots: tuple[int, int] | None = None  # the (busy, limit) of the last slots record

    def staleness(self, update: "Update | Contribution") -> int:
        """How many versions were installed since ``update``'s client downloaded its model: the one place
        staleness (in versions) is computed."""
        return self.version - update.base_version

    def record_dispatch(self, client: int, version: int, round_: int | None, *,
                        submodel: SubModel | None = None) -> int:
        """The ``dispatch`` record: ``client`` is sent model ``version`` (and, for a sub-model, its compact
        description).  The one writer of dispatch records (the vector engine's column writer aside).  Opens a
        task: returns its id, written as ``task`` here and on the task's transfers, compute, apply or drop, so
        that no reader has to pair records by client and time."""
        task = self._open_task(client)
        extra = {} if submodel is None else {"submodel": self.training.submodel_summary(submodel)}
        self.trace.emit(self.env.now, "dispatch", client=client, version=version, round=round_, task=task, **extra)
        return task

    def _open_task(self, client: int) -> int:
        task = self._next_task
        self._next_task += 1
        self.world.task_of[client] = task
        return task

    def task_of(self, update: "Update | Contribution") -> int | None:
        """The id of the task that produced ``update``: the one the framework stamped on it
        (``info["task"]``: the client pipeline, the split shapes), else its client's latest task."""
        task = (getattr(update, "info", None) or {}).get("task")
        return self.world.task_of[update.client] if task is None else task

    def record_dispatches(self, clients: np.ndarray, version: int, round_: int | None) -> None:
        """:meth:`record_dispatch` for many clients sent model ``version`` at once (whole-model tasks), written
        in bulk: the vector FedAvg engine dispatches a round of 10^6 clients through here."""
        clients = np.asarray(clients, dtype=np.int64)
        tasks = np.arange(self._next_task, self._next_task + len(clients), dtype=np.int64)
        self._next_task += len(clients)
        task_of = self.world.task_of
        for c, k in zip(clients.tolist(), tasks.tolist()):
            task_of[c] = k
        self.trace.write_columns([("dispatch", np.full(len(clients), float(self.env.now)),
                                   {"client": clients, "version": version, "round": round_, "task": tasks})])

    def record_drop(self, client: int, reason: str, round_: int | None, *,
                    update: "Update | Contribution | None" = None) -> None:
        """The ``drop`` record: ``client``'s task was lost (``reason``: the interrupt's cause, such as
        ``deadline`` or ``offline``, or why the server refused its ``update``, such as its staleness).  The one
        writer of drop records; the loop shapes call it.  ``task`` is the refused update's task, else the
        client's current one (the task an interrupt cut)."""
        task = self.task_of(update) if update is not None else self.world.task_of[client]
        self.trace.emit(self.env.now, "drop", client=client, reason=reason, round=round_, task=task)

    def record_slots(self, busy: int, limit: int) -> None:
        """The ``slots`` record: from now on ``busy`` of an asynchronous loop's ``limit`` concurrency slots are
        held.  Written only when the pair changes (a slot freed and refilled at once writes nothing), so a
        reader can tell "every slot taken" (why an idle, reachable client is not working: the concurrency
        limit) from "a slot free, nobody to fill it".  The one writer of slots records; the slot scheduler
        calls it."""
        pair = (int(busy), int(limit))
        if pair == self._slots:
            return
        self._slots = pair
        self.trace.emit(self.env.now, "slots", busy=pair[0], limit=pair[1])

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
        weight in the aggregate as the rule reports it; with gradient clipping, whether it bound: the steps it
        scaled down, ``clipped_steps`` of ``steps``, and the largest pre-clip norm ``max_grad_norm``; for a
        partial update, its ``coverage``: the
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
            if u.info.get("clipped_steps") is not None:  # whether gradient clipping bound in this task
                extra.update(clipped_steps=int(u.info["clipped_steps"]), steps=int(u.info.get("steps") or 0),
                             max_grad_norm=float(u.info.get("max_grad_norm") or 0.0))
            sub = getattr(u.info.get("assignment"), "submodel", None)
            if sub is not None:  # what the update trained, as its dispatch said (compact)
                extra["submodel"] = self.training.submodel_summary(sub)
            task = self.task_of(u)
            self.trace.emit(env.now, "apply", client=u.client, base_version=u.base_version, version=self.version + 1,
                            staleness=self.staleness(u), staleness_s=env.now - u.download_time,
                            weight=float(w), round=round_, task=task, **extra)
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
            "weight": np.asarray(weights, dtype=np.float64), "round": round_,
            "task": np.asarray([self.world.task_of[c] for c in np.asarray(clients).tolist()], dtype=np.int64)})])
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
            with writing(folder / f"v{self.version:06d}.pt", "wb") as fh:
                torch.save(cpu_state(self.global_state), fh)  # loads anywhere
            self._saved_version = self.version
        self._snapshot_version = self.version
        for hook in self.version_hooks:
            hook(self.owner, final)

    def evaluate(self, *, round_: int | None = None) -> dict[str, Any]:
        """Evaluate the current version (by the training executor) and record it: a ``metrics`` row and an
        ``eval`` record."""
        acc, loss, client_rows = self.training.evaluate(self.global_state)
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
