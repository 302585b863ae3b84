"""Fed-RAA (Zhang et al. 2024, "A Resource-Adaptive Approach for Federated Learning under
Resource-Constrained Environments", arXiv 2406.13351): asynchronous training of model fragments.

The hidden units of the designated layers (the model's width groups; by default all of them) are split
into M disjoint fragments with the ratios of Table 4 (or given ones).  Fragment j is the sub-model that
keeps units S_j of every designated group: for an MLP the rows W1[S_j, :], b1[S_j] and the columns
W2[:, S_j], plus the non-split parameters (the output bias), which every fragment carries and mixes.
Every client runs its own loop (``AsyncSlots`` with a slot per client): idle → the scheduler picks a
fragment (``fedraa_schedulers``; Fed-RAA's ``assign``) → download the fragment → local training → upload.  Arrivals queue at the server (``ctx.serve``) and are applied
one at a time with FedAsync's rule restricted to the fragment's entries:
θʲ ← (1 − α_t) θʲ + α_t θʲ_new, α_t = α · s(staleness).  q(j) counts the updates applied to fragment j.

Choices where the paper is silent (documented in docs/architecture.md):

- ``mode: isolated`` (default, IST-style): the client's module holds only the fragment's units, so its
  FLOPs and bytes are the fragment's (the paper's cost ‖θʲ‖·‖Dⁿ‖/cmp_n).  ``mode: frozen``: the client
  downloads the full model and trains only the fragment's entries (gradient mask), paying full-model
  compute and traffic; its update still covers only the fragment.
- ``staleness_clock``: the staleness given to s(·): ``fragment`` (default: updates of this fragment
  since dispatch; Algorithm 1's worker takes its timestamp τ ← q(j), the fragment's own counter, and the
  proof bounds the per-fragment delay τ − (q − 1)) or ``global`` (server updates of any fragment since
  dispatch, the Updater's t − τ read with t the global epoch).  Both are recorded in the trace either way.
- ``K`` is in seconds of estimated round trip (download + compute + upload at nominal rates, no
  jitter); unset means K_off of the offline assignment on the same cost estimates.
- ``rho``: the proximal weight of the local objective f + ρ/2‖θ − θ_q‖² (0: plain local SGD).
- ``aggregation: sync`` is Sync Fed-RAA: every round each available client gets a fragment (Gre-RAA,
  counting this round's assignments as in flight so the round spreads over fragments), the server waits
  for all, averages the returned copies of each fragment (entries covered by several clients are
  averaged) and mixes that average in with the same rule as async, θʲ ← (1 − α_t) θʲ + α_t θʲ_avg,
  α_t = α·s(τ) with τ on the same clock (0 in a barrier round): the paper's Sync Fed-RAA differs only in
  waiting ("all other aspects remaining identical").  Uncovered entries keep their value; one update is
  counted for every fragment trained in the round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Literal

import numpy as np

from fedsim.algorithms.loops.async_slots import AsyncSlots

from fedsim.algorithms.loops.sync_rounds import SyncRounds

from fedsim.algorithms.staleness import staleness_weight

from fedsim.messages import Assignment, Update, Work
from fedsim.algorithms.fedasync import fedasync_rule
from fedsim.algorithms.fedprox import prox_trainer
from fedsim.algorithms.fedraa_schedulers import choose_fragment, k_offline, offline_assignment
from fedsim.config import positive, require
from fedsim.errors import ConfigError
from fedsim.learn.state import State, masked_weighted_average, state_mix
from fedsim.learn.submodel import extract, fragment_submodel, insert
from fedsim.learn.sgd import num_steps, samples_processed
from fedsim.algorithms.configs import FedRAAConfig, fragment_ratios


class FedRAA(AsyncSlots, SyncRounds):
    """Fed-RAA's decisions, on the framework's loop shapes: it runs on :class:`AsyncSlots` (a slot per client)
    or, with ``aggregation: sync``, on :class:`SyncRounds` (synchronous rounds of every available client); its
    ``run`` picks the loop from the config, so a subclass keeps its overrides on either.  Fed-RAA decides what
    a client trains (:meth:`assign`: the scheduler's fragment) and how a fragment is mixed in
    (:meth:`server_rule`); its ``assign`` and ``fragment`` records are its own measurements."""

    name = "fedraa"
    theorems = ("fedraa",)  # Fed-RAA Theorem 1 / Corollary 1
    #: the asynchronous loop's flags: every client is its own worker; each arrival is applied on its own
    client_slots = True
    serve_each = True
    refill_on_arrival = False

    @classmethod
    def work(cls, config: Any) -> Work:
        """Every client works at once (one per round, or its own slot); offline ones retry after ``retry_s``."""
        return Work(retry_s=config.retry_s, all_clients=True)

    Config = FedRAAConfig

    @classmethod
    def fits_devices(cls, config: Any) -> bool:
        """Isolated fragments are sub-models, whose memory the context checks per task; frozen-context
        training holds the whole model, which the runner checks against every device."""
        return config.mode == "isolated"

    # ---------------------------------------------------------------------------------- setup
    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        cfg = self.cfg
        model = ctx.training.worker
        groups = model.width_groups()
        default = getattr(model, "designated", None) or list(groups)
        names = list(default) if cfg.layers is None else list(cfg.layers)
        for g in names:
            if g not in groups:
                raise ConfigError("algorithm.layers", f"unknown width group {g!r} (allowed: {', '.join(groups) or 'none'})")
        if not names:
            raise ConfigError("algorithm.layers", f"model {ctx.scenario.model.name!r} has no width group to split")
        self.ratios = fragment_ratios(cfg.fragments, cfg.ratios, "algorithm")
        M = self.M = cfg.fragments
        for g in names:
            if groups[g].size < M:
                raise ConfigError("algorithm.fragments", f"{M} fragments but layer {g!r} has only {groups[g].size} units")
        self.subs = [fragment_submodel(model, j, self.ratios, groups=names, field="algorithm.fragments") for j in range(M)]
        # per-fragment coverage mask over the full model: insert's mask of the fragment's own weights
        self.masks = [insert(ctx.global_state, sub, extract(model, ctx.global_state, sub).state_dict())[1]
                      for sub in self.subs]
        self.frag_params = np.array([sum(int(m.sum()) for m in mask.values()) for mask in self.masks])
        if cfg.mode == "isolated":
            costs = [ctx.training.submodel_costs(sub) for sub in self.subs]
            fps = np.array([c.flops.total for c in costs])
            down = np.array([c.download_bytes for c in costs])
            up = np.array([c.upload_bytes for c in costs])
        else:
            fps = np.full(M, ctx.training.flop_cost.total)
            down = up = np.full(M, ctx.training.model_bytes)
        self.frag_bytes = down
        world, N = ctx.world, ctx.num_clients
        self.cost = np.zeros((N, M))
        for n in range(N):
            sgd = ctx.training.sgd
            samples = samples_processed(len(ctx.parts[n]), num_steps(len(ctx.parts[n]), sgd), sgd.batch_size)
            for j in range(M):
                self.cost[n, j] = (world.expected_compute_seconds(n, fps[j] * samples, samples=samples)
                                   + world.expected_transfer_seconds(n, int(down[j]), int(up[j])))
        self.offline = offline_assignment(self.cost, self.frag_params)
        self.K_off = k_offline(self.cost, self.frag_params)
        self.K = float(cfg.K) if cfg.K is not None else self.K_off
        self.q = np.zeros(M, dtype=np.int64)
        self.inflight = np.zeros(M, dtype=np.int64)
        self.turns = np.zeros(N, dtype=np.int64)
        self.decisions = 0
        self._taken: tuple[int | None, np.ndarray] = (None, np.zeros(M, dtype=np.int64))  # this sync round's
        self._given: dict[int, int] = {}  # client -> the fragment it is training

    def _assignment(self, j: int, round_: int | None = None) -> Assignment:
        cfg = self.cfg
        info = {"fragment": j, "q_dispatch": int(self.q[j])}
        if cfg.mode == "isolated":
            trainer = prox_trainer(cfg.rho) if cfg.rho > 0 else None
            return Assignment(submodel=self.subs[j], trainer=trainer, round=round_, info=info)
        # frozen: the whole model under a gradient mask; the update covers the fragment's entries only
        return Assignment(submodel=None, trainer=prox_trainer(cfg.rho, grad_mask=self.masks[j]), round=round_,
                          info=info, coverage=self.masks[j])

    def pick(self, client: int, extra: np.ndarray | None = None) -> tuple[int, bool]:
        """One scheduling decision; the tie-break stream is ("fedraa", "schedule", k) for the k-th decision."""
        self.decisions += 1
        rng = self.ctx.streams.numpy("fedraa", "schedule", self.decisions)
        q = self.q + (self.inflight if self.cfg.count_inflight else 0) + (0 if extra is None else extra)
        j, empty = choose_fragment(self.cfg.scheduler, q=q, cost_row=self.cost[client], K=self.K, rng=rng,
                                   cycle=self.offline[client], turn=int(self.turns[client]))
        self.turns[client] += 1
        return j, empty

    def _emit_setup(self) -> None:
        ctx = self.ctx
        caps = ctx.world.capability
        ctx.measure("fedraa", fragments=self.M, ratios=list(self.ratios), scheduler=self.cfg.scheduler,
                    mode=self.cfg.mode, aggregation=self.cfg.aggregation, K=self.K, K_off=self.K_off,
                    fragment_params=[int(x) for x in self.frag_params], fragment_bytes=[int(x) for x in self.frag_bytes],
                    cost=[[round(float(x), 6) for x in row] for row in self.cost], offline=self.offline,
                    capability=None if caps is None else [float(x) for x in caps])

    @staticmethod
    def fragment_of(update: Update) -> int:
        return int(update.info["assignment"].info["fragment"])

    def _tau(self, update: Update) -> int:
        """The staleness given to s(·), on the configured clock: versions since dispatch (the framework's
        ``VersionKeeper.staleness``) or updates of this fragment since dispatch."""
        if self.cfg.staleness_clock == "global":
            return self.ctx.versions.staleness(update)
        j = self.fragment_of(update)
        return int(self.q[j] - update.info["assignment"].info["q_dispatch"])

    # ---------------------------------------------------------------------------------- decisions
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """The scheduler's fragment for ``client`` (recorded as ``assign``).  In a sync round the fragments
        already given this round count as in flight, so the round spreads over fragments."""
        ctx = self.ctx
        extra = None
        if round_ is not None:
            if self._taken[0] != round_:
                self._taken = (round_, np.zeros(self.M, dtype=np.int64))
            extra = self._taken[1]
        j, empty = self.pick(client, extra=extra)
        if extra is not None:
            extra[j] += 1
        self._given[client] = j
        ctx.measure("assign", client=client, fragment=j, q=int(self.q[j]), version=ctx.version,
                    cost=float(self.cost[client, j]), K=self.K, empty=bool(empty), round=round_)
        self.inflight[j] += 1
        return self._assignment(j, round_)

    def task_done(self, client: int, update: Update | None) -> None:
        """The fragment is no longer being trained (counted by ``count_inflight``)."""
        self.inflight[self._given[client]] -= 1

    def before_apply(self, updates: list[Update], weights: list[float], round_: int | None) -> None:
        """The ``fragment`` measurements, then q(j) += 1 for every fragment applied."""
        ctx = self.ctx
        for u, w in zip(updates, weights):
            j = self.fragment_of(u)
            a = u.info["assignment"]
            ctx.measure("fragment", client=u.client, fragment=j, q=int(self.q[j]) + 1,
                        staleness=ctx.versions.staleness(u), staleness_fragment=int(self.q[j] - a.info["q_dispatch"]),
                        realised_c=u.info["arrived"] - u.download_time, cost=float(self.cost[u.client, j]),
                        steps=int(u.info.get("steps", 0)), weight=float(w))
        for j in {self.fragment_of(u) for u in updates}:
            self.q[j] += 1

    def run(self) -> Generator[Any, Any, None]:
        """The setup record, then the loop ``aggregation`` asks for."""
        self._emit_setup()
        loop = SyncRounds.run if self.cfg.aggregation == "sync" else AsyncSlots.run
        return (yield from loop(self))

    def select(self, k: int, round_: int) -> list[int]:
        """Sync Fed-RAA's round: every available client, every round."""
        return [c for c in range(self.ctx.num_clients) if self.ctx.world.is_available(c)]

    def server_rule(self, updates: list[Update], base: State,
                    bases: list[State] | None = None) -> tuple[State, list[float]]:
        """Asynchronous (one update): θʲ ← (1 − α_t) θʲ + α_t θʲ_new, α_t = α · s(τ) on the configured staleness
        clock.  Sync (a round's updates, ``bases`` not given): per fragment, the average of its returned copies
        mixed in with the same α_t (every copy of a barrier round started from the current fragment, so τ = 0
        and α_t = α); each update's weight is α_t · (its share of its fragment's average)."""
        cfg = self.cfg
        if cfg.aggregation != "sync":
            (update,) = updates
            new, a = fedasync_rule(update, base, self._tau(update), cfg.alpha, cfg.staleness, cfg.staleness_a,
                                   cfg.staleness_b)
            return new, [a]
        taus = [self._tau(u) for u in updates]
        mixes = {staleness_weight(t, cfg.staleness, cfg.staleness_a, cfg.staleness_b) for t in taus}
        if len(mixes) != 1:  # unreachable in a barrier round; kept explicit rather than silently averaged
            raise RuntimeError(f"sync Fed-RAA round with unequal staleness {taus}")
        a_t = cfg.alpha * mixes.pop()
        avg = masked_weighted_average(updates, base)
        per_frag: dict[int, float] = {}
        for u in updates:
            per_frag[self.fragment_of(u)] = per_frag.get(self.fragment_of(u), 0.0) + float(u.weight)
        weights = [a_t * float(u.weight) / per_frag[self.fragment_of(u)] for u in updates]
        return state_mix(base, avg, a_t), weights
