"""Local-loss split learning (Han, Park, Ham and Lee, 2021), on fedsim's public API and a declared exchange.

Each client trains its part of the model (the first ``cut`` blocks) on a loss of its own: a small auxiliary
head (a linear layer from the cut layer to the classes) after its part.  Every ``upload_every``-th local
iteration it also uploads the cut layer's activations and labels; no gradient comes back and the client does
not wait, so the server trains its part on the activations as they arrive, one SGD step per uploading
iteration on every client's minibatch.  The client parts are averaged at the end of the round.

The exchange below is all the shape (``SplitRounds``) needs to time and cost this honestly: ⌈E/k⌉ activation
uploads per client and round, no gradient downloads, no server step on the iterations that upload nothing,
and the auxiliary head's forward and backward (6·d·m FLOPs per sample for d activations and m classes,
biases not counted) on the client's device.

Choice: each client keeps its own auxiliary head from round to round (it never travels; averaging it with
the client part, as the paper does, would add its bytes to every model transfer).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedsim.algorithms import Exchange, SplitRounds, SplitRoundsConfig, SplitSession
from fedsim.config import num
from fedsim.errors import ConfigError


class LocalLossSFL(SplitRounds):
    name = "local-loss-sfl-example"
    family = "minibatch-sfl"  # draw the same clients as MiniBatch-SFL (paired comparisons)

    @dataclass
    class Config(SplitRoundsConfig):
        """The split (``cut``, ``local_iterations``, ...), ``clients_per_round`` and how often activations go up."""

        upload_every: int = num(2, ge=1, unit="iterations", doc="k: upload activations every k-th local iteration")

    def setup(self) -> None:
        super().setup()
        steps = self.cfg.local_iterations or self.ctx.training.sgd.local_steps
        if steps is None:
            raise ConfigError("algorithm.local_iterations", "needs a common number of local iterations: "
                              "set it or train.local_steps")
        self.steps = int(steps)
        self.heads: dict[int, list[torch.Tensor]] = {}  # each client's auxiliary head (weight, bias)

    def exchange(self) -> Exchange:
        d, m = self.costs.activation_dim, self.num_classes
        return Exchange(upload_every=self.cfg.upload_every, gradient=False, aux_flops=6.0 * d * m)

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        idx = s.batches[e]
        if s.opt is not None:  # None in a systems-only run: sizes and times only
            s.act = self.computer.forward(s.opt.params, self.x_train[idx])
        return len(idx), self.timing.activation_upload_bytes(len(idx)) if self.uploads(e) else 0

    def client_backward(self, s: SplitSession, e: int) -> None:
        """The client's step on its own loss: the auxiliary head's gradient at the cut layer drives the client
        part's backward pass, and the head takes a plain SGD step."""
        if s.opt is None:
            return
        head = self.heads.get(s.client)
        if head is None:
            gen = self.ctx.streams.torch("aux-head", s.client)
            w = torch.randn(self.num_classes, self.costs.activation_dim, generator=gen) * 0.1
            head = self.heads[s.client] = [w.to(s.act.device), torch.zeros(self.num_classes, device=s.act.device)]
        a = s.act.detach().reshape(len(s.act), -1).requires_grad_(True)
        w, b = (t.requires_grad_(True) for t in head)
        loss = F.cross_entropy(F.linear(a, w, b), self.y_train[s.batches[e]])
        g_a, g_w, g_b = torch.autograd.grad(loss, (a, w, b))
        lr = self.ctx.training.sgd.lr
        self.heads[s.client] = [(w - lr * g_w).detach(), (b - lr * g_b).detach()]
        self.computer.client_step(s.opt, self.x_train[s.batches[e]], g_a.reshape(s.act.shape))

    def server_step(self, sessions: list[SplitSession], e: int) -> None:
        """One SGD step on the activations every client uploaded on iteration ``e`` (as they left the client)."""
        if not self.training:
            return
        a = torch.cat([s.act for s in sessions])
        y = torch.cat([self.y_train[s.batches[e]] for s in sessions])
        grads, _ = self.computer.server_grads(self.server, a, y)
        self.server.step(grads)
