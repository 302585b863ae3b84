"""Co-S²P (Li et al., "Unity is Power: Semi-Asynchronous Collaborative Training of Large-Scale Models with
Structured Pruning in Resource-Limited Clients"): semi-asynchronous aggregation (Algorithm 1) of
structurally pruned sub-models trained with learned width masks and self-distillation (Algorithm 2).

Server (Algorithm 1), in virtual time (the loop is the framework's ``SemiAsyncRounds``; Co-S²P decides the
quorum, the clock, each participation and the server rule):

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

Client (Algorithm 2): R_n per client from its device's compute and link speed and its data, so that the
round's jobs take about equal time (``rate_rule: balanced``, :func:`balanced_rates`; the paper sets R_n
"according to the available resources"), or from its device profile (``rate_rule: table7``: the
``rates`` table, Table 7 by default); R^w·R^d = R_n with R^w/R^d = ``width_depth_ratio``; see
:mod:`fedsim.algorithms.cos2p_parts` for the masks, exits and losses.

What the server holds and aggregates (paper App. A: "each client maintain[s] the classifiers and only
updates them through local submodel training, rather [than] updates from the server"; "the server
aggregates and updates the same segments trained by different clients"): the global model, classifier
included, segment by segment over the clients that trained each segment (Eq. 5).  A client's early exits
(the classifiers at the depths of shallower windows, Eq. 3) never leave it and are never aggregated.  The
global classifier is a segment like any other: it is trained, sent and aggregated only by a participation
whose window reaches the top block (the paper is silent on how the global classifier is trained when no
client holds the full model; this is the reading of "the same segments trained by different clients").
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generator, Literal, Sequence

import numpy as np
import simpy
import torch

from fedsim.algorithms.loops.semi_async import SemiAsyncRounds, quorum

from fedsim.algorithms.pipeline import client_task

from fedsim.messages import Assignment, Update
from fedsim.algorithms.cos2p_rules import SegmentIndex, cos2p_aggregate, segment_index
from fedsim.config import num, positive, require
from fedsim.errors import ConfigError
from fedsim.learn.state import State
from fedsim.algorithms.configs import Cos2PConfig, KL_DIRECTIONS, PAPER_RATES, ROLLING_RULES
from fedsim.sim.trace import register_record_kind
from fedsim.training import ClientWork, PendingTraining, TrainResult

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor


# Co-S²P's records (their schemas beside their writer, in the trace's table once this module is imported): one
# aggregation round q: when it started, when the ⌈μN⌉-th update arrived, the aggregated clients with their
# staleness τ_{q,n}, busy time (download → upload end) and memory estimate, and the coverage counts N_q^i over all
# segments (strict min, min over trained segments, mean, number of segments)
register_record_kind("cos2p_round", ("round", "start", "quorum_at", "end", "clients", "tau", "busy", "memory",
                                     "n_star", "n_star_trained", "n_mean", "n_segments"))
# at the end of a run: the global model on the server test set and the clients' personalised sub-models on their
# local test splits (size-weighted), Top-1 / Top-5 / macro F1
register_record_kind("cos2p_eval", ("version", "server_top1", "server_top5", "server_f1", "client_top1",
                                    "client_top5", "client_f1", "clients"))

#: Table 7: batch size per device class.
PAPER_BATCH = {
    "jetson-xavier-nx-8gb": 8,
    "jetson-xavier-nx-16gb": 32,
    "jetson-agx-orin-32gb": 64,
    "jetson-agx-orin-64gb": 128,
}
#: initial importance logit of every unit (P = sigmoid(2) ≈ 0.88: masks start nearly full and the sparsity
#: term pulls them down to R^w while CE decides which units stay)
MASK_INIT_LOGIT = 2.0


def split_rates(rate: float, ratio: float) -> tuple[float, float]:
    """(R^w, R^d) with R^w·R^d = R and R^w/R^d = ratio (the paper: ratio 1, both √R); a factor above 1 is
    capped at 1 and the other takes the rest."""
    rw, rd = math.sqrt(rate * ratio), math.sqrt(rate / ratio)
    if rw > 1.0:
        rw, rd = 1.0, rate
    if rd > 1.0:
        rw, rd = rate, 1.0
    return rw, rd


def rate_grid(n_blocks: int, ratio: float, rate_max: float) -> list[float]:
    """The distinct R_n a depth window can realise, at most ``rate_max``: window w of L blocks has depth
    rate w/L, so R = (w/L)²·ratio (R^w/R^d = ratio), capped at 1."""
    out = sorted({min(1.0, (w / n_blocks) ** 2 * ratio) for w in range(1, n_blocks + 1)})
    kept = [r for r in out if r <= rate_max + 1e-12]
    return kept or out[:1]


def balanced_rates(job_seconds: np.ndarray, grid: Sequence[float]) -> np.ndarray:
    """R_n per client so that the round's jobs take about equal time (``job_seconds[n, k]``: client n's
    estimated job time at ``grid[k]``, rising in k).

    Every client can match a common job time T between the slowest client's time at the smallest rate,
    max_n t_n(grid[0]), and the fastest client's time at the largest, min_n t_n(grid[−1]).  The target is
    the top of that band, T* = max(max_n t_n(grid[0]), min_n t_n(grid[−1])) (the bottom when the band is
    empty), and each client takes the largest rate whose job fits in T* (at least the smallest rate): the
    round's jobs end together while the sub-models are as large as that allows.  Choice: the paper only
    says R_n is chosen "according to the available resources" from measured per-round times."""
    t = np.asarray(job_seconds, dtype=float)
    target = max(float(t[:, 0].max()), float(t[:, -1].min()))
    out = np.empty(t.shape[0])
    for n in range(t.shape[0]):
        fits = np.flatnonzero(t[n] <= target * (1 + 1e-9))
        out[n] = float(grid[int(fits.max()) if len(fits) else 0])
    return out


class Cos2P(SemiAsyncRounds):
    """Co-S²P on the framework's semi-asynchronous rounds: it decides the quorum (⌈μN⌉, or 1 in ``async``
    mode), the clock (T_clk), each participation (Algorithm 2: :meth:`client_job`) and the server rule
    (Eq. 4-5, :func:`cos2p_aggregate`)."""

    name = "cos2p"
    theorems = ("cos2p",)  # Co-S2P Theorem 1

    Config = Cos2PConfig

    # ------------------------------------------------------------------------------------ setup
    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        n = ctx.num_clients
        from fedsim.system.devices import list_profiles

        known = set(list_profiles()) | {ctx.world.device(c).name for c in range(n)}
        for table, values in (("rates", config.rates), ("batch_sizes", config.batch_sizes)):
            for k in values:
                require(k in known, f"algorithm.{table}.{k}",
                        f"unknown device profile {k!r} (allowed: {', '.join(sorted(known))})")
        self.local_train, self.local_test = self._local_split()
        self.rate = np.ones(n)
        if config.rate_rule == "table7":
            for c in range(n):
                self.rate[c] = float(config.rates.get(ctx.world.device(c).name, 1.0))
        else:
            self.rate_grid, self.job_seconds = self._rate_table()
            self.rate = balanced_rates(self.job_seconds, self.rate_grid)
        self._plan_clients()
        groups = ctx.training.worker.width_groups() if hasattr(ctx.training.worker, "width_groups") else None
        self.segments: SegmentIndex = segment_index(ctx.global_state, groups)
        ctx.versions.version_hooks.append(self._final_metrics)

    def _rate_table(self) -> tuple[list[float], np.ndarray]:
        """(rate grid, estimated job seconds per client and grid rate) for the balanced rule (a model
        without encoder blocks between stem and head has nothing to prune: the grid is [1]).

        A job at rate R: the depth window of floor(L·R^d) blocks at width R^w (the weight phase's pruned
        sub-model, its frozen blocks below the window included), the client's local-train split for the
        configured local epochs at its batch size; time = download + compute + upload at the device's nominal
        speed and link rates (no jitter), averaged over the window's rolling positions.  The mask phase of
        the first Q̂ participations is not in the estimate."""
        from fedsim.algorithms.cos2p_parts import final_keep
        from fedsim.learn.submodel import SubModel, submodel_costs
        from fedsim.learn.sgd import num_steps, samples_processed

        ctx, cfg, model, world = self.ctx, self.cfg, self.ctx.training.worker, self.ctx.world
        L = model.num_blocks() - 2
        if L < 1:  # nothing between stem and head to prune: every client keeps the whole model
            return [1.0], np.zeros((ctx.num_clients, 1))
        grid = rate_grid(L, cfg.width_depth_ratio, cfg.rate_max)
        groups = model.width_groups() if hasattr(model, "width_groups") else {}
        from fedsim.learn.submodel import block_of

        by_block: dict[int, list[str]] = {}
        for g, wg in groups.items():
            blocks = {block_of(k) for k, _ in wg.members}
            if len(blocks) == 1:
                by_block.setdefault(blocks.pop(), []).append(g)
        cache: dict[tuple[int, float, int], tuple[float, int, int]] = {}
        times = np.zeros((ctx.num_clients, len(grid)))
        for c in range(ctx.num_clients):
            batch = int(cfg.batch_sizes.get(world.device(c).name, ctx.training.sgd.batch_size))
            n = len(self.local_train[c])
            steps = num_steps(n, dataclasses.replace(ctx.training.sgd, batch_size=batch))
            samples = samples_processed(n, steps, batch)
            for k, rate in enumerate(grid):
                rw, rd = split_rates(rate, cfg.width_depth_ratio)
                w = max(1, int(math.floor(L * rd + 1e-9)))
                per_pos = []
                for start in range(L - w + 1):
                    key = (start, rw, batch) + (w,)
                    if key not in cache:
                        states = ["train" if start == 0 else "frozen"]
                        states += ["frozen" if j <= start else "train" if j <= start + w else "removed"
                                   for j in range(1, L + 1)]
                        states.append("train" if start + w == L else "removed")
                        keep: dict[str, tuple[int, ...]] = {}
                        if rw < 1.0:
                            for j, names in by_block.items():
                                if 1 <= j <= L and states[j] == "train":
                                    for g in names:
                                        keep.update(final_keep({g: torch.zeros(groups[g].size, device=ctx.device)}, rw))
                        cost = submodel_costs(model, SubModel.of(model, keep, tuple(states)),
                                              ctx.training.input_shape, batch, momentum=ctx.training.sgd.momentum > 0)
                        cache[key] = (cost.flops.total, cost.download_bytes, cost.upload_bytes)
                    flops, down, up = cache[key]
                    per_pos.append(world.expected_compute_seconds(c, flops * samples, samples=samples)
                                   + world.expected_transfer_seconds(c, int(down), int(up)))
                times[c, k] = float(np.mean(per_pos))
        return grid, times

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
    def quorum(self) -> int:
        """⌈μN⌉ (Algorithm 1's ``while cnt < μN``), or 1 in ``async`` mode (each arrival aggregated alone)."""
        return 1 if self.cfg.mode == "async" else quorum(self.cfg.mu, self.ctx.num_clients)

    def clock(self) -> float | None:
        """T_clk after the quorum; ``async`` mode has no window (N_q = 1)."""
        return self.cfg.t_clk if self.cfg.mode == "semi" else None

    def server_rule(self, updates: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        """γ of Eq. 4 and the segment-wise average of Eq. 5 (:func:`cos2p_aggregate`); the segment coverage
        is kept for this round's ``cos2p_round`` record."""
        res = cos2p_aggregate(base, updates, bases, self.segments, weighting=self.cfg.weighting,
                              server_lr=self.cfg.server_lr)
        self._coverage = res.coverage
        return res.state, res.weights

    def before_apply(self, updates: list[Update], weights: list[float], round_: int | None) -> None:
        """The ``cos2p_round`` measurement: arrivals, staleness τ, busy time, memory and segment coverage N*."""
        ctx = self.ctx
        cov = self._coverage
        trained = cov[cov > 0]
        ctx.measure("cos2p_round", round=round_, start=self.loop.round_start, quorum_at=self.loop.quorum_at,
                    end=ctx.env.now, clients=[u.client for u in updates], tau=[ctx.versions.staleness(u) for u in updates],
                    busy=[float(u.info.get("busy_s", math.nan)) for u in updates],
                    memory=[float(u.info.get("memory_bytes", math.nan)) for u in updates],
                    n_star=int(cov.min()), n_star_trained=int(trained.min()) if len(trained) else 0,
                    n_mean=float(cov.mean()), n_segments=int(cov.numel()))

    # ------------------------------------------------------------------------------------ clients
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """A placeholder: a participation's sub-model is decided by :meth:`client_job` when it starts (on the
        device, after the download, in the mask phase), so the dispatch names none."""
        return Assignment(kind="weights", round=round_)

    def client_job(self, client: int, base: State, version: int, task: int,
                   assignment: Assignment) -> Generator[simpy.events.Event, Any, Update]:
        """One participation of ``client`` on the global model ``base`` (version ``version``): the whole
        model for a client that keeps it, else the mask phase's job (task < Q̂) or the pruned sub-model's."""
        ctx = self.ctx
        t0 = ctx.env.now
        if self.plain[client]:
            update = yield from client_task(ctx, client, base, version, task=task, assignment=assignment)
        else:
            mask_phase = (self.cfg.mask == "learned" and task < self.cfg.mask_rounds and self.rw[client] < 1.0
                          and self.cfg.mask_epochs > 0)
            if mask_phase:
                update = yield from client_task(ctx, client, base, version, task=task, assignment=assignment,
                                                work=self._mask_work(client, base, task))
            else:
                update = yield from self._pipeline_job(client, base, version, task)
        update.info["busy_s"] = ctx.env.now - t0
        return update

    # ------------------------------------------------------------------------------------ metrics
    def _final_metrics(self, ctx: Any, final: bool) -> None:
        """At the end of the run: server Top-1/Top-5/macro-F1 of the global model on the server test set,
        and each client's on its local test split (its last personalised sub-model, deepest exit; a client
        that never trained a pruned model is evaluated with the global model), size-weighted (App. D)."""
        if not final or ctx.scenario.train.systems_only:
            return
        from fedsim.algorithms.cos2p_parts import classification_scores

        model = ctx.training.worker
        model.load_state_dict(ctx.global_state)
        server = classification_scores(model, ctx.training.test.x, ctx.training.test.y, ctx.training.test.num_classes)
        rows, sizes = [], []
        for c in range(ctx.num_clients):
            idx = torch.as_tensor(self.local_test[c], dtype=torch.int64, device=ctx.device)
            if len(idx) == 0:
                continue
            net = self.personal[c]
            if net is None:
                model.load_state_dict(ctx.global_state)
                fn = model
            else:
                fn = (lambda x, net=net: net(x)[-1])
            rows.append(classification_scores(fn, ctx.data.train.x[idx], ctx.data.train.y[idx],
                                              ctx.training.test.num_classes))
            sizes.append(len(idx))
        client = {}
        if rows:
            w = np.asarray(sizes, dtype=float) / sum(sizes)
            client = {k: float(sum(wi * r[k] for wi, r in zip(w, rows))) for k in rows[0]}
        ctx.measure("cos2p_eval", version=ctx.version,
                    server_top1=server["top1"], server_top5=server["top5"], server_f1=server["f1"],
                    client_top1=client.get("top1"), client_top5=client.get("top5"), client_f1=client.get("f1"),
                    clients=[float(r["top1"]) for r in rows])

    # ------------------------------------------------------------------------------------ client side
    def _plan_clients(self) -> None:
        """R_n, (R^w, R^d), window length and exit depths per client (spec §2.2–2.4)."""
        ctx, cfg = self.ctx, self.cfg
        model = ctx.training.worker
        n_blocks = model.num_blocks()
        self.L = n_blocks - 2  # block 0 is the stem (patch embedding), the last block the classifier
        n = ctx.num_clients
        self.rw = np.ones(n)
        self.rd = np.ones(n)
        self.window = np.zeros(n, dtype=np.int64)
        for c in range(n):
            prof = ctx.world.device(c).name
            rate = self.rate[c]
            if rate >= 1.0:
                self.window[c] = max(self.L, 0)
                continue
            if self.L < 1:
                raise ConfigError(f"algorithm.rates.{prof}", f"rate {rate} prunes depth, but model "
                                  f"'{ctx.scenario.model.name}' has no blocks between its stem and its head "
                                  f"(use a model with depth, e.g. vit, or rate 1)")
            rw, rd = split_rates(rate, cfg.width_depth_ratio)
            w = int(math.floor(self.L * rd + 1e-9))
            if w < 1:
                raise ConfigError(f"algorithm.rates.{prof}", f"rate {rate} gives depth rate {rd:.4g} and "
                                  f"floor({self.L} x {rd:.4g}) = 0 trainable blocks (allowed: a rate whose depth "
                                  f"rate is >= 1/{self.L})")
            self.rw[c], self.rd[c], self.window[c] = rw, rd, w
        depths = sorted({int(w) for w in self.window})
        #: exits of client c: window depths of every client whose depth rate is <= c's own
        self.exit_depths = [[d for d in depths if d <= self.window[c]] for c in range(n)]
        self.plain = [bool(self.rate[c] >= 1.0 and self.exit_depths[c] == [self.L]) for c in range(n)]
        groups = model.width_groups() if hasattr(model, "width_groups") else {}
        from fedsim.learn.submodel import block_of

        #: width groups that live inside one encoder block (MLP neurons, heads): the maskable ones
        self.block_groups: dict[int, list[str]] = {}
        for g, wg in groups.items():
            blocks = {block_of(k) for k, _ in wg.members}
            if len(blocks) == 1:
                j = blocks.pop()
                if 1 <= j <= self.L:
                    self.block_groups.setdefault(j, []).append(g)
        self.logits: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
        self.exits: list[dict[int, torch.nn.Module]] = [{} for _ in range(n)]
        self.personal: list[Any] = [None] * n
        self.last_sub: list[Any] = [None] * n

    def window_start(self, client: int, task: int) -> int:
        """First trainable encoder block (0-based among the L) of ``client``'s ``task``-th participation."""
        span = self.L - int(self.window[client]) + 1
        cfg = self.cfg
        if cfg.rolling == "fixed" or span <= 1:
            return 0
        k = task + (client if cfg.rolling == "client_round" else 0)
        return int((k * cfg.rolling_step) % span)

    def block_states(self, client: int, start: int) -> tuple[str, ...]:
        """Stem, encoder blocks 1..L, head: frozen below the window, trained in it, removed above.  The stem
        trains with a window that starts at the bottom, the head with one that reaches the top."""
        w, L = int(self.window[client]), self.L
        states = ["train" if start == 0 else "frozen"]
        for j in range(1, L + 1):
            states.append("frozen" if j <= start else "train" if j <= start + w else "removed")
        states.append("train" if start + w == L else "removed")
        return tuple(states)

    def _keep(self, client: int, states: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
        """Kept units of the maskable groups of the trainable blocks (frozen blocks stay whole)."""
        from fedsim.algorithms.cos2p_parts import final_keep

        model = self.ctx.training.worker
        rw = float(self.rw[client])
        if rw >= 1.0:
            return {}
        keep: dict[str, tuple[int, ...]] = {}
        groups = model.width_groups()
        for j, names in self.block_groups.items():
            if states[j] != "train":
                continue
            for g in names:
                lg = self._logit(client, g, groups[g].size)
                keep.update(final_keep({g: lg}, rw))
        return keep

    def _logit(self, client: int, group: str, size: int) -> torch.Tensor:
        """Client ``client``'s importance logits of ``group`` (persist across rounds; the random-mask
        ablation draws them once from the client's stream, so its mask is random but fixed)."""
        lg = self.logits[client].get(group)
        if lg is None:
            if self.cfg.mask == "random":
                gen = self.ctx.streams.torch("cos2p", "random_mask", client, group)
                lg = torch.rand(size, generator=gen).to(self.ctx.device)  # drawn on the CPU, kept on the device
            else:
                lg = torch.full((size,), MASK_INIT_LOGIT, device=self.ctx.device)
            self.logits[client][group] = lg
        return lg

    def _exit_module(self, client: int, depth: int) -> torch.nn.Module:
        """The client's local classifier after window depth ``depth``: the head's architecture, started from
        the global head's weights when first needed, then only ever trained locally."""
        ex = self.exits[client].get(depth)
        if ex is None:
            import copy

            model = self.ctx.training.worker
            model.load_state_dict(self.ctx.global_state)
            ex = copy.deepcopy(model.blocks[-1])
            for p in ex.parameters():
                p.requires_grad_(True)
            self.exits[client][depth] = ex
        return ex

    def _plan(self, client: int, task: int) -> tuple[tuple[str, ...], int, bool, int]:
        """(block states, window length, whether the window holds the head, batch size) of a participation."""
        prof = self.ctx.world.device(client).name
        batch = int(self.cfg.batch_sizes.get(prof, self.ctx.training.sgd.batch_size))
        states = self.block_states(client, self.window_start(client, task))
        return states, int(self.window[client]), states[-1] == "train", batch

    def trainer(self, client: int, states: tuple[str, ...], batch: int) -> Any:
        """The local trainer of Algorithm 2's weight phase (an ``Assignment.trainer``): the extracted
        sub-model with the client's local exits, Eq. 3 (or plain CE with one exit), SGD on the client's
        local training split with its device class's batch size.  The trained module is kept as the
        client's personalised model (exits included); exits never leave the client."""
        import dataclasses

        from fedsim.messages import TrainOutcome
        from fedsim.algorithms.cos2p_parts import ExitNet, distill_loss
        from fedsim.learn.sgd import local_sgd

        cfg = self.cfg
        w = int(self.window[client])
        head_in = states[-1] == "train"

        def train(module: Any, training: "TrainingExecutor", c: int, indices: np.ndarray,
                  generator: torch.Generator) -> TrainOutcome:
            local = [k for k, j in enumerate(module.block_ids) if 1 <= j <= self.L and states[j] == "train"]
            exits = {local[d - 1]: self._exit_module(client, d) for d in self.exit_depths[client]
                     if not (d == w and head_in)}
            net = ExitNet(module, exits, head_last=head_in)
            lam2 = cfg.lambda2 if cfg.distill else 0.0

            def loss_fn(outs: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
                if len(outs) == 1:
                    return torch.nn.functional.cross_entropy(outs[0], y)
                return distill_loss(outs, y, lambda2=lam2, temperature=cfg.temperature, direction=cfg.kl_direction,
                                    detach_teacher=cfg.detach_teacher)

            sgd = dataclasses.replace(training.sgd, batch_size=batch)
            tr = training.data.train
            stats = local_sgd(net, tr.x, tr.y, self.local_train[client], sgd, generator, loss_fn=loss_fn)
            self.personal[client] = net
            return TrainOutcome(stats=stats)

        return train

    def _pipeline_job(self, client: int, base: State, version: int, task: int) -> Generator[simpy.events.Event, Any, Update]:
        """A participation after the mask phase: the sub-model is fixed at dispatch, so it goes through the
        shared pipeline (``client_task`` with the sub-model and the Algorithm 2 trainer)."""
        from fedsim.learn.submodel import SubModel, submodel_costs

        ctx = self.ctx
        model = ctx.training.worker
        states, w, _, batch = self._plan(client, task)
        sub = SubModel.of(model, self._keep(client, states), states)
        a = Assignment(submodel=sub, kind="weights", trainer=self.trainer(client, states, batch))
        update = yield from client_task(ctx, client, base, version, task=task, assignment=a)
        mem = submodel_costs(model, sub, ctx.training.input_shape, batch,
                             momentum=ctx.training.sgd.momentum > 0).memory.total
        update.info.update(window_start=self.window_start(client, task), window=w, memory_bytes=float(mem),
                           submodel=sub.summary(model))
        return update

    def _mask_work(self, client: int, base: State, task: int) -> ClientWork:
        """The mask phase's client program (q < Q̂): the client downloads its window at full width, learns the
        unit logits with the weights frozen (Eq. 2), fixes the mask (top-k), then trains the pruned sub-model's
        weights with the same trainer as later rounds.  The sub-model is decided on the device after the
        download, which an assignment (fixed at dispatch) cannot express, so this is a client job with its own
        work (:class:`fedsim.training.ClientWork`): the pipeline times it (download of the full-width window,
        compute for the FLOPs of both phases, upload of the pruned sub-model) and builds its ``Update``."""
        from fedsim.algorithms.cos2p_parts import train_masks
        from fedsim.learn.submodel import SubModel, extract, insert, submodel_costs
        from fedsim.learn.sgd import samples_processed

        ctx, cfg = self.ctx, self.cfg
        model = ctx.training.worker
        states, w, head_in, batch = self._plan(client, task)
        full_sub = SubModel.of(model, {}, states)
        full_cost = submodel_costs(model, full_sub, ctx.training.input_shape, batch, momentum=False)

        def start() -> PendingTraining:
            """Mask learning, then weight training, at the virtual moment computing starts."""
            idx = torch.as_tensor(self.local_train[client], dtype=torch.int64, device=ctx.device)
            gen = ctx.streams.torch("client", client, "task", task)
            body = extract(model, base, full_sub)
            local_of = {j: k for k, j in enumerate(body.block_ids)}
            groups = model.width_groups()
            members, logits = {}, {}
            for j, names in self.block_groups.items():
                if states[j] == "train":
                    for g in names:
                        members[g] = [(f"blocks.{local_of[j]}." + key.split(".", 2)[2], d) for key, d in groups[g].members]
                        logits[g] = self._logit(client, g, groups[g].size)
            steps = max(1, int(math.ceil(cfg.mask_epochs * math.ceil(len(idx) / batch))))
            mstats = train_masks(body, logits, members, ctx.data.train.x, ctx.data.train.y, idx, steps=steps,
                                 batch_size=batch, target=float(self.rw[client]), lambda1=cfg.lambda1, lr=cfg.mask_lr,
                                 generator=gen, readout=None if head_in else self._exit_module(client, w))
            sub = SubModel.of(model, self._keep(client, states), states)
            costs = submodel_costs(model, sub, ctx.training.input_shape, batch, momentum=ctx.training.sgd.momentum > 0)
            module = extract(model, base, sub)
            outcome = self.trainer(client, states, batch)(module, ctx.training, client, self.local_train[client], gen)
            st = outcome.stats
            flops = full_cost.flops.total * samples_processed(len(idx), steps, batch) + costs.flops.total * st.samples
            tensors, mask = insert(base, sub, module.state_dict())
            info = {"window_start": self.window_start(client, task), "window": w,
                    "memory_bytes": float(max(full_cost.memory.total, costs.memory.total)),
                    "submodel": sub.summary(model), **mstats}
            return PendingTraining(done=TrainResult(state=tensors, stats=st, flops=flops, mask=mask,
                                                    upload_bytes=costs.upload_bytes, info=info))

        return ClientWork(full_cost.download_bytes, start)
