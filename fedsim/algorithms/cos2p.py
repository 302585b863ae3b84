"""Co-S²P (Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of Large-Scale Models with
Structured Pruning in Resource-Limited Clients"): semi-asynchronous aggregation (Algorithm 1) of
structurally pruned sub-models trained with learned width masks and self-distillation (Algorithm 2).

Server (Algorithm 1), in virtual time:

* Every client starts training at time 0 ("available clients" = the idle ones).  Round q collects
  updates until ⌈μN⌉ have arrived (the paper's loop ``while cnt < μN`` stops at the first cnt ≥ μN, which
  is ⌈μN⌉; ⌊μN⌋ would aggregate one update fewer whenever μN is not an integer), then keeps the window
  open T_clk more seconds.  Every update that arrived by the close, including ones queued while the
  server was busy, is aggregated.
* Late arrivals: an update that arrives after the window closed (while the server aggregates) is
  buffered for round q+1 and counts towards its ⌈μN⌉.  Nothing is dropped for being late; its
  staleness τ_{q,n} = (global version at aggregation) − (version it started from) is recorded and
  lowers its γ through Eq. 4's drift term.
* After aggregating, the new model goes only to the clients whose updates were consumed; the others
  keep training on their stale version.
* Variants from the same code: sync (μ = 1, T_clk = 0: wait for everyone, a FedAvg-like barrier) and
  ``mode: async`` (each arrival is aggregated alone, N_q = 1, RU = 1 by Eq. 17).

The server rule (γ of Eq. 4, segment-wise Eq. 5) is :func:`fedsim.algorithms.cos2p_rules.cos2p_aggregate`,
a pure function.

Client (Algorithm 2): R_n from the client's device profile (Table 7 by default), R^w·R^d = R_n with
R^w/R^d = ``width_depth_ratio``; see :mod:`fedsim.learn.cos2p` for the masks, exits and losses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Generator, Literal

import numpy as np
import simpy
import torch

from fedsim.algorithms.base import Algorithm, State, TaskCounter, Update, client_task
from fedsim.algorithms.cos2p_rules import WEIGHTINGS, SegmentIndex, cos2p_aggregate, segment_index
from fedsim.config import positive, require
from fedsim.errors import ConfigError

#: Table 7 (E1): overall kept fraction R_n per device class.
PAPER_RATES = {
    "jetson-xavier-nx-8gb": 0.0625,
    "jetson-xavier-nx-16gb": 0.0625,
    "jetson-agx-orin-32gb": 0.5625,
    "jetson-agx-orin-64gb": 0.5625,
}
#: Table 7: batch size per device class.
PAPER_BATCH = {
    "jetson-xavier-nx-8gb": 8,
    "jetson-xavier-nx-16gb": 32,
    "jetson-agx-orin-32gb": 64,
    "jetson-agx-orin-64gb": 128,
}
ROLLING_RULES = ("round", "client_round", "fixed")
KL_DIRECTIONS = ("student_teacher", "teacher_student")


def split_rates(rate: float, ratio: float) -> tuple[float, float]:
    """(R^w, R^d) with R^w·R^d = R and R^w/R^d = ratio (the paper: ratio 1, both √R); a factor above 1 is
    capped at 1 and the other takes the rest."""
    rw, rd = math.sqrt(rate * ratio), math.sqrt(rate / ratio)
    if rw > 1.0:
        rw, rd = 1.0, rate
    if rd > 1.0:
        rw, rd = rate, 1.0
    return rw, rd


def quorum(mu: float, n: int) -> int:
    """⌈μN⌉ (at least 1), the number of arrivals that opens the T_clk window."""
    return max(1, min(n, math.ceil(mu * n - 1e-9)))


class Cos2P(Algorithm):
    name = "cos2p"

    @dataclass
    class Config:
        mu: float = 0.5
        t_clk: float = 0.0
        mode: Literal["semi", "async"] = "semi"
        weighting: str = "gamma"
        server_lr: float = 1.0
        #: overall kept fraction R_n per device profile (default: the paper's Table 7, E1)
        rates: dict[str, float] = field(default_factory=lambda: dict(PAPER_RATES))
        #: local batch size per device profile (default: the train section's batch size for all)
        batch_sizes: dict[str, int] = field(default_factory=dict)
        width_depth_ratio: float = 1.0
        rolling: str = "round"
        rolling_step: int = 1
        #: mask phase (rounds q < Q̂): local epochs, learning rate of the logits, λ₁
        mask_rounds: int = 2
        mask_epochs: float = 1.0
        mask_lr: float = 0.1
        lambda1: float = 1.0
        #: mask: "learned" (STE) or "random" (Table 3's ablation)
        mask: Literal["learned", "random"] = "learned"
        distill: bool = True
        lambda2: float = 0.2
        temperature: float = 3.0
        kl_direction: str = "student_teacher"
        detach_teacher: bool = True
        #: fraction of each client's samples kept for local training (the rest is its local test set)
        local_train_fraction: float = 0.8
        retry_s: float = 10.0

        def validate(self, prefix: str) -> None:
            require(0 < self.mu <= 1, f"{prefix}.mu", f"must be in (0, 1], got {self.mu!r}")
            require(self.t_clk >= 0 and math.isfinite(self.t_clk), f"{prefix}.t_clk",
                    f"must be a finite number of seconds >= 0, got {self.t_clk!r}")
            require(self.mode in ("semi", "async"), f"{prefix}.mode", f"got {self.mode!r} (allowed: semi, async)")
            require(self.weighting in WEIGHTINGS, f"{prefix}.weighting",
                    f"got {self.weighting!r} (allowed: {', '.join(WEIGHTINGS)})")
            positive(self.server_lr, f"{prefix}.server_lr")
            for k, r in self.rates.items():
                require(isinstance(r, (int, float)) and 0 < r <= 1, f"{prefix}.rates.{k}", f"must be in (0, 1], got {r!r}")
            for k, b in self.batch_sizes.items():
                require(isinstance(b, int) and b >= 1, f"{prefix}.batch_sizes.{k}", f"must be an integer >= 1, got {b!r}")
            require(self.width_depth_ratio > 0 and math.isfinite(self.width_depth_ratio), f"{prefix}.width_depth_ratio",
                    f"must be > 0, got {self.width_depth_ratio!r}")
            require(self.rolling in ROLLING_RULES, f"{prefix}.rolling",
                    f"got {self.rolling!r} (allowed: {', '.join(ROLLING_RULES)})")
            require(isinstance(self.rolling_step, int) and self.rolling_step >= 0, f"{prefix}.rolling_step",
                    f"must be an integer >= 0, got {self.rolling_step!r}")
            require(isinstance(self.mask_rounds, int) and self.mask_rounds >= 0, f"{prefix}.mask_rounds",
                    f"must be an integer >= 0, got {self.mask_rounds!r}")
            positive(self.mask_epochs, f"{prefix}.mask_epochs", allow_zero=True)
            positive(self.mask_lr, f"{prefix}.mask_lr")
            require(self.lambda1 >= 0 and math.isfinite(self.lambda1), f"{prefix}.lambda1",
                    f"must be a finite number >= 0, got {self.lambda1!r}")
            require(self.mask in ("learned", "random"), f"{prefix}.mask", f"got {self.mask!r} (allowed: learned, random)")
            require(0 <= self.lambda2 <= 1, f"{prefix}.lambda2", f"must be in [0, 1], got {self.lambda2!r}")
            positive(self.temperature, f"{prefix}.temperature")
            require(self.kl_direction in KL_DIRECTIONS, f"{prefix}.kl_direction",
                    f"got {self.kl_direction!r} (allowed: {', '.join(KL_DIRECTIONS)})")
            require(0 < self.local_train_fraction <= 1, f"{prefix}.local_train_fraction",
                    f"must be in (0, 1], got {self.local_train_fraction!r}")
            positive(self.retry_s, f"{prefix}.retry_s")

    # ------------------------------------------------------------------------------------ setup
    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        n = ctx.num_clients
        self.rate = np.ones(n)
        for c in range(n):
            prof = ctx.world.device(c).name
            self.rate[c] = float(config.rates.get(prof, 1.0))
        self.local_train, self.local_test = self._local_split()
        groups = ctx.worker.width_groups() if hasattr(ctx.worker, "width_groups") else None
        self.segments: SegmentIndex = segment_index(ctx.global_state, groups)
        self.history: dict[int, State] = {0: ctx.global_state}
        self.pending: dict[int, int] = {}  # base version -> updates in flight from it

    def _local_split(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each client's samples split once at random, ``local_train_fraction`` : rest (the paper's 8:2)."""
        frac = self.cfg.local_train_fraction
        train, test = [], []
        for c, idx in enumerate(self.ctx.parts):
            if frac >= 1.0:
                train.append(np.asarray(idx))
                test.append(np.asarray(idx)[:0])
                continue
            perm = self.ctx.streams.numpy("cos2p", "local_split", c).permutation(len(idx))
            k = max(1, int(round(frac * len(idx))))
            train.append(np.sort(np.asarray(idx)[perm[:k]]))
            test.append(np.sort(np.asarray(idx)[perm[k:]]))
        return train, test

    # ------------------------------------------------------------------------------------ server
    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, env, cfg = self.ctx, self.ctx.env, self.cfg
        n = ctx.num_clients
        self.tasks = TaskCounter(n)
        self.inbox: simpy.Store = simpy.Store(env)
        need = 1 if cfg.mode == "async" else quorum(cfg.mu, n)
        ctx.world.schedule(n)
        for c in range(n):
            self._dispatch(c)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            start = env.now
            batch: list[Update] = []
            while len(batch) < need:
                batch.append((yield self.inbox.get()))
            opened = env.now
            if cfg.mode == "semi":
                close = env.now + cfg.t_clk
                while True:
                    if self.inbox.items:
                        batch.append((yield self.inbox.get()))
                        continue
                    if env.now >= close:
                        break
                    get = self.inbox.get()
                    got = yield get | env.timeout(close - env.now)
                    if get in got:
                        batch.append(got[get])
                    else:
                        get.cancel()
                        break
            if ctx.done.triggered:
                return
            yield from ctx.world.serve(None, ctx.aggregation_service_time(len(batch)), what="aggregate")
            if ctx.done.triggered:
                return
            self._aggregate(batch, rnd, start, opened)
            for u in batch:
                self._dispatch(u.client)

    def _aggregate(self, batch: list[Update], rnd: int, start: float, opened: float) -> None:
        ctx, env, cfg = self.ctx, self.ctx.env, self.cfg
        bases = [self.history[u.base_version] for u in batch]
        res = cos2p_aggregate(ctx.global_state, batch, bases, self.segments, weighting=cfg.weighting,
                              server_lr=cfg.server_lr)
        taus = [ctx.version - u.base_version for u in batch]
        for u, w, tau in zip(batch, res.weights, taus):
            ctx.trace.emit(env.now, "apply", client=u.client, base_version=u.base_version, version=ctx.version + 1,
                           staleness=tau, staleness_s=env.now - u.download_time, weight=w, round=rnd)
        cov = res.coverage
        trained = cov[cov > 0]
        ctx.trace.emit(env.now, "cos2p_round", round=rnd, start=start, quorum_at=opened, end=env.now,
                       clients=[u.client for u in batch], tau=taus, busy=[float(u.info.get("busy_s", math.nan)) for u in batch],
                       memory=[float(u.info.get("memory_bytes", math.nan)) for u in batch],
                       n_star=int(cov.min()), n_star_trained=int(trained.min()) if len(trained) else 0,
                       n_mean=float(cov.mean()), n_segments=int(cov.numel()))
        ctx.trace.emit(env.now, "round", round=rnd, start=start, end=env.now, clients=[u.client for u in batch], dropped=[])
        for u in batch:
            self._release(u.base_version)
        self.history[ctx.version + 1] = res.state
        ctx.commit(res.state, round_=rnd, n_updates=len(batch), clients=[u.client for u in batch])
        self._release(ctx.version, hold=False)

    def _release(self, version: int, hold: bool = True) -> None:
        """Forget global states nobody in flight started from (the current one is always kept)."""
        if hold:
            self.pending[version] = self.pending.get(version, 1) - 1
        for v in [v for v in self.history if v != self.ctx.version and self.pending.get(v, 0) <= 0]:
            del self.history[v]
            self.pending.pop(v, None)

    # ------------------------------------------------------------------------------------ clients
    def _dispatch(self, client: int) -> None:
        ctx = self.ctx
        version = ctx.version
        self.history.setdefault(version, ctx.global_state)
        self.pending[version] = self.pending.get(version, 0) + 1
        ctx.trace.emit(ctx.env.now, "dispatch", client=client, version=version, round=None)
        proc = self.launch(client, self._job(client, ctx.global_state, version))
        ctx.env.process(self._deliver(client, proc, version))

    def _deliver(self, client: int, proc: simpy.Process, version: int) -> Generator[simpy.events.Event, Any, None]:
        update = yield proc
        if update is None:  # dropped (went offline): try again later from the then-current model
            self._release(version)
            yield self.ctx.env.timeout(self.cfg.retry_s)
            if not self.ctx.done.triggered:
                self._dispatch(client)
            return
        yield self.inbox.put(update)

    def _job(self, client: int, base: State, version: int) -> Generator[simpy.events.Event, Any, Update]:
        """One participation of ``client`` on the global model ``base`` (version ``version``)."""
        t0 = self.ctx.env.now
        update = yield from client_task(self.ctx, client, base, version, task=self.tasks.next(client), kind="weights")
        update.info["busy_s"] = self.ctx.env.now - t0
        return update
