"""Split learning on a :class:`BlockModel`: state halves, per-side costs, and the two sides' computations.

A model cut at block ``cut`` has a client part ``blocks[:cut]`` and a server part ``blocks[cut:]``.  What
travels per local iteration is the activation tensor of the cut layer (client → server), the labels
(client → server) and the activation gradient (server → client); their byte sizes are those of the real
tensors.  FLOPs of each side come from :func:`flops_per_sample` on the real parts (the server's backward
includes the gradient with respect to its input, which it must send back).

The computations work on explicit parameter dictionaries (global state-dict keys ``blocks.<i>.…``) through
``torch.func.functional_call`` on one shared worker model, so many clients' client-side copies and the
server's copy can coexist as plain tensors while the worker's own weights are never touched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedsim.errors import ConfigError

from .costs import activation_bytes, flops_per_sample, state_bytes
from .losses import logit_adjusted_cross_entropy
from .models import BlockModel, block_of
from .sgd import SGDConfig, sgd_step

__all__ = ["SplitCosts", "split_costs", "split_state", "merge_state", "SideOptimizer", "SplitComputer",
           "check_cut"]

State = dict[str, torch.Tensor]


def check_cut(model: BlockModel, cut: int, field: str = "algorithm.cut") -> int:
    n = model.num_blocks()
    if isinstance(cut, bool) or not isinstance(cut, int) or not 0 < cut < n:
        raise ConfigError(field, f"must be an integer in 1..{n - 1} for this model of {n} blocks, got {cut!r}")
    return cut


def split_state(state: Mapping[str, torch.Tensor], cut: int) -> tuple[State, State]:
    """(client half, server half) of a full state dict; keys keep their global names."""
    client = {k: v for k, v in state.items() if block_of(k) < cut}
    server = {k: v for k, v in state.items() if block_of(k) >= cut}
    return client, server


def merge_state(client: Mapping[str, torch.Tensor], server: Mapping[str, torch.Tensor],
                order: list[str] | None = None) -> State:
    """The full state dict from its two halves (detached clones), in ``order`` when given."""
    both = {**client, **server}
    keys = order if order is not None else list(both)
    return {k: both[k].detach().clone() for k in keys}


@dataclass(frozen=True)
class SplitCosts:
    """What one cut costs, measured on the real parts (FLOPs per sample, bytes per sample or per model)."""

    cut: int
    client_forward: float
    client_backward: float
    server_forward: float
    server_backward: float
    activation_bytes: int  # per sample, the cut layer's tensor
    activation_shape: tuple[int, ...]
    label_bytes: int  # per sample (int64 labels as sent)
    client_model_bytes: int
    server_model_bytes: int

    @property
    def server_total(self) -> float:
        return self.server_forward + self.server_backward

    @property
    def activation_dim(self) -> int:
        n = 1
        for s in self.activation_shape:
            n *= int(s)
        return n


def split_costs(model: BlockModel, input_shape: tuple[int, ...], cut: int) -> SplitCosts:
    """Costs of cutting ``model`` at ``cut`` for inputs of ``input_shape``."""
    check_cut(model, cut, "split.cut")
    client = flops_per_sample(model, input_shape, start=0, end=cut)
    server = flops_per_sample(model, input_shape, start=cut, end=None)
    param = next(model.parameters(), None)
    with torch.no_grad():
        a = model(torch.zeros(1, *input_shape, device=None if param is None else param.device), 0, cut)
    c_state, s_state = split_state(model.state_dict(), cut)
    return SplitCosts(
        cut=cut,
        client_forward=client.forward,
        client_backward=client.backward,
        server_forward=server.forward,
        server_backward=server.backward,
        activation_bytes=activation_bytes(model, input_shape, cut, 1),
        activation_shape=tuple(int(s) for s in a.shape[1:]),
        label_bytes=torch.empty(0, dtype=torch.int64, device="cpu").element_size(),  # a size, never data
        client_model_bytes=state_bytes(c_state),
        server_model_bytes=state_bytes(s_state),
    )


class SideOptimizer:
    """SGD over one side's parameter dictionary with the ``lr``, momentum, weight decay and clipping of
    ``cfg`` (its batch and step counts are not used here).

    The tensors are leaves that require grad; ``step(grads)`` is the one local SGD step every trainer takes
    (:func:`fedsim.learn.sgd.sgd_step`: joint clipping, then ``torch.optim.SGD``'s arithmetic), with this
    side's momentum buffers.
    """

    def __init__(self, params: Mapping[str, torch.Tensor], cfg: SGDConfig) -> None:
        self.params: State = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in params.items()}
        self.trainable = [v for v in self.params.values() if v.requires_grad]
        self.cfg = cfg
        self.buffers: list[torch.Tensor | None] = [None] * len(self.trainable)

    def step(self, grads: list[torch.Tensor]) -> None:
        sgd_step(self.trainable, grads, self.buffers, self.cfg)

    def state(self) -> State:
        return {k: v.detach().clone() for k, v in self.params.items()}


class SplitComputer:
    """The computations of split learning on one worker model cut at ``cut``.

    Client side: :meth:`forward` (what is uploaded) and :meth:`client_step` (re-runs the forward with
    autograd and back-propagates the received activation gradient; re-running gives the same activations
    because the client's weights did not change in between, so no autograd graph is held across virtual
    time).  Server side: :meth:`activation_grad` (the gradient sent back, from the server weights as they
    are now, with an optional per-client logit adjustment) and :meth:`server_grads` (the gradient of the
    plain cross-entropy of a batch, for the server's own SGD step and for dissimilarity measurements).
    """

    def __init__(self, model: BlockModel, cut: int) -> None:
        self.model = model
        self.cut = check_cut(model, cut)

    def forward(self, client_params: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return functional_call(self.model, dict(client_params), (x, 0, self.cut), strict=False)

    def client_step(self, opt: SideOptimizer, x: torch.Tensor, grad_a: torch.Tensor) -> None:
        a = functional_call(self.model, opt.params, (x, 0, self.cut), strict=False)
        grads = torch.autograd.grad(a, opt.trainable, grad_outputs=grad_a, allow_unused=True)
        opt.step([torch.zeros_like(p) if g is None else g for p, g in zip(opt.trainable, grads)])

    def logits(self, server_params: Mapping[str, torch.Tensor], a: torch.Tensor) -> torch.Tensor:
        return functional_call(self.model, dict(server_params), (a, self.cut, None), strict=False)

    def activation_grad(self, server_params: Mapping[str, torch.Tensor], a: torch.Tensor, y: torch.Tensor,
                        log_prior: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """(∂ l / ∂ a, l) for the mean loss over the batch; logit-adjusted when ``log_prior`` is given."""
        a = a.detach().requires_grad_(True)
        out = self.logits({k: v.detach() for k, v in server_params.items()}, a)
        loss = F.cross_entropy(out, y) if log_prior is None else logit_adjusted_cross_entropy(out, y, log_prior)
        (g,) = torch.autograd.grad(loss, a)
        return g, float(loss.detach())

    def server_grads(self, opt: SideOptimizer, a: torch.Tensor, y: torch.Tensor) -> tuple[list[torch.Tensor], float]:
        """Gradients of the mean plain cross-entropy w.r.t. the server's trainable tensors."""
        out = self.logits(opt.params, a.detach())
        loss = F.cross_entropy(out, y)
        grads = torch.autograd.grad(loss, opt.trainable, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(opt.trainable, grads)], float(loss.detach())
