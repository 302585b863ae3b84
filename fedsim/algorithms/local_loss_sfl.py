"""Local-loss split learning (Han, Park, Ham and Lee, "Accelerating federated learning with split learning on
locally generated losses", ICML 2021 workshop): the built-in decoupled split baseline.

Each client trains its part of the model (the first ``cut`` blocks) on a loss of its own, an auxiliary head
(a linear layer from the cut layer to the classes) after its part.  Every ``upload_every``-th local iteration
(0, k, 2k, …) it also uploads the cut layer's activations and labels; no gradient comes back and the client
does not wait, so the server trains its part on the activations as they arrive, one SGD step per uploading
iteration on every client's minibatch.  The client parts are averaged at the end of the round (|D_k|
weights).  The declared exchange (``fedsim.messages.Exchange``) makes the shape charge exactly that: ⌈E/k⌉
activation uploads per client and round, no gradient downloads, no server step on iterations that upload
nothing, and the head's forward and backward, 6·d·m FLOPs per sample (d activations, m classes, biases not
counted), on the client.

Choice where the paper differs: each client keeps its own auxiliary head from round to round (it never
travels); averaging it with the client part would add its bytes to every model transfer.  The head starts
from N(0, 0.1²) weights and zero biases drawn from the stream ``("aux-head", client)`` and takes plain SGD
steps at the scenario's learning rate.  ``docs/extending/local_loss.py`` is the same algorithm written as a
user would; a test holds the two equal bit for bit.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fedsim.algorithms.configs import LocalLossSFLConfig
from fedsim.algorithms.loops.split import SplitSession
from fedsim.algorithms.loops.split_rounds import SplitRounds
from fedsim.errors import ConfigError
from fedsim.messages import Exchange


class LocalLossSFL(SplitRounds):
    """Local-loss SFL on :class:`SplitRounds`: an auxiliary head on each client, activations up every k-th
    iteration, nothing back, server steps on what arrives."""

    name = "local-loss-sfl"
    theorems = ()  # no theorem written for its setting
    family = "minibatch-sfl"  # selection stream shared with MiniBatch-SFL (paired comparisons)

    Config = LocalLossSFLConfig

    def setup(self) -> None:
        super().setup()
        steps = self.cfg.local_iterations or self.ctx.training.sgd.local_steps
        if steps is None:
            raise ConfigError("algorithm.local_iterations",
                              f"{self.name} needs a common number of local iterations: set it or train.local_steps")
        self.steps = int(steps)
        self.heads: dict[int, list[torch.Tensor]] = {}  # each client's auxiliary head (weight, bias)

    def exchange(self) -> Exchange:
        """Activations up every ``upload_every``-th iteration, no gradient, no wait, the head's 6·d·m FLOPs."""
        d, m = self.costs.activation_dim, self.num_classes
        return Exchange(upload_every=self.cfg.upload_every, gradient=False, aux_flops=6.0 * d * m)

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        idx = s.batches[e]
        if s.opt is not None:
            s.act = self.computer.forward(s.opt.params, self.x_train[idx])
        return len(idx), self.timing.activation_upload_bytes(len(idx)) if self.uploads(e) else 0

    def client_backward(self, s: SplitSession, e: int) -> None:
        """The step on the client's own loss: the head's gradient at the cut layer drives the client part's
        backward pass; the head takes a plain SGD step."""
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
        self.server_steps += 1
        if not self.training:
            return
        a = torch.cat([s.act for s in sessions])
        y = torch.cat([self.y_train[s.batches[e]] for s in sessions])
        grads, _ = self.computer.server_grads(self.server, a, y)
        self.server.step(grads)
