"""Synchronous split federated learning: MiniBatch-SFL and S2FL (the GAS paper's SFL baselines, spec §2.8).

A round samples C clients, who download the aggregated client model.  Each of E local iterations is a
barrier: every client runs its forward pass and uploads its activations and labels; once the last has
arrived the server queues for a worker, computes each client's activation gradient with the server model
as it is (fixed for the iteration) and takes **one** SGD step on the concatenated activations; gradients go
back, and each client's backward pass overlaps the next iteration's forward.  After E iterations the
clients upload their client models, which are averaged (|D_k| weights) into a new version.

MiniBatch-SFL (Huang, Tian & Tang 2023): client k's minibatch is ``max(1, int(|D_k| / Σ|D_j| · B · C))``
(the GAS authors' rule), so the server batch is about B·C.

S2FL (Yan et al. 2023), as the GAS code runs it: the C clients are split into ``groups`` (2) groups whose
label mixes are as close to uniform as possible (``rules.s2fl_groups``); each group's concatenated
activations update a copy of the server model from the same start and the copies are averaged with equal
weights.  Here the copies share the server optimizer, so averaging the copies after one step equals one
step with the mean of the groups' gradients, which is how it is computed.  S2FL's adaptive split appears
in the GAS code only in its time accounting; it is not modelled here (every client uses ``cut``).

Choice where the sources are silent: the gradient a client receives is that of the mean loss over its
own minibatch (no logit adjustment), as for GAS's eq. (7).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Generator, Literal

import numpy as np
import simpy
import torch

from fedsim.algorithms.rules import minibatch_sfl_batch_sizes, s2fl_groups
from fedsim.algorithms.base import Contribution, Work
from fedsim.algorithms.sfl_base import SplitAlgorithm, SplitConfig
from fedsim.config import positive
from fedsim.errors import ConfigError


class MiniBatchSFL(SplitAlgorithm):
    name = "minibatch-sfl"

    @classmethod
    def work(cls, config: Any) -> Work:
        k = int(config.clients_per_round)
        return replace(super().work(config), slots=k, slots_field="clients_per_round", per_version=k)
    family = "minibatch-sfl"  # selection stream shared with S2FL

    @dataclass
    class Config(SplitConfig):
        clients_per_round: int = 10
        batch_rule: Literal["data_share", "fixed"] = "data_share"
        groups: int = 1
        group_passes: int = 100

        def validate(self, prefix: str) -> None:
            SplitConfig.validate(self, prefix)
            positive(self.clients_per_round, f"{prefix}.clients_per_round")
            positive(self.groups, f"{prefix}.groups")
            positive(self.group_passes, f"{prefix}.group_passes", allow_zero=True)

    def run(self) -> Generator[simpy.events.Event, Any, None]:
        ctx, cfg = self.ctx, self.cfg
        steps = cfg.local_iterations if cfg.local_iterations is not None else ctx.training.sgd.local_steps
        if steps is None:
            raise ConfigError("algorithm.local_iterations",
                              f"{self.name} needs a common number of local iterations: set it or train.local_steps")
        self.steps = int(steps)
        self.task_of = np.zeros(ctx.num_clients, dtype=np.int64)
        rnd = 0
        while not ctx.done.triggered:
            rnd += 1
            yield from self._round(rnd)

    def _groups(self, clients: list[int], rnd: int) -> list[list[int]]:
        if self.cfg.groups <= 1 or len(clients) < 2:
            return [list(range(len(clients)))]
        hists = self.label_counts[clients]
        rng = self.ctx.streams.numpy(self.name, "groups", rnd)
        return s2fl_groups(hists, min(self.cfg.groups, len(clients)), self.cfg.group_passes, rng)

    def _round(self, rnd: int) -> Generator[simpy.events.Event, Any, None]:
        ctx, env, cfg, timing = self.ctx, self.ctx.env, self.cfg, self.timing
        start, base_version = env.now, ctx.version
        clients = self.sample_clients(cfg.clients_per_round, (self.family, "select", rnd))
        if not clients:
            yield env.timeout(0)
            return
        B = ctx.training.sgd.batch_size
        if cfg.batch_rule == "data_share":
            bs = minibatch_sfl_batch_sizes([int(self.sizes[c]) for c in clients], B, len(clients))
        else:
            bs = [B] * len(clients)
        groups = self._groups(clients, rnd)
        ctx.world.schedule(len(clients))
        scheds, opts = [], []
        for c, b in zip(clients, bs):
            task = int(self.task_of[c])
            self.task_of[c] += 1
            scheds.append(self.schedule(c, task, self.steps, b))
            opts.append(self.client_optimizer(self.wc) if self.training else None)
            ctx.versions.record_dispatch(c, base_version, rnd)
        grads: list[torch.Tensor | None] = [None] * len(clients)
        acts: list[torch.Tensor | None] = [None] * len(clients)

        def client_phase(i: int, e: int) -> Generator[simpy.events.Event, Any, None]:
            c, idx_prev = clients[i], scheds[i][e - 1] if e > 0 else None
            if e == 0:
                yield from timing.download(c, self.costs.client_model_bytes, version=base_version)
            else:
                yield from self._backward(i, c, idx_prev, opts[i], grads[i])
            if e == self.steps:
                yield from timing.upload(c, self.costs.client_model_bytes, "model")
                return
            idx = scheds[i][e]
            if opts[i] is not None:
                acts[i] = self.computer.forward(opts[i].params, self.x_train[idx])
            yield from timing.client_pass(c, "forward", len(idx))
            yield from timing.upload(c, timing.activation_upload_bytes(len(idx)), "activations")

        for e in range(self.steps + 1):
            yield env.all_of([env.process(client_phase(i, e)) for i in range(len(clients))])
            if e == self.steps:
                break
            idxs = [scheds[i][e] for i in range(len(clients))]
            n_real = sum(len(ix) for ix in idxs)
            yield from timing.serve(None, self.costs.server_total * n_real, "sfl-step")
            if self.training:
                ys = [self.y_train[ix] for ix in idxs]
                for i in range(len(clients)):
                    grads[i], _ = self.computer.activation_grad(self.server.params, acts[i], ys[i])
                group_grads = []
                for g in groups:
                    a = torch.cat([acts[i] for i in g])
                    y = torch.cat([ys[i] for i in g])
                    group_grads.append(self.computer.server_grads(self.server, a, y)[0])
                mean = [torch.stack(gs).mean(0) for gs in zip(*group_grads)]
                self.server.step(mean)
            self.server_steps += 1
            labels = np.concatenate([self.y_train[ix].cpu().numpy() for ix in idxs])
            ctx.trace.emit(env.now, "server_step", step=self.server_steps, version=ctx.version, n_real=n_real,
                           n_generated=0, clients=list(clients),
                           label_counts=np.bincount(labels, minlength=self.num_classes).tolist(), shrink_factor=1.0,
                           tv_real=None, tv_union=None)
        yield from timing.aggregate(len(clients), self.costs.client_model_bytes)
        if ctx.done.triggered:
            return
        if self.training:
            self.wc = self.aggregate_clients([o.state() for o in opts], clients)
        total = float(sum(self.sizes[c] for c in clients))
        weights = [1.0 / len(clients) if cfg.aggregate_weights == "uniform" else float(self.sizes[c]) / total
                   for c in clients]
        applied = [Contribution(client=c, base_version=base_version, download_time=start) for c in clients]
        self.commit(applied, weights, round_=rnd,
                    round_record={"start": start, "end": env.now, "clients": clients, "dropped": []})

    def _backward(self, i: int, c: int, idx: np.ndarray, opt, grad) -> Generator[simpy.events.Event, Any, None]:
        yield from self.timing.download(c, self.timing.gradient_bytes(len(idx)))
        if opt is not None:
            self.computer.client_step(opt, self.x_train[idx], grad)
        yield from self.timing.client_pass(c, "backward", len(idx))


class S2FL(MiniBatchSFL):
    """S2FL: MiniBatch-SFL with label-balanced activation groups (2 by default)."""

    name = "s2fl"

    @dataclass
    class Config(MiniBatchSFL.Config):
        groups: int = 2
