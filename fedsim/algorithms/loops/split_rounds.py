"""The synchronous split-learning loop (MiniBatch-SFL, S2FL, SemiSFL and its baselines): one barrier per local
iteration, then client-model averaging.  Its config base is :class:`fedsim.algorithms.configs.SplitRoundsConfig`."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Generator

import simpy

from fedsim.algorithms.algorithm import COMMON_HOOKS, TaskCounter
from fedsim.algorithms.configs import SplitRoundsConfig
from fedsim.algorithms.decisions import check_batch_sizes, check_clients
from fedsim.algorithms.loops.split import SplitAlgorithm, SplitSession
from fedsim.messages import Contribution, Work

__all__ = ["SplitRounds", "SplitRoundsState"]


class SplitRounds(SplitAlgorithm):
    """Loop shape: synchronous split-learning rounds (MiniBatch-SFL, S2FL, SemiSFL and its baselines).

    The framework owns the loop.  Each round: the server's own phase (:meth:`server_phase`, nothing by
    default); ``clients_per_round`` clients drawn by :meth:`select`; for each a task, a session and the
    ``dispatch`` record; then the exchange, one barrier per local iteration: each client downloads the
    client model (then, from the second iteration on, the gradient of its last activations, and runs its
    backward pass), runs its forward pass and uploads; once the last upload has arrived the server queues
    for a worker for :meth:`step_flops` and takes its step.  After ``self.steps`` iterations the clients
    upload their client models, the server queues for the aggregation, averages them (eq. 10) and installs
    the new version through the one ``apply`` with the round's ``Contribution`` s and its ``round`` record.
    A round with no client and no server phase records an empty round and waits ``idle_s``.

    A subclass decides only: :meth:`client_forward` and :meth:`client_backward` (the client's computation),
    :meth:`server_step` (the server's, setting each session's ``grad``), and if it differs :meth:`select`,
    :meth:`batch_sizes`, :meth:`begin`, :meth:`begin_round`, :meth:`open_session`, :meth:`end_client_phase`,
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
        """Iteration ``e``'s forward pass on the client (set ``s.act``): (samples of the pass, bytes uploaded)."""
        raise NotImplementedError

    def client_backward(self, s: SplitSession, e: int) -> None:  # pragma: no cover - abstract
        """The client's step for iteration ``e`` with the gradient the server returned (``s.grad``)."""
        raise NotImplementedError

    def step_flops(self, samples: int) -> float:
        """FLOPs of one server step on ``samples`` activations."""
        return self.costs.server_total * samples

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
        applied = [Contribution(client=s.client, base_version=s.base_version, download_time=s.download_time)
                   for s in sessions]
        self.install(applied, round_=rnd, round_record={"start": start, "end": env.now, "clients": clients,
                                                        "dropped": []})

    def _exchange(self, loop: "SplitRoundsState", clients: list[int], rnd: int) -> Generator[simpy.events.Event, Any, list[SplitSession]]:
        ctx, env, timing = self.ctx, self.ctx.env, self.timing
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
            ctx.versions.record_dispatch(c, base_version, rnd)
        for e in range(self.steps + 1):
            yield env.all_of([env.process(self._iteration(s, e)) for s in sessions])
            if e == self.steps:
                break
            yield from ctx.serve(None, timing.server_seconds(self.step_flops(sum(len(s.batches[e]) for s in sessions))),
                                 what=self.step_what)
            self.server_step(sessions, e)
        yield from ctx.serve(None, timing.aggregation_seconds(len(clients), self.costs.client_model_bytes), what="aggregate")
        if ctx.done.triggered:
            return sessions
        if self.training:
            self.wc = self.aggregate_clients([s.opt.state() for s in sessions], clients)
        self.end_client_phase(sessions)
        return sessions

    def _iteration(self, s: SplitSession, e: int) -> Generator[simpy.events.Event, Any, None]:
        """One client's part of iteration ``e``: the last gradient down and the backward pass (or, first, the
        model download), then the forward pass and the upload (or, last, the client model's upload)."""
        timing, c = self.timing, s.client
        if e == 0:
            yield from timing.download(c, self.download_models * self.costs.client_model_bytes,
                                       version=s.base_version)
        else:
            b = len(s.batches[e - 1])
            yield from timing.download(c, timing.gradient_bytes(b))
            self.client_backward(s, e - 1)
            yield from timing.client_pass(c, "backward", b)
        if e == self.steps:
            yield from timing.upload(c, self.costs.client_model_bytes, "model")
            return
        samples, nbytes = self.client_forward(s, e)
        yield from timing.client_pass(c, "forward", samples)
        yield from timing.upload(c, nbytes, self.upload_what)




@dataclass
class SplitRoundsState:
    """One run's :class:`SplitRounds` bookkeeping (kept by the loop, readable from a hook as ``self.loop``): each
    client's task counter."""

    tasks: TaskCounter
