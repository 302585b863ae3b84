"""Full-model semi-supervised FL baselines of the SemiSFL paper: SemiFL and FedSwitch (simplified).

Both share SemiSFL's data (``semi_data``: the same labeled server set, unlabeled clients) and its round
shape, run by the framework's ``SyncRounds`` (the labeled phase is its ``server_phase``): the server first
trains the whole model for ``k_s`` steps of cross-entropy on labeled batches (weak views), then N_h
clients download the model, train on their unlabeled data and upload it, and the server averages the
uploads (``fedavg_rule``, weights = samples processed).  Each client task is an ``Assignment`` with its
own local trainer.

SemiFL (Diao et al., NeurIPS 2022), as the SemiSFL paper summarises it: the downloaded global model
pseudo-labels the weak views (confidence ≥ ``tau``); the loss is the FixMatch CE of the strong views
against those labels plus a Mixup loss among the confident samples (λ ~ Beta(``mixup_alpha``,
``mixup_alpha``), the mixed weak views against both pseudo-labels).  Static BatchNorm is not modelled
(the fedsim CNN has none).

FedSwitch (Zhao et al. 2023), simplified: every client also downloads the global EMA teacher (2|w|
down, 2|w| up); per batch, pseudo-labels come from whichever of teacher and student is more confident
on average on the weak views (a stand-in for FedSwitch's adaptive teacher/student switching, whose
IIDness hyper-parameter the SemiSFL paper does not give); after every local step the client's teacher
is EMA-updated (decay ``ema``).  The server averages students and teachers separately, EMA-updates the
teacher during its labeled phase, and the *teacher* is the evaluated model (as the paper tests it).
"""
from __future__ import annotations

__all__ = ["SemiFL", "FedSwitch", "FedMatch"]

import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generator, Iterator

import numpy as np
import simpy
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedsim.algorithms.loops.sync_rounds import SyncRounds

from fedsim.algorithms.pipeline import client_task

from fedsim.messages import Assignment, TrainOutcome, Update, Work
from fedsim.algorithms.fedavg import fedavg_rule
from fedsim.algorithms.semisfl import semi_data
from fedsim.config import positive, require
from fedsim.learn.augment import strong_view, weak_view

from fedsim.learn.state import State, clone_state, masked_weighted_average, state_mix
from fedsim.learn.sgd import PlainSGD, TrainStats, batch_schedule, num_steps
from fedsim.algorithms.configs import FedMatchConfig, SemiFLConfig

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor


