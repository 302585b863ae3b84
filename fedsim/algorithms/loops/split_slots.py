"""The asynchronous split-learning loop (async SFL, GAS): slots, the per-minibatch server service, the activation
and model buffers.  Its config base is :class:`fedsim.algorithms.configs.SplitSlotsConfig`."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Generator

import simpy
import torch

from fedsim.algorithms.algorithm import COMMON_HOOKS, TaskCounter, guarded
from fedsim.algorithms.configs import SplitSlotsConfig
from fedsim.algorithms.loops.slots import SlotScheduler, SlotsState
from fedsim.algorithms.loops.split import SplitAlgorithm, SplitSession
from fedsim.messages import Contribution, Exchange, ExchangeError, Work

__all__ = ["SplitSlots", "SplitSlotsState"]


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
    buffer, and the slot is refilled once the buffer has taken it.  Under a declared :meth:`exchange` without a
    gradient (``fedsim.messages.Exchange``), an iteration runs the forward pass, the upload only where declared
    (into the activation buffer, with no per-minibatch service), the client's own loss (``aux_flops``) and
    :meth:`client_backward`; nothing comes back and the client never waits.  A client going offline mid-way is a
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

    Config = SplitSlotsConfig
    watch_participation = True  # going offline cuts the whole participation short
    hooks = COMMON_HOOKS | {"eligible", "begin", "open_session", "client_forward", "server_gradient", "client_backward",
                            "plan_server_step", "server_step"}
    #: the running loop's state (set when the loop starts; read it from a hook, never change it)
    loop: "SplitSlotsState"

    @classmethod
    def work(cls, config: Any) -> Work:
        buffer = config.model_buffer or config.concurrency  # the aggregator's Q_c, as run() takes it
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
        loop = SplitSlotsState(TaskCounter(ctx.num_clients), q_s=cfg.activation_buffer or cfg.concurrency,
                               q_c=cfg.model_buffer or cfg.concurrency)
        self.loop = loop
        self.begin()
        loop.activations = simpy.Store(env)
        loop.models = simpy.Store(env)
        env.process(self._server_steps(loop))
        env.process(self._aggregator(loop))
        self.start_slots(loop, cfg.concurrency)
        yield ctx.done

    def _participate(self, loop: "SplitSlotsState", c: int) -> Generator[simpy.events.Event, Any, None]:  # type: ignore[override]
        """One participation; going offline mid-way is a recorded drop, and either way the slot is refilled."""
        yield from guarded(self.ctx, c, self._session(loop, c))
        loop.active.discard(c)
        self._launch(loop)

    def _session(self, loop: "SplitSlotsState", c: int) -> Generator[simpy.events.Event, Any, None]:
        ctx, env, timing = self.ctx, self.ctx.env, self.timing
        task = loop.tasks.next(c)
        base_version, t0 = ctx.version, env.now
        wc = self.wc  # the client model as dispatched
        trace_task = ctx.versions.record_dispatch(c, base_version, None)
        yield from timing.download(c, self.costs.client_model_bytes, version=base_version)
        batches = self.schedule(c, task, self.local_iterations(c), ctx.training.sgd.batch_size)
        s = SplitSession(c, task, base_version, t0, batches, self.client_optimizer(wc) if self.training else None,
                         trace_task=trace_task)
        self.open_session(s)
        instant = timing.instant_downloads
        plan = self.exchange_plan
        server_flops = self._server_flops()
        for e, idx in enumerate(s.batches):
            b = len(idx)
            msg = self.client_forward(s, e)
            if (msg is not None) != plan.uploads(e):
                raise self.refusal("client_forward", ExchangeError(
                    f"client_forward returned {'a message' if msg is not None else 'None'} on local iteration {e}, "
                    f"which the declared exchange {'does not upload' if msg is not None else 'uploads'} "
                    f"(upload_every={plan.upload_every}: iterations 0, {plan.upload_every}, ...); return the "
                    "message the server receives exactly there, else None (self.uploads(e) says which)"))
            yield from timing.client_pass(c, "forward", b)
            if plan.answered(e):
                yield from timing.upload(c, timing.activation_upload_bytes(b), "activations")
                yield from ctx.serve(c, timing.server_seconds(server_flops * b), what="sfl-gradient")
                s.grad = self.server_gradient(s, msg, e)
                yield loop.activations.put(msg)
                if instant:
                    timing.instant_download(c, timing.gradient_bytes(b))
                else:
                    yield from timing.download(c, timing.gradient_bytes(b))
                self.client_backward(s, e)
                yield from timing.client_pass(c, "backward", b)
                continue
            if plan.uploads(e):  # nothing comes back: the activations join the buffer and the client goes on
                yield from timing.upload(c, timing.activation_upload_bytes(b), "activations")
                yield loop.activations.put(msg)
            s.grad = None  # the client's step is on its own loss
            if plan.aux_flops > 0:
                yield from timing.client_aux(c, plan.aux_flops, b)
            self.client_backward(s, e)
            yield from timing.client_pass(c, "backward", b)
        yield from timing.upload(c, self.costs.client_model_bytes, "model")
        ack = env.event()
        yield loop.models.put(_ClientModel(s, s.opt.state() if s.opt is not None else None, ack))
        while True:  # the model has arrived: going offline while it waits to be aggregated loses nothing
            try:
                yield ack
                break
            except simpy.Interrupt:
                continue

    def _server_flops(self) -> float:
        """FLOPs per sample of the server's work on activations (a gradient's service, a buffer step): the
        exchange's ``server_flops``, else the server part's forward and backward."""
        per = self.exchange_plan.server_flops
        return self.costs.server_total if per is None else float(per)

    def check_exchange(self, plan: Exchange) -> None:
        super().check_exchange(plan)
        if plan.wait and not plan.gradient:
            raise ExchangeError("Exchange(gradient=False, wait=True) on SplitSlots: asynchronous split learning has "
                                "no barrier, so a client with no gradient coming has nothing to wait for; declare "
                                "wait=False (or leave it None)")

    def _server_steps(self, loop: "SplitSlotsState") -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        while True:
            msgs: list[Any] = []
            for _ in range(loop.q_s):
                msgs.append((yield loop.activations.get()))
            samples, plan = self.plan_server_step(msgs)
            yield from ctx.serve(None, self.timing.server_seconds(self._server_flops() * samples), what="sfl-step")
            if ctx.done.triggered:
                return
            self.server_step(msgs, plan)

    def _aggregator(self, loop: "SplitSlotsState") -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        buf: list[_ClientModel] = []
        while True:
            msg: _ClientModel = yield loop.models.get()
            buf.append(msg)
            if len(buf) < loop.q_c:
                msg.ack.succeed()
                continue
            batch, buf = buf, []
            yield from ctx.serve(None, self.timing.aggregation_seconds(len(batch), self.costs.client_model_bytes),
                                 what="aggregate")
            if ctx.done.triggered:
                return
            clients = [m.session.client for m in batch]
            if self.training:
                self.wc = self.aggregate_clients([m.state for m in batch], clients)
            self.install([Contribution(client=m.session.client, base_version=m.session.base_version,
                                       download_time=m.session.download_time, info={"task": m.session.trace_task})
                          for m in batch],
                         round_=ctx.version + 1)
            msg.ack.succeed()


@dataclass
class SplitSlotsState(SlotsState):
    """One run's :class:`SplitSlots` bookkeeping: the slots' (:class:`SlotsState`), the two buffer sizes and the
    activation and model queues."""

    q_s: int = 1
    q_c: int = 1
    activations: simpy.Store | None = None
    models: simpy.Store | None = None
