"""Synchronous split federated learning: MiniBatch-SFL and S2FL (the GAS paper's SFL baselines, spec §2.8).

The rounds are the loop shape ``loops.split_rounds.SplitRounds``; this module writes only the client and server steps.
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

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from fedsim.algorithms.rules import minibatch_sfl_batch_sizes, s2fl_groups
from fedsim.algorithms.loops.split import SplitSession
from fedsim.algorithms.loops.split_rounds import SplitRounds
from fedsim.config import positive
from fedsim.errors import ConfigError
from fedsim.algorithms.configs import MiniBatchSFLConfig, S2FLConfig


class MiniBatchSFL(SplitRounds):
    """MiniBatch-SFL on :class:`SplitRounds`: one server step per iteration on every client's activations."""

    name = "minibatch-sfl"
    theorems = ()  # synchronous SFL baselines: no theorem written for their setting
    family = "minibatch-sfl"  # selection stream shared with S2FL

    Config = MiniBatchSFLConfig

    def setup(self) -> None:
        super().setup()
        steps = self.cfg.local_iterations if self.cfg.local_iterations is not None else self.ctx.training.sgd.local_steps
        if steps is None:
            raise ConfigError("algorithm.local_iterations",
                              f"{self.name} needs a common number of local iterations: set it or train.local_steps")
        self.steps = int(steps)

    def batch_sizes(self, clients: list[int]) -> list[int]:
        B = self.ctx.training.sgd.batch_size
        if self.cfg.batch_rule == "data_share":
            return minibatch_sfl_batch_sizes([int(self.sizes[c]) for c in clients], B, len(clients))
        return [B] * len(clients)

    def begin_round(self, clients: list[int], rnd: int) -> None:
        self.groups = self._groups(clients, rnd)

    def _groups(self, clients: list[int], rnd: int) -> list[list[int]]:
        if self.cfg.groups <= 1 or len(clients) < 2:
            return [list(range(len(clients)))]
        hists = self.label_counts[clients]
        rng = self.ctx.streams.numpy(self.name, "groups", rnd)
        return s2fl_groups(hists, min(self.cfg.groups, len(clients)), self.cfg.group_passes, rng)

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        idx = s.batches[e]
        if s.opt is not None:
            s.act = self.computer.forward(s.opt.params, self.x_train[idx])
        return len(idx), self.timing.activation_upload_bytes(len(idx))

    def client_backward(self, s: SplitSession, e: int) -> None:
        if s.opt is not None:
            self.computer.client_step(s.opt, self.x_train[s.batches[e]], s.grad)

    def server_step(self, sessions: list[SplitSession], e: int) -> None:
        """Each client's gradient with the server model as it is, then one step on the groups' mean gradient."""
        ctx = self.ctx
        idxs = [s.batches[e] for s in sessions]
        if self.training:
            ys = [self.y_train[ix] for ix in idxs]
            for s, y in zip(sessions, ys):
                s.grad, _ = self.computer.activation_grad(self.server.params, s.act, y)
            group_grads = []
            for g in self.groups:
                a = torch.cat([sessions[i].act for i in g])
                y = torch.cat([ys[i] for i in g])
                group_grads.append(self.computer.server_grads(self.server, a, y)[0])
            mean = [torch.stack(gs).mean(0) for gs in zip(*group_grads)]
            self.server.step(mean)
        self.server_steps += 1
        labels = np.concatenate([self.y_train[ix].cpu().numpy() for ix in idxs])
        ctx.measure("server_step", step=self.server_steps, version=ctx.version,
                    n_real=sum(len(ix) for ix in idxs), n_generated=0, clients=[s.client for s in sessions],
                    label_counts=np.bincount(labels, minlength=self.num_classes).tolist(), shrink_factor=1.0,
                    tv_real=None, tv_union=None)


class S2FL(MiniBatchSFL):
    """S2FL: MiniBatch-SFL with label-balanced activation groups (2 by default)."""

    name = "s2fl"

    Config = S2FLConfig
