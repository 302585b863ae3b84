"""The semi-asynchronous-rounds loop (Co-S²P): every client in flight, a round closes ⌈μN⌉ arrivals and a clock
later.  Its config base is :class:`fedsim.algorithms.configs.SemiAsyncConfig`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Generator

import simpy

from fedsim.algorithms.algorithm import COMMON_HOOKS, UPDATE_HOOKS, Algorithm, TaskCounter
from fedsim.algorithms.configs import SemiAsyncConfig
from fedsim.algorithms.decisions import check_clock, check_quorum, check_rule
from fedsim.learn.state import State
from fedsim.messages import Update, Work

__all__ = ["SemiAsyncRounds", "SemiAsyncState", "quorum"]


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

    Config = SemiAsyncConfig
    cfg: SemiAsyncConfig  # the validated Config: ``retry_s``
    #: every client is always in flight, so no selection: ``eligible`` is not among them
    hooks = COMMON_HOOKS | UPDATE_HOOKS | {"quorum", "clock", "server_rule"}
    #: the running loop's state (set when the loop starts; read it from a hook, never change it)
    loop: "SemiAsyncState"

    @classmethod
    def work(cls, config: SemiAsyncConfig) -> Work:
        """Every client works at once; a round's updates are not known before it runs (at least one)."""
        return Work(retry_s=config.retry_s, all_clients=True)

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
        self.loop = loop = SemiAsyncState(TaskCounter(n), simpy.Store(env), {ctx.version: ctx.global_state})
        need, clock = check_quorum(self, "quorum", self.quorum()), check_clock(self, "clock", self.clock())
        ctx.world.schedule(n)
        for c in range(n):
            self._send(loop, c)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            loop.round_start = start = env.now
            batch: list[Update] = []
            while len(batch) < need:
                batch.append((yield loop.inbox.get()))
            loop.quorum_at = env.now
            if clock is not None:
                yield from self._collect_until(loop, batch, env.now + clock)
            if ctx.done.triggered:
                return
            yield from ctx.serve(None, ctx.aggregation_service_time(len(batch)), what="aggregate")
            if ctx.done.triggered:
                return
            new, weights = check_rule(self, "server_rule", self.server_rule(
                batch, ctx.global_state, [loop.history[u.base_version] for u in batch]), len(batch))
            new = self.server_update(ctx.global_state, new)
            self.before_apply(batch, weights, rnd)
            for u in batch:
                self._forget(loop, u.base_version)
            loop.history[ctx.version + 1] = new
            record = {"start": start, "end": env.now, "clients": [u.client for u in batch], "dropped": []}
            ctx.versions.apply(new, batch, weights, round_=rnd, round_record=record)
            self._forget(loop, None)
            for u in batch:
                self._send(loop, u.client)

    def _collect_until(self, loop: "SemiAsyncState", batch: list[Update],
                       close: float) -> Generator[simpy.events.Event, Any, None]:
        """Add to ``batch`` every arrival queued or arriving until ``close``."""
        env = self.ctx.env
        while True:
            if loop.inbox.items:
                batch.append((yield loop.inbox.get()))
                continue
            if env.now >= close:
                return
            get = loop.inbox.get()
            got = yield get | env.timeout(close - env.now)
            if get in got:
                batch.append(got[get])
            else:
                get.cancel()
                return

    def _forget(self, loop: "SemiAsyncState", version: int | None) -> None:
        """One task from ``version`` is done with it (None: none); drop the states nobody in flight started
        from (the current one is always kept)."""
        if version is not None:
            loop.pending[version] = loop.pending.get(version, 1) - 1
        for v in [v for v in loop.history if v != self.ctx.version and loop.pending.get(v, 0) <= 0]:
            del loop.history[v]
            loop.pending.pop(v, None)

    def _send(self, loop: "SemiAsyncState", client: int) -> None:
        """Dispatch ``client`` on the current model and deliver its update to the inbox."""
        ctx = self.ctx
        version = ctx.version
        loop.history.setdefault(version, ctx.global_state)
        loop.pending[version] = loop.pending.get(version, 0) + 1
        proc = self.dispatch(client, loop.tasks)
        ctx.env.process(self._deliver(loop, client, proc, version))

    def _deliver(self, loop: "SemiAsyncState", client: int, proc: simpy.Process,
                 version: int) -> Generator[simpy.events.Event, Any, None]:
        update = yield proc
        self.task_done(client, update)
        if update is None:  # dropped (went offline): try again later from the then-current model
            self._forget(loop, version)
            yield self.ctx.env.timeout(self.cfg.retry_s)
            if not self.ctx.done.triggered:
                self._send(loop, client)
            return
        yield loop.inbox.put(update)


@dataclass
class SemiAsyncState:
    """One run's :class:`SemiAsyncRounds` bookkeeping (kept by the loop, readable from a hook as ``self.loop``):
    each client's task counter, the arrivals' inbox, the model each version in flight started from
    (``history``) and how many tasks in flight started from it (``pending``), and when the current round
    started and when its quorum arrived (for an algorithm's own round measurements)."""

    tasks: TaskCounter
    inbox: simpy.Store
    history: dict[int, State]
    pending: dict[int, int] = field(default_factory=dict)
    round_start: float = 0.0
    quorum_at: float = 0.0
