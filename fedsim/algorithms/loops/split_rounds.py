"""The synchronous split-learning loop (MiniBatch-SFL, S2FL, local-loss SFL, SemiSFL and its baselines): the
declared exchange (by default one barrier per local iteration), then client-model averaging.  Its config base
is :class:`fedsim.algorithms.configs.SplitRoundsConfig`."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Generator

import simpy

from fedsim.algorithms.algorithm import COMMON_HOOKS, TaskCounter
from fedsim.algorithms.configs import SplitRoundsConfig
from fedsim.algorithms.decisions import check_batch_sizes, check_clients
from fedsim.algorithms.loops.split import SplitAlgorithm, SplitSession
from fedsim.messages import Contribution, Exchange, ExchangeError, Work

__all__ = ["SplitRounds", "SplitRoundsState"]


class SplitRounds(SplitAlgorithm):
    """Loop shape: synchronous split-learning rounds (MiniBatch-SFL, S2FL, SemiSFL and its baselines).

    The framework owns the loop.  Each round: the server's own phase (:meth:`server_phase`, nothing by
    default); ``clients_per_round`` clients drawn by :meth:`select`; for each a task, a session and the
    ``dispatch`` record; then the exchange, by default one barrier per local iteration: each client downloads
    the client model (then, from the second iteration on, the gradient of its last activations, and runs its
    backward pass), runs its forward pass and uploads; once the last upload has arrived the server queues
    for a worker for :meth:`step_flops` and takes its step.  The algorithm's :meth:`exchange` may declare
    otherwise (``fedsim.messages.Exchange``): uploads every k-th iteration only (no server step, no
    download on the others), no gradient back (the client's step on its own loss, its ``aux_flops``
    charged on the client), and no barrier (the server steps on each uploading iteration once every
    client's activations arrived, while the clients go on).  After ``self.steps`` iterations the clients
    upload their client models, the server queues for the aggregation, averages them (eq. 10) and installs
    the new version through the one ``apply`` with the round's ``Contribution`` s and its ``round`` record.
    A round with no client and no server phase records an empty round and waits ``idle_s``.

    A subclass decides only: :meth:`client_forward` and :meth:`client_backward` (the client's computation),
    :meth:`server_step` (the server's, setting each session's ``grad``), and if it differs :meth:`exchange`,
    :meth:`select`, :meth:`batch_sizes`, :meth:`begin`, :meth:`begin_round`, :meth:`open_session`, :meth:`end_client_phase`,
    :meth:`server_phase` and :meth:`end_round`.  ``steps`` (set in ``setup``) is the common number of local
    iterations; its ``Config`` has ``clients_per_round``.
    """

    Config = SplitRoundsConfig
    #: the model a client downloads at the start of a round, in client models (SemiSFL: bottom and teacher)
    download_models = 1
    #: what a client's per-iteration upload is called in the trace
    upload_what = "activations"
    #: what a server step is called in the trace
    step_what = "sfl-step"
    #: a round installs a version even with no client (the server trained on its own)
    version_per_round = False
    #: the wait after a round in which nothing happened (no client reachable, no server phase)
    idle_s = 1.0
    #: local iterations per round, common to the round's clients (a subclass sets it in ``setup``)
    steps: int = 0
    hooks = COMMON_HOOKS | {"eligible", "select", "batch_sizes", "begin", "begin_round", "open_session",
                            "client_forward", "client_backward", "step_flops", "server_step", "end_client_phase",
                            "server_phase", "end_round"}
    #: names the client-selection stream: algorithms sharing it draw the same clients (paired comparisons)
    family = ""
    #: the running loop's state (set when the loop starts; read it from a hook, never change it)
    loop: "SplitRoundsState"

    @classmethod
    def work(cls, config: Any) -> Work:
        k = int(config.clients_per_round)
        return replace(super().work(config), slots=k, slots_field="clients_per_round", per_version=max(1, k))

    # ---------------------------------------------------------------------------------- decisions
    def select(self, rnd: int) -> list[int]:
        """The clients of round ``rnd``: drawn uniformly among the reachable ones from the stream
        ``(family, "select", rnd)`` (shared by the algorithms of one family, for paired comparisons)."""
        k = int(self.cfg.clients_per_round)
        if k <= 0 or self.steps <= 0:
            return []
        return self.sample_clients(k, (self.family or self.name, "select", rnd))

    def batch_sizes(self, clients: list[int]) -> list[int]:
        """Each client's minibatch size this round (the scenario's batch size by default)."""
        return [self.ctx.training.sgd.batch_size] * len(clients)

    def begin(self) -> None:
        """Before the first round: the algorithm's own measurements or state (nothing by default)."""

    def begin_round(self, clients: list[int], rnd: int) -> None:
        """Before the dispatch: what the algorithm prepares for this round's clients (nothing by default)."""

    def open_session(self, s: SplitSession, rnd: int) -> None:
        """A new participation (its batches and optimizer are set): per-client extras (nothing by default)."""

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:  # pragma: no cover - abstract
        """Iteration ``e``'s forward pass on the client (set ``s.act``): (samples of the pass, bytes uploaded);
        the bytes are 0 exactly on the iterations the declared exchange does not upload (``self.uploads(e)``)."""
        raise NotImplementedError

    def client_backward(self, s: SplitSession, e: int) -> None:  # pragma: no cover - abstract
        """The client's step for iteration ``e`` with the gradient the server returned (``s.grad``), or, on an
        iteration the exchange gives no gradient (``s.grad`` None), with a loss of its own."""
        raise NotImplementedError

    def step_flops(self, samples: int) -> float:
        """FLOPs of one server step on ``samples`` activations: the exchange's ``server_flops`` per sample, else
        the server part's forward and backward."""
        per = self.exchange_plan.server_flops
        return (self.costs.server_total if per is None else per) * samples

    def server_step(self, sessions: list[SplitSession], e: int) -> None:  # pragma: no cover - abstract
        """Iteration ``e``'s server step on every session's activations; sets each session's ``grad``."""
        raise NotImplementedError

    def end_client_phase(self, sessions: list[SplitSession]) -> None:
        """After the client models were averaged into ``wc`` (nothing by default)."""

    def server_phase(self, rnd: int) -> Generator[simpy.events.Event, Any, bool]:
        """The server's own work before the clients (none by default); True if it trained."""
        return False
        yield  # pragma: no cover - makes this a generator

    def end_round(self, rnd: int, clients: list[int]) -> None:
        """After the round's work, before its version is installed (measurement records; nothing by default)."""

    # ---------------------------------------------------------------------------------- the loop
    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx = self.ctx
        self.loop = loop = SplitRoundsState(TaskCounter(ctx.num_clients))
        self.begin()
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            yield from self._round(loop, rnd)

    def _round(self, loop: "SplitRoundsState", rnd: int) -> Generator[simpy.events.Event, Any, None]:
        ctx, env = self.ctx, self.ctx.env
        start = env.now
        worked = yield from self.server_phase(rnd)
        clients = check_clients(self, "select", self.select(rnd), int(self.cfg.clients_per_round))
        sessions = (yield from self._exchange(loop, clients, rnd)) if clients else []
        if ctx.done.triggered:
            return
        self.end_round(rnd, clients)
        if not clients and not worked:
            yield env.timeout(self.idle_s)  # nothing to do this round: let virtual time pass
        if not clients and not self.version_per_round:
            ctx.versions.record_round(rnd, start=start, clients=[], dropped=[])
            return
        applied = [Contribution(client=s.client, base_version=s.base_version, download_time=s.download_time,
                                info={"task": s.trace_task}) for s in sessions]
        self.install(applied, round_=rnd, round_record={"start": start, "end": env.now, "clients": clients,
                                                        "dropped": []})

    def _exchange(self, loop: "SplitRoundsState", clients: list[int], rnd: int) -> Generator[simpy.events.Event, Any, list[SplitSession]]:
        ctx, env, timing = self.ctx, self.ctx.env, self.timing
        plan = self.exchange_plan
        base_version = ctx.version
        sizes = check_batch_sizes(self, "batch_sizes", self.batch_sizes(clients), len(clients))
        self.begin_round(clients, rnd)
        ctx.world.schedule(len(clients))
        sessions = []
        for c, b in zip(clients, sizes):
            task = loop.tasks.next(c)
            s = SplitSession(c, task, base_version, env.now, self.schedule(c, task, self.steps, b),
                             self.client_optimizer(self.wc) if self.training else None)
            self.open_session(s, rnd)
            sessions.append(s)
            s.trace_task = ctx.versions.record_dispatch(c, base_version, rnd)
        if plan.wait:  # a barrier after every uploading iteration: the server steps, then the clients go on
            first = 0
            for stop in [e for e in range(self.steps) if plan.uploads(e)] + [self.steps]:
                yield env.all_of([env.process(self._iterations(s, first, stop)) for s in sessions])
                if stop == self.steps:
                    break
                yield from self._server_turn(sessions, stop)
                first = stop + 1
        else:  # nobody waits: the server steps on each uploading iteration once every client's activations arrived
            sent = [{e: env.event() for e in range(self.steps) if plan.uploads(e)} for _ in sessions]
            yield env.all_of([env.process(self._iterations(s, 0, self.steps, arrivals))
                              for s, arrivals in zip(sessions, sent)] + [env.process(self._server_follows(sent))])
        yield from ctx.serve(None, timing.aggregation_seconds(len(clients), self.costs.client_model_bytes), what="aggregate")
        if ctx.done.triggered:
            return sessions
        if self.training:
            self.wc = self.aggregate_clients([s.opt.state() for s in sessions], clients)
        self.end_client_phase(sessions)
        return sessions

    def _server_turn(self, sessions: list[SplitSession], e: int) -> Generator[simpy.events.Event, Any, None]:
        """The server's step on iteration ``e``'s activations: its queue and service, then :meth:`server_step`."""
        yield from self.ctx.serve(None, self.timing.server_seconds(self.step_flops(sum(len(s.batches[e]) for s in sessions))),
                                  what=self.step_what)
        self.server_step(sessions, e)

    def _server_follows(self, sent: list[dict[int, simpy.Event]]) -> Generator[simpy.events.Event, Any, None]:
        """The server when the clients do not wait: each uploading iteration's step once all its activations
        arrived, on the sessions as they were when those activations left (the clients have moved on)."""
        env = self.ctx.env
        for e in sorted(sent[0]) if sent else []:
            arrived = yield env.all_of([events[e] for events in sent])
            yield from self._server_turn([arrived[events[e]] for events in sent], e)

    def _iterations(self, s: SplitSession, first: int, last: int,
                    arrivals: dict[int, simpy.Event] | None = None) -> Generator[simpy.events.Event, Any, None]:
        """One client's iterations ``first`` to ``last`` (the last one the client model's upload), without a wait."""
        for e in range(first, last + 1):
            yield from self._iteration(s, e, arrivals)

    def _iteration(self, s: SplitSession, e: int,
                   arrivals: dict[int, simpy.Event] | None = None) -> Generator[simpy.events.Event, Any, None]:
        """One client's part of iteration ``e``, as the exchange declares it: the last iteration's gradient down
        and the backward pass (or, first, the model download); then the forward pass and, on an uploading
        iteration, the upload; on an iteration with no gradient back, the client's own loss (``aux_flops``) and
        backward pass; last, the client model's upload.  ``arrivals``: when the clients do not wait, the
        events that hand each upload (the session as it left) to the server."""
        timing, c, plan = self.timing, s.client, self.exchange_plan
        if e == 0:
            yield from timing.download(c, self.download_models * self.costs.client_model_bytes,
                                       version=s.base_version)
        elif plan.answered(e - 1):
            b = len(s.batches[e - 1])
            yield from timing.download(c, timing.gradient_bytes(b))
            self.client_backward(s, e - 1)
            yield from timing.client_pass(c, "backward", b)
        if e == self.steps:
            yield from timing.upload(c, self.costs.client_model_bytes, "model")
            return
        samples, nbytes = self.client_forward(s, e)
        if (nbytes > 0) != plan.uploads(e):
            raise self.refusal("client_forward", ExchangeError(_upload_mismatch(nbytes, e, plan.upload_every)))
        yield from timing.client_pass(c, "forward", samples)
        if plan.uploads(e):
            yield from timing.upload(c, nbytes, self.upload_what)
            if arrivals is not None:
                arrivals[e].succeed(replace(s))
        if not plan.answered(e):
            s.grad = None  # no gradient for this iteration: the client's step is on its own loss
            b = len(s.batches[e])
            if plan.aux_flops > 0:
                yield from timing.client_aux(c, plan.aux_flops, b)
            self.client_backward(s, e)
            yield from timing.client_pass(c, "backward", b)

    def check_exchange(self, plan: Exchange) -> None:
        super().check_exchange(plan)
        if plan.server_flops is not None and type(self).step_flops is not SplitRounds.step_flops:
            raise ExchangeError(f"Exchange(server_flops={plan.server_flops!r}) and an overridden step_flops(): "
                                "one of the two would be ignored; declare the server step's cost in one place")


def _upload_mismatch(nbytes: int, e: int, k: int) -> str:
    """Why a ``client_forward``'s upload size contradicts the declared exchange."""
    if nbytes > 0:
        return (f"client_forward returned {nbytes} bytes to upload on local iteration {e}, which the declared "
                f"exchange does not upload (upload_every={k}: iterations 0, {k}, {2 * k}, ...); return 0 bytes there "
                f"(self.uploads(e) says which iterations upload)")
    return (f"client_forward returned {nbytes} bytes on local iteration {e}, which the declared exchange uploads "
            f"(upload_every={k}); an upload carries the activations' bytes (self.timing.activation_upload_bytes)")


@dataclass
class SplitRoundsState:
    """One run's :class:`SplitRounds` bookkeeping (kept by the loop, readable from a hook as ``self.loop``): each
    client's task counter."""

    tasks: TaskCounter
