"""Slot scheduling shared by the asynchronous loops (:class:`~fedsim.algorithms.loops.async_slots.AsyncSlots`,
:class:`~fedsim.algorithms.loops.split_slots.SplitSlots`): ``concurrency`` slots, each refilled by an idle,
reachable client drawn from a named stream, retrying after ``retry_s`` when nobody is reachable."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator

import simpy

from fedsim.algorithms.algorithm import Algorithm, TaskCounter
from fedsim.algorithms.configs import LoopConfig

__all__ = ["SlotScheduler", "SlotsState"]


@dataclass
class SlotsState:
    """One run's slot bookkeeping (kept by the loop, not by the algorithm): each client's task counter, the
    clients holding a slot, and how many slots were launched (the draw's counter)."""

    tasks: TaskCounter
    active: set[int] = field(default_factory=set)
    started: int = 0
    #: the number of slots (0 until :meth:`SlotScheduler.start_slots` opens them)
    limit: int = 0


class SlotScheduler(Algorithm):
    """Asynchronous scheduling shared by FedAsync, FedBuff (and CA2FL) and asynchronous split FL.

    ``concurrency`` clients work at once.  A freed slot goes to an idle, online client drawn uniformly
    from the stream ``(family, "select", k)`` (k counts launches), so variants sharing a ``family``
    dispatch the same clients until their timelines diverge; when nobody is reachable the slot retries
    after ``cfg.retry_s``.  Subclasses write ``_participate(loop, client)`` and call ``_launch(loop)`` when a
    slot frees; ``loop`` is the run's :class:`SlotsState` (also readable as ``self.loop`` from a hook).  With
    ``watch_participation`` the whole participation (not only the client task) is cut short if the client
    goes offline.
    """

    family = ""
    watch_participation = False
    cfg: LoopConfig  # the validated Config: ``retry_s`` (SlotsConfig, SplitSlotsConfig and FedRAAConfig extend it)
    #: the running loop's state (set when the loop starts; read it from a hook, never change it)
    loop: SlotsState

    def start_slots(self, loop: SlotsState, concurrency: int) -> None:
        """Open ``concurrency`` slots of the run whose state is ``loop``."""
        self.loop = loop
        self.ctx.world.schedule(concurrency)
        for _ in range(concurrency):
            self._launch(loop)
        loop.limit = int(concurrency)  # (set after the first launches: one slots record for all of them)
        self.ctx.versions.record_slots(len(loop.active), loop.limit)

    def _launch(self, loop: SlotsState) -> None:
        ctx = self.ctx
        if ctx.done.triggered:
            return
        loop.started += 1
        picked = self.sample_clients(1, (self.family or self.name, "select", loop.started), exclude=loop.active)
        if not picked:  # nobody reachable now: keep the slot and try again later
            ctx.env.process(self._retry(loop))
            if loop.limit:  # the slots held: why an idle client waits (a full house) or not (the framework writes it)
                ctx.versions.record_slots(len(loop.active), loop.limit)
            return
        c = picked[0]
        loop.active.add(c)
        proc = ctx.env.process(self._participate(loop, c))
        if self.watch_participation:
            ctx.world.watch(c, proc)
        if loop.limit:
            ctx.versions.record_slots(len(loop.active), loop.limit)

    def _retry(self, loop: SlotsState) -> Generator[simpy.events.Event, Any, None]:
        yield self.ctx.env.timeout(self.cfg.retry_s)
        self._launch(loop)

    def _participate(self, loop: SlotsState, client: int) -> Generator[simpy.events.Event, Any, None]:  # pragma: no cover
        raise NotImplementedError