class SemiFL(SyncRounds):
    """SemiFL on the framework's synchronous rounds: the labeled phase is its :meth:`server_phase`, the
    clients' pseudo-labelling trainer its :meth:`assign`, FedAvg of the uploads its :meth:`server_rule`."""

    name = "semifl"
    theorems = ()  # semi-supervised FL baselines: no theorem written for their setting
    family = "semisfl"  # the same client-selection stream as SemiSFL: same clients per round

    @classmethod
    def work(cls, config: Any) -> Work:
        k = int(config.clients_per_round)
        return Work(slots=k, slots_field="clients_per_round", per_version=max(1, k), retry_s=config.retry_s,
                    server_steps=int(config.k_s), server_field="k_s")  # the labeled phase: K_s steps per round

    Config = SemiFLConfig


    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        require(not ctx.scenario.train.systems_only, "train.systems_only",
                f"{self.name} trains pseudo-labels from the model itself; systems-only runs are not supported")
        self.labeled_idx, self.visible_y = semi_data(ctx, config.labeled, config.client_labeled_fraction)
        require(config.k_s == 0 or len(self.labeled_idx) > 0, "algorithm.labeled",
                f"the server's labeled phase (k_s = {config.k_s}) needs labeled >= 1")
        self.server_batch = int(config.server_batch or ctx.training.sgd.batch_size)
        self.teacher: State | None = None
        self.ema_steps = 0
        #: the model the clients download and the labeled phase trains (FedSwitch evaluates its teacher)
        self.student = clone_state(ctx.global_state)

    # ---------------------------------------------------------------------------------- server
    def supervised_phase(self, state: State, rnd: int) -> State:
        """K_s SGD steps of CE on labeled weak views from ``state`` (teacher EMA after each, when kept)."""
        ctx, cfg = self.ctx, self.cfg
        if cfg.k_s == 0:
            return state
        model = ctx.training.worker
        model.load_state_dict(state)
        sgd = ctx.training.sgd
        opt = PlainSGD(model.parameters(), sgd)
        gen = ctx.streams.torch("semi-data", "labeled-batches", rnd)
        for pos in batch_schedule(len(self.labeled_idx), cfg.k_s, self.server_batch, gen):
            idx = torch.as_tensor(self.labeled_idx[pos.numpy()], device=self.ctx.device)
            x = weak_view(ctx.data.train.x[idx], cfg.weak, gen)
            loss = F.cross_entropy(model(x), self.visible_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if self.teacher is not None:
                self.ema_steps += 1
                decay = min(1.0 - 1.0 / (self.ema_steps + 1), cfg.ema)
                self.teacher = state_mix(self.teacher, clone_state(model.state_dict()), 1.0 - decay)
        return clone_state(model.state_dict())

    # ---------------------------------------------------------------------------------- clients
    def _views(self, training: "TrainingExecutor", indices: np.ndarray, steps: int,
               gen: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The client's batches of ``steps`` local steps: indices, inputs, weak and strong views."""
        cfg = self.cfg
        for pos in batch_schedule(len(indices), steps, training.sgd.batch_size, gen):
            idx = torch.as_tensor(indices[pos.numpy()], device=training.device)
            x = training.data.train.x[idx]
            weak = weak_view(x, cfg.weak, gen)
            yield idx, x, weak, strong_view(x, cfg.strong, gen, weak=cfg.weak, n=cfg.rand_n, m=cfg.rand_m)

    def _pseudo(self, logits: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conf, pl = torch.softmax(logits, dim=1).max(dim=1)
        vis = self.visible_y[idx]
        has = vis >= 0
        return torch.where(has, vis, pl), (conf >= self.cfg.tau) | has

    def local_trainer(self, module: torch.nn.Module, training: "TrainingExecutor", client: int, indices: np.ndarray,
                      gen: torch.Generator) -> TrainOutcome:
        """FixMatch CE on strong views + Mixup among confident samples, labels from the downloaded model."""
        cfg, sgd = self.cfg, training.sgd
        teacher = copy.deepcopy(module).eval()
        opt = PlainSGD(module.parameters(), sgd)
        steps = num_steps(len(indices), sgd)  # local_steps, or local_epochs over the client's data
        lam_rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=gen)))
        losses, samples = [], 0
        for idx, x, weak, strong in self._views(training, indices, steps, gen):
            with torch.no_grad():
                pl, mask = self._pseudo(teacher(weak), idx)
            loss = (F.cross_entropy(module(strong), pl, reduction="none") * mask.to(x.dtype)).mean()
            conf = torch.nonzero(mask).flatten()
            if len(conf) >= 2:
                lam = float(lam_rng.beta(cfg.mixup_alpha, cfg.mixup_alpha))
                perm = conf[torch.randperm(len(conf), generator=gen).to(conf.device)]  # drawn on the CPU
                mixed = lam * weak[conf] + (1.0 - lam) * weak[perm]
                out = module(mixed)
                loss = loss + lam * F.cross_entropy(out, pl[conf]) + (1.0 - lam) * F.cross_entropy(out, pl[perm])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            samples += len(idx)
        fc = training.flop_cost  # teacher forward + strong fwd/bwd + mixup fwd/bwd
        flops = samples * (fc.forward + 2.0 * fc.total)
        return TrainOutcome(TrainStats(steps, samples, float(np.mean(losses)), losses[-1]), flops=flops)

    # ---------------------------------------------------------------------------------- rounds
    def server_phase(self, round_: int) -> Generator[simpy.events.Event, Any, None]:
        """The labeled phase: K_s SGD steps on the student, in server time, before the round's clients."""
        ctx, cfg = self.ctx, self.cfg
        self.student = self.supervised_phase(self.student, round_)
        if cfg.k_s:
            yield from ctx.serve(None, ctx.server_time(
                ctx.training.flop_cost.total * cfg.k_s * self.server_batch), what="semi-supervised")

    def select(self, k: int, round_: int) -> list[int]:
        """``k`` clients drawn from SemiSFL's selection stream, so both methods train the same clients."""
        return self.sample_clients(k, (self.family, "select", round_))

    def client_model(self) -> State:
        """Clients download the student (the global model may be FedSwitch's teacher)."""
        return self.student

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """The whole model, trained with the method's pseudo-labelling trainer."""
        return Assignment(trainer=self.local_trainer, round=round_)

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        """FedAvg of the uploaded students (weights = samples processed), then :meth:`after_aggregation`;
        the installed model is :meth:`evaluated_state` of the new student."""
        self.student, weights = fedavg_rule(updates, base)
        self.after_aggregation(updates)
        return self.evaluated_state(self.student), weights

    def evaluated_state(self, student: State) -> State:
        return student

    def after_aggregation(self, updates: list[Update]) -> None:
        """Hook for methods that aggregate more than the model (FedSwitch's teachers)."""


