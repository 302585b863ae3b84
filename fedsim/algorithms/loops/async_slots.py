"""The asynchronous-slots loop (FedAsync, FedBuff, CA2FL, Fed-RAA): slots, a buffer, the server's service, apply.
Its config base is :class:`fedsim.algorithms.configs.SlotsConfig`."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Generator, Literal

import simpy

from fedsim.algorithms.configs import SlotsConfig
from fedsim.algorithms.decisions import check_rule, check_staleness_limit
from fedsim.algorithms.algorithm import COMMON_HOOKS, UPDATE_HOOKS, TaskCounter
from fedsim.algorithms.loops.slots import SlotScheduler, SlotsState
from fedsim.learn.state import State
from fedsim.messages import Update, Work

__all__ = ["AsyncSlots", "AsyncSlotsState"]


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
    Config = SlotsConfig
    cfg: SlotsConfig  # the validated Config: ``concurrency`` and ``retry_s``
    refill_on_arrival = True
    serve_each = False
    #: one slot per client, which the client keeps (``concurrency`` is then the number of clients)
    client_slots = False
    hooks = COMMON_HOOKS | UPDATE_HOOKS | {"eligible", "buffer_size_of", "max_staleness", "server_rule"}
    #: the running loop's state (set when the loop starts; read it from a hook, never change it)
    loop: "AsyncSlotsState"

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
        ctx = self.ctx
        loop = AsyncSlotsState(TaskCounter(ctx.num_clients))
        if self.client_slots:
            self.loop = loop
            ctx.world.schedule(ctx.num_clients)
            for c in range(ctx.num_clients):
                ctx.env.process(self._client_slot(loop, c))
        else:
            self.start_slots(loop, self.cfg.concurrency)
        yield ctx.done

    def _client_slot(self, loop: "AsyncSlotsState", c: int) -> Generator[simpy.events.Event, Any, None]:
        """Client ``c``'s own slot (``client_slots``): dispatch, arrival, again, until the run ends."""
        ctx, env = self.ctx, self.ctx.env
        while not ctx.done.triggered:
            if not ctx.world.is_available(c):
                yield env.timeout(self.cfg.retry_s)
                continue
            base = ctx.global_state
            update = yield self.dispatch(c, loop.tasks, kind=self.update_kind, base=base)
            self.task_done(c, update)
            if update is not None and not ctx.done.triggered:
                yield from self._arrive(loop, c, update, base)

    def _release(self, loop: "AsyncSlotsState", client: int) -> None:
        loop.active.discard(client)
        self._launch(loop)

    def _participate(self, loop: "AsyncSlotsState", c: int) -> Generator[simpy.events.Event, Any, None]:  # type: ignore[override]
        ctx = self.ctx
        base = ctx.global_state  # the model this task starts from, handed to the rule with its update
        update = yield self.dispatch(c, loop.tasks, kind=self.update_kind, base=base)
        self.task_done(c, update)
        if self.refill_on_arrival:
            self._release(loop, c)
        if update is not None and not ctx.done.triggered:
            yield from self._arrive(loop, c, update, base)
        if not self.refill_on_arrival:
            self._release(loop, c)

    def _arrive(self, loop: "AsyncSlotsState", c: int, update: Update,
                started_from: State) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        if self.serve_each:
            yield from ctx.serve(c, ctx.aggregation_service_time(1), what="apply", task=ctx.versions.task_of(update))
        limit = check_staleness_limit(self, "max_staleness", self.max_staleness())
        tau = ctx.versions.staleness(update)
        if limit is not None and tau > limit:
            ctx.versions.record_drop(c, f"staleness {tau} > {limit}", None, update=update)
            return
        if ctx.done.triggered:
            return
        loop.buffer.append(update)
        loop.buffer_bases.append(started_from)
        if len(loop.buffer) < self.buffer_size():
            return
        batch, loop.buffer = loop.buffer, []
        bases, loop.buffer_bases = loop.buffer_bases, []
        if not self.serve_each:
            yield from ctx.serve(None, ctx.aggregation_service_time(len(batch)), what="aggregate")
            if ctx.done.triggered:
                return
        base = ctx.global_state
        new, weights = check_rule(self, "server_rule", self.server_rule(batch, base, bases), len(batch))
        new = self.server_update(base, new)
        self.before_apply(batch, weights, ctx.version + 1)
        ctx.versions.apply(new, batch, weights, round_=ctx.version + 1)


@dataclass
class AsyncSlotsState(SlotsState):
    """One run's :class:`AsyncSlots` bookkeeping: the slots' (:class:`SlotsState`), the buffered updates and
    the model each started from."""

    buffer: list[Update] = field(default_factory=list)
    buffer_bases: list[State] = field(default_factory=list)


def _positional_arity(fn: Any) -> int:
    """How many positional arguments ``fn`` takes (a large number for ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a builtin or an odd callable: do not judge it
        return 10**6
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 10**6
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

