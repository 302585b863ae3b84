"""The synchronous-rounds loop (FedAvg and everything built on its rounds): sample, dispatch, wait (or the
deadline), serve the aggregation, apply.  Its config base is :class:`fedsim.algorithms.configs.RoundsConfig`."""
from __future__ import annotations

from typing import Any, Generator, Literal

import simpy

from fedsim.algorithms.algorithm import COMMON_HOOKS, UPDATE_HOOKS, Algorithm, TaskCounter
from fedsim.algorithms.configs import RoundsConfig
from fedsim.algorithms.decisions import check_clients, check_rule
from fedsim.learn.state import State
from fedsim.messages import Update, Work

__all__ = ["SyncRounds"]


class SyncRounds(Algorithm):
    """Loop shape: synchronous rounds (FedAvg and everything built on its rounds).

    The framework owns the loop: each round it runs the server's own phase if any (:meth:`server_phase`),
    samples the round's clients (:meth:`select`), dispatches to each the model (:meth:`client_model`) and
    its assignment (:meth:`assign`), waits for every upload or, with a deadline, for the deadline
    (stragglers are interrupted and recorded as drops), queues for an aggregation worker, and installs
    what :meth:`server_rule` returns through the one ``apply`` record (with the round's record).  When
    nobody is reachable it records an empty round and retries later.  The round size, deadline and retry
    wait are those the algorithm declares in :meth:`work` (``slots``, ``deadline_s``, ``retry_s``; from
    :class:`RoundsConfig` by default), so the estimate and the loop read one declaration.  A subclass
    decides only: :meth:`assign` (what a client trains and its local objective), :meth:`server_rule` (a
    pure function of the round's updates and the model they started from), and, if it differs,
    :meth:`select`, :meth:`server_phase` and :meth:`client_model`.  Its ``Config`` extends
    :class:`RoundsConfig`.
    """

    Config = RoundsConfig
    cfg: RoundsConfig  # the validated Config (a subclass's extends RoundsConfig)
    #: what clients send back: full weights or deltas from the model they downloaded
    update_kind: Literal["weights", "delta"] = "weights"
    hooks = COMMON_HOOKS | UPDATE_HOOKS | {"eligible", "select", "server_phase", "client_model", "server_rule"}

    @classmethod
    def work(cls, config: RoundsConfig) -> Work:
        k = int(config.clients_per_round)
        return Work(slots=k, slots_field="clients_per_round", per_version=k, retry_s=config.retry_s,
                    deadline_s=config.deadline_s)

    def select(self, k: int, round_: int) -> list[int]:
        """The clients of round ``round_``: ``k`` drawn uniformly without replacement among the eligible,
        reachable ones (stream ``("fedavg", "select", round)``, shared by every algorithm on these rounds)."""
        return self.sample_clients(k, ("fedavg", "select", round_))

    def server_phase(self, round_: int) -> Generator[simpy.events.Event, Any, None]:
        """The server's own work at the start of round ``round_``, before its clients are sampled (SemiFL's
        labeled phase): it may take server time (``ctx.serve``) and change the model the clients get
        (:meth:`client_model`).  Default: none."""
        return
        yield  # pragma: no cover - makes this a generator

    def client_model(self) -> State:
        """The model this round's clients download and :meth:`server_rule` starts from: the global model by
        default; a server that evaluates another model than it sends (FedSwitch's teacher) returns the one
        it sends."""
        return self.ctx.global_state

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:  # pragma: no cover
        """The next global state from a round's updates and the model they started from, and each update's
        weight in it (for the trace).  Pure: no time, no records."""
        raise NotImplementedError

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, env = self.ctx, self.ctx.env
        work = self.work(self.cfg)
        tasks = TaskCounter(ctx.num_clients)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            start = env.now
            yield from self.server_phase(rnd)
            base = self.client_model()
            k = ctx.num_clients if work.all_clients else work.slots  # all_clients: every client is the round
            clients = check_clients(self, "select", self.select(k, rnd), k)
            if not clients:  # nobody reachable: try again a little later
                ctx.versions.record_round(rnd, start=start, clients=[], dropped=[])
                yield env.timeout(work.retry_s)
                continue
            ctx.world.schedule(len(clients))
            procs = {}
            for c in clients:
                procs[c] = self.dispatch(c, tasks, kind=self.update_kind, round_=rnd, base=base)
            everyone = env.all_of(list(procs.values()))
            if work.deadline_s is not None:
                yield env.any_of([everyone, env.timeout(work.deadline_s)])
            else:
                yield everyone
            dropped = [c for c, p in procs.items() if not p.triggered]
            for c in dropped:
                procs[c].interrupt("deadline")
            if dropped:
                yield env.timeout(0)  # let the interrupted processes record their drop
            for c, p in procs.items():
                self.task_done(c, p.value if p.triggered else None)
            updates = [p.value for c, p in procs.items() if c not in dropped and p.value is not None]
            if updates:
                yield from ctx.serve(None, ctx.aggregation_service_time(len(updates)), what="aggregate")
                new, weights = check_rule(self, "server_rule", self.server_rule(updates, base), len(updates))
                new = self.server_update(base, new)
                self.before_apply(updates, weights, rnd)
                record = {"start": start, "end": env.now, "clients": clients, "dropped": dropped}
                ctx.versions.apply(new, updates, weights, round_=rnd, base=base, round_record=record)
            else:
                ctx.versions.record_round(rnd, start=start, clients=clients, dropped=dropped)