class FedSwitch(SemiFL):
    name = "fedswitch"

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        self.teacher = clone_state(ctx.global_state)
        self.client_teachers: dict[int, State] = {}

    def evaluated_state(self, student: State) -> State:
        return clone_state(self.teacher)

    def client_job(self, client: int, base: State, version: int, task: int, assignment: Assignment
                   ) -> Generator[simpy.events.Event, Any, Update]:
        """The student's task, with the global teacher downloaded before it and the client's teacher
        uploaded after it."""
        teacher = self.ctx.training.model_bytes  # the global teacher down, the client's teacher up
        upd = yield from client_task(self.ctx, client, base, version, task=task, assignment=assignment,
                                     extra_downloads=(teacher,), extra_uploads=((teacher, "teacher"),))
        upd.info["teacher"] = self.client_teachers.pop(client)
        return upd

    def local_trainer(self, module: torch.nn.Module, training: "TrainingExecutor", client: int, indices: np.ndarray,
                      gen: torch.Generator) -> TrainOutcome:
        """Masked CE on strong views; labels from the more confident of teacher and student; client EMA."""
        cfg, sgd = self.cfg, training.sgd
        teacher = copy.deepcopy(module)
        teacher.load_state_dict(self.teacher)
        teacher.eval()
        opt = PlainSGD(module.parameters(), sgd)
        steps = num_steps(len(indices), sgd)  # local_steps, or local_epochs over the client's data
        losses, samples, switched = [], 0, 0
        for idx, x, weak, strong in self._views(training, indices, steps, gen):
            with torch.no_grad():
                lt, ls = teacher(weak), module(weak)
                use_student = bool(torch.softmax(ls, 1).max(1).values.mean() > torch.softmax(lt, 1).max(1).values.mean())
                pl, mask = self._pseudo(ls if use_student else lt, idx)
            switched += int(use_student)
            loss = (F.cross_entropy(module(strong), pl, reduction="none") * mask.to(x.dtype)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            teacher.load_state_dict(state_mix(clone_state(teacher.state_dict()), clone_state(module.state_dict()),
                                              1.0 - cfg.ema))
            losses.append(float(loss.detach()))
            samples += len(idx)
        self.client_teachers[client] = clone_state(teacher.state_dict())
        fc = training.flop_cost  # teacher and student forward on the weak view + strong fwd/bwd
        flops = samples * (2.0 * fc.forward + fc.total)
        return TrainOutcome(TrainStats(steps, samples, float(np.mean(losses)), losses[-1]), flops=flops)

    def after_aggregation(self, updates: list[Update]) -> None:
        teachers = [Update(client=u.client, tensors=u.info["teacher"], weight=u.weight) for u in updates]
        self.teacher = masked_weighted_average(teachers, self.teacher)


class FedMatch(SemiFL):
    """FedMatch (Jeong et al., ICLR 2021), simplified as the spec allows.

    Parameter decomposition: the model is w = σ + ψ.  The server's labeled phase trains w, i.e. σ (ψ held
    fixed); clients freeze σ and train only ψ on unlabeled data with an L1 penalty ``l1`` on ψ ("disjoint
    learning").  Inter-client consistency: the server keeps each client's last ψ and sends a client the
    ``helpers`` ψ's closest to its own (cosine similarity of the flattened ψ; FedMatch compares model
    outputs on a random input), each as a model σ + ψ_h (``helpers``·|w| extra download).  Pseudo-labels:
    the agreement (summed one-hot votes) of the client's model and the helpers on the weak view, kept when
    the client's own confidence is ≥ ``tau``; the loss is the masked CE of the strong view plus the KL
    divergence from each helper's softmax to the client's (consistency); ψ has no weight decay (the L1
    penalty takes its place).  Uploads count the whole ψ
    (FedMatch's sparse ψ is not compressed here).  The server averages the uploaded models (σ is shared,
    so this averages ψ).
    """

    name = "fedmatch"

    Config = FedMatchConfig

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        zero = {k: torch.zeros_like(v) if v.is_floating_point() else v.clone() for k, v in ctx.global_state.items()}
        self.psi_global = zero
        self.client_psi: dict[int, State] = {}
        self._helpers: dict[int, list[int]] = {}

    def _sigma(self, w: State) -> State:
        return {k: (w[k] - self.psi_global[k]) if w[k].is_floating_point() else w[k].clone() for k in w}

    def _helpers_of(self, client: int) -> list[int]:
        own = self.client_psi.get(client, self.psi_global)
        v0 = torch.cat([t.reshape(-1) for t in own.values() if t.is_floating_point()])
        scores = []
        for c, psi in self.client_psi.items():
            if c == client:
                continue
            v = torch.cat([t.reshape(-1) for t in psi.values() if t.is_floating_point()])
            scores.append((float(F.cosine_similarity(v0, v, dim=0)), c))
        return [c for _, c in sorted(scores, reverse=True)[: self.cfg.helpers]]

    def client_job(self, client: int, base: State, version: int, task: int, assignment: Assignment
                   ) -> Generator[simpy.events.Event, Any, Update]:
        """The ψ task, with the ``helpers`` closest clients' models downloaded before it."""
        helpers = self._helpers_of(client)
        self._helpers[client] = helpers
        extra = (len(helpers) * self.ctx.training.model_bytes,) if helpers else ()
        return (yield from client_task(self.ctx, client, base, version, task=task, assignment=assignment,
                                       extra_downloads=extra))

    def local_trainer(self, module: torch.nn.Module, training: "TrainingExecutor", client: int, indices: np.ndarray,
                      gen: torch.Generator) -> TrainOutcome:
        """ψ-only training: masked CE on strong views with agreement pseudo-labels + helper KL + L1(ψ)."""
        cfg, sgd = self.cfg, training.sgd
        w0 = clone_state(module.state_dict())
        sigma = self._sigma(w0)
        psi = {k: (w0[k] - sigma[k]).clone().requires_grad_(True) for k in w0 if w0[k].is_floating_point()}
        helper_models = []
        for h in self._helpers.get(client, []):
            m = copy.deepcopy(module)
            m.load_state_dict({k: (sigma[k] + self.client_psi[h][k]) if k in psi else sigma[k] for k in sigma})
            helper_models.append(m.eval())
        opt = PlainSGD(list(psi.values()), replace(sgd, weight_decay=0.0, clip_norm=None))  # ψ: L1, no decay, no clip
        steps = num_steps(len(indices), sgd)  # local_steps, or local_epochs over the client's data
        losses, samples = [], 0
        def forward(x: torch.Tensor) -> torch.Tensor:
            params = {k: sigma[k] + psi[k] if k in psi else sigma[k] for k in sigma}
            return functional_call(module, params, (x,))

        for idx, x, weak, strong in self._views(training, indices, steps, gen):
            with torch.no_grad():
                own = torch.softmax(forward(weak), 1)
                helper_probs = [torch.softmax(h(weak), 1) for h in helper_models]
                votes = F.one_hot(own.argmax(1), own.shape[1]).float()
                for hp in helper_probs:
                    votes += F.one_hot(hp.argmax(1), own.shape[1]).float()
                vis = self.visible_y[idx]
                has = vis >= 0
                pl = torch.where(has, vis, votes.argmax(1))  # the agreed label (ties: the lowest class)
                mask = (own.max(1).values >= cfg.tau) | has  # the client's own confidence decides the mask
            logits = forward(strong)
            loss = (F.cross_entropy(logits, pl, reduction="none") * mask.to(x.dtype)).mean()
            if helper_probs:
                logp = F.log_softmax(forward(weak), 1)
                loss = loss + sum(F.kl_div(logp, hp, reduction="batchmean") for hp in helper_probs) / len(helper_probs)
            loss = loss + cfg.l1 * sum(p.abs().sum() for p in psi.values())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            samples += len(idx)
        new_psi = {k: v.detach().clone() for k, v in psi.items()}
        self.client_psi[client] = new_psi
        module.load_state_dict({k: (sigma[k] + new_psi[k]) if k in new_psi else sigma[k] for k in sigma})
        fc = training.flop_cost  # own weak forward, strong fwd/bwd, weak fwd/bwd (consistency), helpers' forwards
        flops = samples * ((2 + len(helper_models)) * fc.forward + 2.0 * fc.total)
        return TrainOutcome(TrainStats(steps, samples, float(np.mean(losses)), losses[-1]), flops=flops)

    def after_aggregation(self, updates: list[Update]) -> None:
        """ψ_global = mean of the uploaded ψ (the aggregated model minus the shared σ)."""
        psis = [Update(client=u.client, tensors=self.client_psi[u.client], weight=u.weight) for u in updates]
        self.psi_global = masked_weighted_average(psis, self.psi_global)
