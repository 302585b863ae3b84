"""SemiSFL (Xu et al.): semi-supervised split FL with clustering regularisation and an adaptive K_s
(spec semisfl.md, Algorithm 1), plus its split baselines FedSwitch-SL and Supervised-only.

Data.  The server holds ``labeled`` samples, taken uniformly per class from the training set (the code's
rule) out of the scenario's partition; the clients keep the rest of their partition *without labels*
(``data.partition.method: dirichlet_client`` is the code's per-client Dirichlet scheme).  The labels of
those samples stay in the dataset only for the pseudo-label metrics (mask rate is label-free; impurity
reads them): training reads labels through ``visible_y``, where they are −1.  With
``client_labeled_fraction`` > 0 that share of each client's samples is labeled (Fig. 10; the code replaces
their pseudo-labels by the true labels, with mask 1).

A round (Algorithm 1), on the loop shape ``loops.split_rounds.SplitRounds`` (this module writes its phases and
steps; the shape owns sampling, dispatch, the exchange timing and the version).  (i) Server, K_s
iterations on labeled batches of ``server_batch``: two strong views of each image (the code's "strong
twice"); the student (bottom, top, head) takes view 1, the teacher's bottom and head give the keys from
view 2; loss CE + SupCon T (eq. 3-4) against the memory queue; after every step the teacher is
EMA-updated with the code's warm-up decay min(1 − 1/(t+1), γ).
(ii) N_h clients drawn uniformly download the bottom and the teacher bottom (2|w_c|).  Each of K_u
iterations is a barrier: every client computes student features of a strong view and teacher features of
a weak view of its batch (``train.batch_size``) and uploads both (2·B·d·4 bytes); the server
concatenates them, takes pseudo-labels from the teacher top (confidence ≥ ``tau``), computes the masked
consistency CE H (FixMatch normalisation: mean over the whole batch) and the clustering regularisation C
(eq. 5) on the projections, takes one SGD step of the top model and head on the mean loss, and returns
each client the gradient of its own batch mean (the concatenated gradient × N_h, as the code does;
B·d·4 bytes).  (iii) The clients upload their bottoms (|w_c|), which are averaged uniformly (BatchNorm
buffers included, integer buffers rounded), and the K_s controller (``fedsim.algorithms.semisfl_parts.KsController``)
sees the round's mean f_s and f_u.

Choices where the paper is silent or contradicts itself (documented in docs/architecture.md too): the teacher
bottom is frozen on clients during the K_u steps and updated only on the server (Sec. III(5), V-E3 and
the code; Eq. 8 says otherwise); optimizers are rebuilt at the start of each phase (the code); the queue is
cleared at the end of every client phase (the code); the *teacher* is the evaluated global model (paper
and code); the learning rate is constant or cosine from ``train.lr`` to ``min_lr`` over
``stop.max_versions`` rounds.  FedSwitch-SL is SemiSFL without C, without T and without adaptation (the
spec's inferred reading of the paper's ablation), and its server trains on weak views of the labeled
batches (``server_view``: the paper credits strong-augmentation supervised training to SemiSFL alone).  Supervised-only trains on the labeled set only.

Theory probes (every ``probe_every`` rounds): per-sample ‖∇l_s‖² and ‖∇l_u‖² (max and mean over
``probe_samples`` fixed samples, w.r.t. all trainable tensors: bottom, top, head) after the supervised and
after the semi-supervised phase (the seesaw), ‖∇F‖² and F = f_s + f_u on those probe sets, a secant
estimate of L between probe points, and each client's drift ‖w_{c,i}^k − w_c‖² per step with the largest
step gradient (for Lemma 4's deterministic form, with η/(1 − momentum) for heavy-ball SGD).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Generator, Literal

import numpy as np
import simpy
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedsim.messages import Work
from fedsim.algorithms.loops.split import SplitSession
from fedsim.algorithms.loops.split_rounds import SplitRounds
from fedsim.config import num, positive, require
from fedsim.errors import ConfigError
from fedsim.learn.augment import strong_view, weak_view
from fedsim.learn.costs import state_bytes
from fedsim.algorithms.semisfl_parts import FeatureQueue, KsController, ProjectionHead, contrastive_loss
from fedsim.learn.split import SideOptimizer, merge_state, split_state
from fedsim.learn.state import state_mix
from fedsim.learn.sgd import batch_schedule
from fedsim.algorithms.configs import FedSwitchSLConfig, SemiSFLConfig, SupervisedOnlyConfig

State = dict[str, torch.Tensor]
_HEAD = "head."


def _grads_or_zero(grads: tuple, params: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def semi_data(ctx: Any, labeled: int, client_labeled_fraction: float, *, need_clients: bool = True
              ) -> tuple[np.ndarray, torch.Tensor]:
    """Take the server's labeled set out of the clients' data; returns (labeled indices, visible labels).

    ``labeled`` samples are drawn uniformly per class (class c gets labeled // M, the first labeled % M
    classes one more: the code's rule) from the stream ("semi-data", "labeled"), so every semi-supervised
    method of a scenario gets the same set; they are removed from ``ctx.parts`` in place.  The visible
    labels are those of the server set and of ``client_labeled_fraction`` of each client's samples
    (stream ("semi-data", "client-labels")); every other entry is −1: training reads labels only there.
    """
    y = ctx.data.train.y
    n, m = len(y), int(ctx.data.train.num_classes)
    if labeled > n:
        raise ConfigError("algorithm.labeled", f"{labeled} labeled samples requested but the training set has only {n}")
    rng = ctx.streams.numpy("semi-data", "labeled")
    ynp = y.cpu().numpy()
    chosen: list[np.ndarray] = []
    for c in range(m):
        want = labeled // m + (1 if c < labeled % m else 0)
        pool = np.flatnonzero(ynp == c)
        if want > len(pool):
            raise ConfigError("algorithm.labeled", f"{labeled} labeled samples need {want} of class {c} (uniform per "
                                                   f"class) but the training set has {len(pool)}")
        chosen.append(rng.choice(pool, size=want, replace=False))
    idx = np.sort(np.concatenate(chosen)).astype(np.int64) if chosen else np.zeros(0, np.int64)
    parts = [np.setdiff1d(p, idx, assume_unique=True) for p in ctx.parts]
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty and need_clients:
        raise ConfigError("algorithm.labeled", f"after taking {labeled} labeled samples for the server, {len(empty)} "
                                               f"client(s) hold no data; lower labeled or use fewer clients")
    ctx.parts[:] = parts
    visible = torch.full((n,), -1, dtype=torch.int64, device=y.device)
    t = torch.as_tensor(idx, device=y.device)
    visible[t] = y[t]
    lrng = ctx.streams.numpy("semi-data", "client-labels")
    for p in parts:
        k = int(math.floor(client_labeled_fraction * len(p) + 1e-9))
        if k:
            j = torch.as_tensor(np.sort(lrng.choice(p, size=k, replace=False)), device=y.device)
            visible[j] = y[j]
    return idx, visible


class SemiSFL(SplitRounds):
    """SemiSFL on :class:`SplitRounds`: the server's supervised phase, then the clients' unsupervised
    split iterations (features up, pseudo-labelled consistency and clustering on the server)."""

    name = "semisfl"
    theorems = ("semisfl",)  # SemiSFL Theorem 1 (its baselines FedSwitch-SL and Supervised-only declare none)
    family = "semisfl"  # client-selection stream shared by SemiSFL and its split baselines
    download_models = 2  # the bottom and the teacher bottom
    upload_what = "features"
    step_what = "semisfl-split"
    version_per_round = True  # the supervised phase trains every round, clients or not

    Config = SemiSFLConfig

    # ================================================================================== set-up
    @classmethod
    def work(cls, config: Any) -> Work:
        """The split rounds' work plus the labeled phase: at most K_s server steps per round (the controller
        only ever lowers K_s)."""
        return replace(super().work(config), server_steps=int(config.k_s), server_field="k_s")

    def setup(self) -> None:
        super().setup()
        ctx, cfg = self.ctx, self.cfg
        require(self.training, "train.systems_only",
                f"{self.name} trains pseudo-labels from the model itself; systems-only runs are not supported")
        self.k_u = int(cfg.local_iterations if cfg.local_iterations is not None else (ctx.training.sgd.local_steps or 0))
        self.steps = self.k_u
        require(self.k_u >= 1 or cfg.clients_per_round == 0, "algorithm.local_iterations",
                f"{self.name} needs K_u >= 1 split iterations per round: set it or train.local_steps")
        self.labeled_idx, self.visible_y = semi_data(ctx, cfg.labeled, cfg.client_labeled_fraction,
                                                     need_clients=cfg.clients_per_round > 0)
        require(cfg.k_s == 0 or len(self.labeled_idx) > 0, "algorithm.labeled",
                f"the server's labeled phase (k_s = {cfg.k_s}) needs labeled >= 1")
        self.sizes = np.array([len(p) for p in ctx.parts], dtype=np.int64)
        n = len(ctx.data.train.y)
        self.y_train = self.visible_y  # nothing inherited may read the hidden labels
        self.label_counts = None
        # model pieces: bottom/top halves, the projection head, the teacher copies
        d = int(self.costs.activation_dim)
        gen = ctx.streams.torch(self.family, "head-init")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            self.head = ProjectionHead(cfg.head, d, cfg.head_hidden, cfg.head_dim)
        wc, ws = split_state(ctx.global_state, cfg.cut)
        self.wc = {k: v.clone() for k, v in wc.items()}
        self.ws = {k: v.clone() for k, v in ws.items()}
        self.hp = {k: v.detach().clone() for k, v in self.head.state_dict().items()}
        self.t_wc = {k: v.clone() for k, v in self.wc.items()}
        self.t_ws = {k: v.clone() for k, v in self.ws.items()}
        self.t_hp = {k: v.clone() for k, v in self.hp.items()}
        self.queue = FeatureQueue(self.head.d_out, cfg.queue_size, ctx.device)
        self.ema_steps = 0
        self.head_bytes = state_bytes(self.hp)
        n_head = sum(v.numel() for v in self.hp.values())
        c = self.costs
        # FLOPs per sample: supervised step = full model fwd+bwd + head fwd+bwd + teacher bottom and head fwd;
        # split step on the server = top fwd+bwd + teacher top fwd + head fwd+bwd + teacher head fwd
        self.sup_flops = (c.client_forward * 2 + c.client_backward + c.server_forward + c.server_backward
                          + 8.0 * n_head)
        self.split_flops = c.server_forward * 2 + c.server_backward + 8.0 * n_head
        self.ctl = KsController(k_s=int(cfg.k_s), mode=cfg.adapt, alpha=cfg.alpha, beta=cfg.beta,
                                n_labeled=int(len(self.labeled_idx)), n_total=n, window=cfg.window, periods=cfg.periods)
        self.server_batch = int(cfg.server_batch or ctx.training.sgd.batch_size)
        self._probe_prev: tuple[torch.Tensor, torch.Tensor] | None = None
        self._probe_sets()

    # ================================================================================== model pieces
    def _bottom(self, p: State, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.ctx.training.worker, p, (x, 0, self.cfg.cut), strict=False)

    def _top(self, p: State, e: torch.Tensor) -> torch.Tensor:
        return functional_call(self.ctx.training.worker, p, (e, self.cfg.cut, None), strict=False)

    def _proj(self, p: State, e: torch.Tensor) -> torch.Tensor:
        return functional_call(self.head, p, (e,))

    def full_state(self) -> State:
        if self.cfg.evaluate == "teacher":
            return merge_state(self.t_wc, self.t_ws, self.order)
        return merge_state(self.wc, self.ws, self.order)

    def lr_at(self, rnd: int) -> float:
        """Learning rate of round ``rnd`` (1-based): constant, or cosine to ``min_lr`` over stop.max_versions."""
        lr, cfg = self.ctx.training.sgd.lr, self.cfg
        total = self.ctx.scenario.stop.max_versions
        if cfg.lr_schedule == "constant" or not total:
            return float(lr)
        prog = min(1.0, (rnd - 1) / float(total))
        return float(cfg.min_lr + 0.5 * (lr - cfg.min_lr) * (1.0 + math.cos(math.pi * prog)))

    def _optimizer(self, params: State, lr: float) -> SideOptimizer:
        return SideOptimizer(params, replace(self.ctx.training.sgd, lr=lr))

    # ================================================================================== server phase
    def _server_view(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A view of a labeled batch for the supervised phase: strong (SemiSFL) or weak (FedSwitch-SL)."""
        cfg = self.cfg
        if cfg.server_view == "weak":
            return weak_view(x, cfg.weak, gen)
        return strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)

    def supervised_phase(self, k_s: int, lr: float, rnd: int) -> float:
        """K_s steps of CE (+ SupCon T) on labeled batches with the teacher EMA after each; mean loss."""
        if k_s == 0:
            return float("nan")
        cfg = self.cfg
        heads = {_HEAD + k: v for k, v in self.hp.items()}
        opt = self._optimizer({**self.wc, **self.ws, **heads}, lr)
        gen = self.ctx.streams.torch(self.family, "labeled-batches", rnd)
        x_all = self.ctx.data.train.x
        total = 0.0
        for pos in batch_schedule(len(self.labeled_idx), k_s, self.server_batch, gen):
            idx = torch.as_tensor(self.labeled_idx[pos.numpy()], device=x_all.device)
            x, y = x_all[idx], self.visible_y[idx]
            v1 = self._server_view(x, gen)
            p = opt.params
            wc = {k: p[k] for k in self.wc}
            ws = {k: p[k] for k in self.ws}
            hp = {k[len(_HEAD):]: p[k] for k in heads}
            e = self._bottom(wc, v1)
            loss = F.cross_entropy(self._top(ws, e), y)
            if cfg.supcon:
                v2 = self._server_view(x, gen)
                with torch.no_grad():
                    keys = self._proj(self.t_hp, self._bottom(self.t_wc, v2))
                loss = loss + contrastive_loss(self._proj(hp, e), keys, y, self.queue, cfg.kappa)
            opt.step(_grads_or_zero(torch.autograd.grad(loss, opt.trainable, allow_unused=True), opt.trainable))
            total += float(loss.detach())
            self.ema_steps += 1
            decay = min(1.0 - 1.0 / (self.ema_steps + 1), cfg.ema)
            new = opt.state()
            self.wc = {k: new[k] for k in self.wc}
            self.ws = {k: new[k] for k in self.ws}
            self.hp = {k[len(_HEAD):]: new[k] for k in heads}
            # teacher EMA, w~ = decay·w~ + (1 − decay)·w (counters: the larger value, i.e. the student's)
            self.t_wc = state_mix(self.t_wc, self.wc, 1.0 - decay)
            self.t_ws = state_mix(self.t_ws, self.ws, 1.0 - decay)
            self.t_hp = state_mix(self.t_hp, self.hp, 1.0 - decay)
        return total / k_s

    def split_step(self, acts: list[torch.Tensor], t_acts: list[torch.Tensor], idxs: list[torch.Tensor],
                   opt: SideOptimizer) -> tuple[list[torch.Tensor], dict[str, float]]:
        """One server step on the concatenated features: (per-client feature gradients, loss terms)."""
        cfg = self.cfg
        n_clients = len(acts)
        e = torch.cat(acts).detach().requires_grad_(True)
        et = torch.cat(t_acts).detach()
        idx = torch.cat(idxs)
        p = opt.params
        ws = {k: p[k] for k in self.ws}
        hp = {k[len(_HEAD):]: p[k] for k in p if k.startswith(_HEAD)}
        out = self._top(ws, e)
        with torch.no_grad():
            probs = torch.softmax(self._top(self.t_ws, et), dim=1)
            conf, pl = probs.max(dim=1)
        mask = conf >= cfg.tau
        vis = self.visible_y[idx]
        has = vis >= 0
        pl = torch.where(has, vis, pl)
        mask = mask | has
        h = (F.cross_entropy(out, pl, reduction="none") * mask.to(out.dtype)).mean()
        loss = h
        c_val = 0.0
        if cfg.clustering:
            with torch.no_grad():
                keys = self._proj(self.t_hp, et)
            c = contrastive_loss(self._proj(hp, e), keys, pl, self.queue, cfg.kappa, masks=mask)
            loss = loss + c
            c_val = float(c.detach())
        params = [e, *opt.trainable]
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        ge = grads[0] * n_clients
        opt.step(_grads_or_zero(grads[1:], opt.trainable))
        sizes = [len(a) for a in acts]
        unl = ~has
        info = {"loss": float(loss.detach()), "H": float(h.detach()), "C": c_val,
                "n_unlabeled": int(unl.sum()), "n_masked_in": int((mask & unl).sum())}
        info.update(self._pseudo_label_quality(idx[unl], pl[unl], mask[unl]))
        return list(torch.split(ge, sizes)), info

    def _pseudo_label_quality(self, idx: torch.Tensor, pl: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
        """Metrics only: wrong confident pseudo-labels among unlabeled samples (reads the hidden labels)."""
        hidden = self.ctx.data.train.y[idx]
        return {"n_wrong_in": int(((pl != hidden) & mask).sum())}

    # ================================================================================== the round
    def begin(self) -> None:
        if self.cfg.probe_every:
            self._probe("init", 0)

    def server_phase(self, rnd: int) -> Generator[simpy.events.Event, Any, bool]:
        """(i) K_s supervised steps on the labeled set, served as one request; the seesaw probe."""
        ctx, cfg = self.ctx, self.cfg
        start, up0, down0 = ctx.env.now, ctx.world.bytes_up, ctx.world.bytes_down
        lr = self.lr_at(rnd)
        k_s = int(self.ctl.k_s)
        f_s = self.supervised_phase(k_s, lr, rnd)
        if k_s:
            yield from ctx.serve(None, self.timing.server_seconds(self.sup_flops * k_s * self.server_batch),
                                 what="semisfl-supervised")
        probing = bool(cfg.probe_every) and rnd % cfg.probe_every == 0
        if probing:
            self._probe("after_sup", rnd)
        self._now = {"start": start, "lr": lr, "k_s": k_s, "f_s": f_s, "probing": probing, "up0": up0, "down0": down0,
                     "f_u": float("nan"), "stats": {}}
        return bool(k_s)

    def client_optimizer(self, state: State) -> SideOptimizer:
        """Rebuilt at each phase with the round's learning rate (the code)."""
        return self._optimizer(state, self._now["lr"])

    def begin_round(self, clients: list[int], rnd: int) -> None:
        """(ii) The client phase's pieces: the teacher bottom frozen on the clients, the server's optimizer
        over the top and head, the probes' drift per step."""
        now = self._now
        now["wc0"] = {k: v.clone() for k, v in self.wc.items()}
        now["t_wc"] = {k: v.clone() for k, v in self.t_wc.items()}  # frozen on the clients for the whole phase
        now["heads"] = heads = {_HEAD + k: v for k, v in self.hp.items()}
        now["sopt"] = self._optimizer({**self.ws, **heads}, now["lr"])
        now["drift"] = np.zeros(self.k_u + 1)
        now["g_max_sq"] = 0.0
        now["tot"] = {"loss": 0.0, "H": 0.0, "C": 0.0, "n_unlabeled": 0, "n_masked_in": 0, "n_wrong_in": 0}

    def open_session(self, s: SplitSession, rnd: int) -> None:
        s.extra["gen"] = self.ctx.streams.torch("client", s.client, "task", s.task, "augment")

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        """Student features of a strong view and teacher features of a weak view; both go up."""
        cfg, x_all = self.cfg, self.ctx.data.train.x
        idx = torch.as_tensor(s.batches[e], device=x_all.device)
        x = x_all[idx]
        gen = s.extra["gen"]
        s.x = strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)
        weak = weak_view(x, cfg.weak, gen)
        s.act = self.computer.forward(s.opt.params, s.x)
        s.extra["t_act"] = self.computer.forward(self._now["t_wc"], weak)
        n_lab = int((self.visible_y[idx] >= 0).sum())
        return 2 * len(idx), 2 * len(idx) * self.costs.activation_bytes + n_lab * self.costs.label_bytes

    def client_backward(self, s: SplitSession, e: int) -> None:
        now = self._now
        if now["probing"]:
            now["g_max_sq"] = max(now["g_max_sq"], self._step_grad_sq(s.opt, s.x, s.grad))
        self.computer.client_step(s.opt, s.x, s.grad)
        if now["probing"]:
            wc0 = now["wc0"]
            d = sum(float(((s.opt.params[k].detach() - wc0[k]) ** 2).sum()) for k in wc0
                    if wc0[k].is_floating_point())
            now["drift"][e + 1] = max(now["drift"][e + 1], d)

    def step_flops(self, samples: int) -> float:
        return self.split_flops * samples

    def server_step(self, sessions: list[SplitSession], e: int) -> None:
        ctx, now = self.ctx, self._now
        idxs = [torch.as_tensor(s.batches[e], device=ctx.device) for s in sessions]
        grads, info = self.split_step([s.act for s in sessions], [s.extra["t_act"] for s in sessions], idxs,
                                      now["sopt"])
        for s, g in zip(sessions, grads):
            s.grad = g
        tot = now["tot"]
        for k in tot:
            tot[k] += info[k]
        self.server_steps += 1
        ctx.measure("server_step", step=self.server_steps, version=ctx.version,
                    n_real=sum(len(ix) for ix in idxs), n_generated=0, clients=[s.client for s in sessions],
                    shrink_factor=1.0, tv_real=None, tv_union=None)

    def end_client_phase(self, sessions: list[SplitSession]) -> None:
        """(iii) The server part and head from the phase's optimizer; the queue cleared; the phase's means."""
        now, K = self._now, self.k_u
        new = now["sopt"].state()
        self.ws = {k: new[k] for k in self.ws}
        self.hp = {k[len(_HEAD):]: new[k] for k in now["heads"]}
        self.queue.clear()
        tot = now["tot"]
        nu = max(1, tot["n_unlabeled"])
        stats = {"H": tot["H"] / K, "C": tot["C"] / K,
                 "mask_rate": 1.0 - tot["n_masked_in"] / nu if tot["n_unlabeled"] else float("nan"),
                 "impurity": (tot["n_wrong_in"] / tot["n_masked_in"]) if tot["n_masked_in"] else float("nan")}
        if now["probing"]:
            drift = now["drift"]
            stats["drift"] = [[int(k), float(drift[k])] for k in range(1, K + 1)]
            stats["G_max_sq"] = now["g_max_sq"]
            beta = self.ctx.training.sgd.momentum
            stats["eta_eff"] = now["lr"] / (1.0 - beta) if beta < 1 else float("inf")
        now["f_u"], now["stats"] = tot["loss"] / K, stats

    def end_round(self, rnd: int, clients: list[int]) -> None:
        """The seesaw probe, the K_s controller and the round's ``semisfl_round`` record."""
        ctx, now = self.ctx, self._now
        if now["probing"] and clients:
            self._probe("after_semi", rnd)
        k_next = self.ctl.record(now["f_s"], now["f_u"], now["lr"], self.k_u)
        ctx.measure("semisfl_round", round=rnd, k_s=now["k_s"], k_s_next=int(k_next), k_u=self.k_u,
                    f_s=now["f_s"], f_u=now["f_u"], lr=now["lr"], r_h=self.ctl.r_h,
                    indicators=len(self.ctl.indicators), clients=clients,
                    bytes_up=int(ctx.world.bytes_up - now["up0"]),
                    bytes_down=int(ctx.world.bytes_down - now["down0"]),
                    start=now["start"], **now["stats"])

    def _step_grad_sq(self, opt: SideOptimizer, x: torch.Tensor, grad_a: torch.Tensor) -> float:
        """‖g‖² of the step the client is about to take (clipped, plus weight decay): Lemma 4's G."""
        a = self._bottom(opt.params, x)
        gs = _grads_or_zero(torch.autograd.grad(a, opt.trainable, grad_outputs=grad_a, allow_unused=True),
                            opt.trainable)
        sgd = self.ctx.training.sgd
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in gs))
        scale = min(1.0, sgd.clip_norm / (norm + 1e-6)) if sgd.clip_norm is not None else 1.0
        return sum(float(((g * scale + sgd.weight_decay * p.detach()) ** 2).sum()) for g, p in zip(gs, opt.trainable))

    # ================================================================================== probes
    def _probe_sets(self) -> None:
        rng = self.ctx.streams.numpy(self.family, "probe-sets")
        k = int(self.cfg.probe_samples)
        lab = self.labeled_idx
        unl = np.concatenate([p for p in self.ctx.parts]) if self.ctx.parts else np.zeros(0, np.int64)
        self.probe_l = np.sort(rng.choice(lab, size=min(k, len(lab)), replace=False)) if len(lab) else lab
        self.probe_u = np.sort(rng.choice(unl, size=min(k, len(unl)), replace=False)) if len(unl) else unl

    def _losses(self, params: State, idx_l: np.ndarray, idx_u: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(l_s, l_u) on probe samples with fixed views: mean CE + T and mean masked H + C (queue as now)."""
        cfg, x_all = self.cfg, self.ctx.data.train.x
        wc = {k: params[k] for k in self.wc}
        ws = {k: params[k] for k in self.ws}
        hp = {k[len(_HEAD):]: params[k] for k in params if k.startswith(_HEAD)}
        gen = self.ctx.streams.torch(self.family, "probe-views")
        zero = torch.zeros((), device=x_all.device)
        ls = lu = zero
        if len(idx_l):
            idx = torch.as_tensor(idx_l, device=x_all.device)
            x, y = x_all[idx], self.visible_y[idx]
            v1 = strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)
            e = self._bottom(wc, v1)
            ls = F.cross_entropy(self._top(ws, e), y)
            if cfg.supcon:
                v2 = strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)
                with torch.no_grad():
                    keys = self._proj(self.t_hp, self._bottom(self.t_wc, v2))
                q = FeatureQueue(self.queue.dim, self.queue.size, self.queue.device)
                q.keys, q.labels, q.masks = self.queue.keys, self.queue.labels, self.queue.masks
                ls = ls + contrastive_loss(self._proj(hp, e), keys, y, q, cfg.kappa)
        if len(idx_u):
            idx = torch.as_tensor(idx_u, device=x_all.device)
            x = x_all[idx]
            vs = strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)
            vw = weak_view(x, cfg.weak, gen)
            with torch.no_grad():
                et = self._bottom(self.t_wc, vw)
                conf, pl = torch.softmax(self._top(self.t_ws, et), dim=1).max(dim=1)
                keys = self._proj(self.t_hp, et)
            vis = self.visible_y[idx]
            pl = torch.where(vis >= 0, vis, pl)
            mask = (conf >= cfg.tau) | (vis >= 0)
            e = self._bottom(wc, vs)
            lu = (F.cross_entropy(self._top(ws, e), pl, reduction="none") * mask.to(e.dtype)).mean()
            if cfg.clustering:
                q = FeatureQueue(self.queue.dim, self.queue.size, self.queue.device)
                q.keys, q.labels, q.masks = self.queue.keys, self.queue.labels, self.queue.masks
                lu = lu + contrastive_loss(self._proj(hp, e), keys, pl, q, cfg.kappa, masks=mask)
        return ls, lu

    def _probe(self, tag: str, rnd: int) -> None:
        """Per-sample gradient moments, ‖∇F‖², F and a secant L at the current student; one trace record."""
        params = {k: v.detach().clone().requires_grad_(v.is_floating_point())
                  for k, v in {**self.wc, **self.ws, **{_HEAD + k: v for k, v in self.hp.items()}}.items()}
        train = [v for v in params.values() if v.requires_grad]

        def sq(loss: torch.Tensor) -> tuple[float, torch.Tensor]:
            if not loss.requires_grad:
                return 0.0, torch.zeros(sum(p.numel() for p in train), device=train[0].device)
            g = torch.cat([x.reshape(-1) for x in _grads_or_zero(torch.autograd.grad(loss, train, allow_unused=True, retain_graph=True), train)])
            return float((g ** 2).sum()), g

        per_s = [sq(self._losses(params, self.probe_l[j:j + 1], self.probe_u[:0])[0])[0] for j in range(len(self.probe_l))]
        per_u = [sq(self._losses(params, self.probe_l[:0], self.probe_u[j:j + 1])[1])[0] for j in range(len(self.probe_u))]
        ls, lu = self._losses(params, self.probe_l, self.probe_u)
        fval = float((ls + lu).detach())
        gnorm, g = sq(ls + lu)
        _, g_s = sq(ls) if len(self.probe_l) else (0.0, None)
        _, g_u = sq(self._losses(params, self.probe_l[:0], self.probe_u)[1]) if len(self.probe_u) else (0.0, None)
        w = torch.cat([v.detach().reshape(-1) for v in train])
        lip = float("nan")
        if self._probe_prev is not None:
            w0, g0 = self._probe_prev
            dw = float(torch.linalg.vector_norm(w - w0))
            if dw > 0:
                lip = float(torch.linalg.vector_norm(g - g0)) / dw
        self._probe_prev = (w, g)
        # Lemma 3 (Jensen) needs a loss that is a mean of per-sample losses: CE alone, i.e. without T
        mb_s = float((g_s ** 2).sum()) if g_s is not None and not self.cfg.supcon else float("nan")
        self.ctx.measure("semisfl_probe", round=rnd, tag=tag,
                         Gs2_max=max(per_s) if per_s else float("nan"),
                         Gs2_mean=float(np.mean(per_s)) if per_s else float("nan"),
                         Gu2_max=max(per_u) if per_u else float("nan"),
                         Gu2_mean=float(np.mean(per_u)) if per_u else float("nan"),
                         grad_norm_sq=gnorm, F=fval, L_secant=lip, minibatch_s_sq=mb_s)


class FedSwitchSL(SemiSFL):
    """FedSwitch-SL: split teacher/student pseudo-labelling with the consistency CE only (no C, no T),
    fixed K_s (the spec's reading of the paper's 'naive semi-supervised SFL'), and weak views of the
    labeled batches on the server: the paper credits strong-augmentation supervised training to SemiSFL."""

    name = "fedswitch-sl"
    theorems = ()  # SemiSFL's Theorem 1 is written for SemiSFL (clustering regularisation, adaptive K_s), not this baseline

    Config = FedSwitchSLConfig


class SupervisedOnly(SemiSFL):
    """Supervised-only: the server trains on its labeled set (K_s steps per round, CE + T); no clients."""

    name = "supervised-only"
    theorems = ()  # no clients: SemiSFL's theorem does not describe it

    Config = SupervisedOnlyConfig
