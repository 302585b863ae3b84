"""Per-sample gradients from layer hooks (the Opacus / BackPACK technique), for
:func:`analysis.estimators.per_sample_pass`.

One ordinary forward and backward pass of a chunk of samples, with the loss summed over them: a forward
hook keeps each layer's input, a hook on its output keeps the gradient reaching it, and each sample's
weight gradient is the product of the two (``grad_out[j]ᵀ · input[j]`` for a linear layer, the same on
unfolded patches for a convolution; a bias's is ``grad_out[j]`` summed over positions).  Because the summed
loss's gradient with respect to sample j's output is sample j's own, every per-sample gradient is exact,
and the pass costs about one batched backward instead of ``torch.func.vmap`` of ``grad``, which runs every
operation through functorch's batching rules (and imports torch's compiler stack on first use).

Only models whose every trainable parameter belongs to a supported layer, used once per forward, take this
path (:func:`layer_plan` says None otherwise, and the caller keeps the ``vmap`` path).  Supported: Linear,
Conv1d/Conv2d (zero padding), LayerNorm, BatchNorm in eval mode (running statistics), and fedsim's ViT
patch embedding (its class token and position embedding are added to every sample).  Any module in
training mode that mixes or randomises samples (BatchNorm, dropout) sends the model to the ``vmap`` path.
Before each backward the autograd graph is read: a parameter that feeds an operation outside its layer (a
tied weight), a layer called twice, or a layer input or output changed in place stops the hooked pass
(:class:`Unsupported`), and the caller falls back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn


class Unsupported(Exception):
    """Raised during a hooked pass when its per-sample gradients could be wrong; the caller falls back."""


#: A rule: (module, its input, the gradient of its output) -> per-sample gradient of each own parameter,
#: keyed by the parameter's name within the module, each of shape (batch, *parameter.shape).
Rule = Callable[[nn.Module, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def _linear(m: nn.Linear, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    b = x.shape[0]
    x2, g2 = x.reshape(b, -1, x.shape[-1]), g.reshape(b, -1, g.shape[-1])
    out = {"weight": torch.bmm(g2.transpose(1, 2), x2)}
    if m.bias is not None:
        out["bias"] = g2.sum(dim=1)
    return out


def _conv(m: nn.Conv1d | nn.Conv2d, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    b = x.shape[0]
    k, s, p, d = m.kernel_size, m.stride, m.padding, m.dilation
    if isinstance(m, nn.Conv1d):  # a 1-D convolution is a 2-D one over a height of 1
        x, g = x.unsqueeze(2), g.unsqueeze(2)
        k, s, p, d = (1, k[0]), (1, s[0]), (0, p[0]), (1, d[0])
    cols = F.unfold(x, k, dilation=d, padding=p, stride=s)  # (b, cin * prod(k), positions)
    groups = m.groups
    cols = cols.reshape(b, groups, -1, cols.shape[-1])
    go = g.reshape(b, groups, -1, cols.shape[-1])  # (b, groups, cout / groups, positions)
    w = torch.einsum("bgol,bgil->bgoi", go, cols).reshape(b, *m.weight.shape)
    out = {"weight": w}
    if m.bias is not None:
        out["bias"] = g.reshape(b, g.shape[1], -1).sum(dim=2)
    return out


def _layer_norm(m: nn.LayerNorm, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    b, shape = x.shape[0], tuple(m.normalized_shape)
    xhat = F.layer_norm(x, shape, None, None, m.eps)
    out = {}
    if m.weight is not None:
        out["weight"] = (g * xhat).reshape(b, -1, *shape).sum(dim=1)
    if m.bias is not None:
        out["bias"] = g.reshape(b, -1, *shape).sum(dim=1)
    return out


def _batch_norm(m: nn.modules.batchnorm._BatchNorm, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    b, c = x.shape[0], x.shape[1]
    view = (1, c) + (1,) * (x.dim() - 2)
    xhat = (x - m.running_mean.reshape(view)) / torch.sqrt(m.running_var.reshape(view) + m.eps)
    out = {}
    if m.weight is not None:
        out["weight"] = (g * xhat).reshape(b, c, -1).sum(dim=2)
    if m.bias is not None:
        out["bias"] = g.reshape(b, c, -1).sum(dim=2)
    return out


def _patch_embed(m: nn.Module, x: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    # forward: cat([cls_token.expand(b, 1, d), tokens], dim=1) + pos_embed, so d out[j] / d pos_embed is the
    # identity and d out[j, 0] / d cls_token too
    return {"pos_embed": g.unsqueeze(1), "cls_token": g[:, None, :1, :]}


def _conv_ok(m: nn.Module) -> bool:
    return m.padding_mode == "zeros" and not isinstance(m.padding, str)


def _bn_ok(m: nn.Module) -> bool:
    return not m.training and m.track_running_stats and m.running_mean is not None and m.running_var is not None


def _rules() -> dict[type, tuple[Rule, Callable[[nn.Module], bool]]]:
    """Exact module types (a subclass may change forward) -> (rule, when it applies)."""
    from fedsim.learn.models import _PatchEmbed

    always = lambda m: True  # noqa: E731
    return {
        nn.Linear: (_linear, always),
        nn.Conv1d: (_conv, _conv_ok),
        nn.Conv2d: (_conv, _conv_ok),
        nn.LayerNorm: (_layer_norm, always),
        nn.BatchNorm1d: (_batch_norm, _bn_ok),
        nn.BatchNorm2d: (_batch_norm, _bn_ok),
        _PatchEmbed: (_patch_embed, always),
    }


#: Modules that couple or randomise the samples of a batch in training mode (BatchNorm also without running
#: statistics).
_TRAINING_MIXERS = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd,
                    nn.modules.instancenorm._InstanceNorm)


@dataclass(eq=False)
class _Layer:
    module: nn.Module
    rule: Rule
    params: list[tuple[str, str]]          # (name within the module, name within the model)
    calls: int = 0
    inp: torch.Tensor | None = None
    version: int = 0
    out: torch.Tensor | None = None
    out_version: int = 0
    grad: torch.Tensor | None = None
    hooks: list[Any] = field(default_factory=list)


@dataclass
class LayerPlan:
    """Which layer computes which parameters' per-sample gradients (from :func:`layer_plan`)."""

    layers: list[_Layer]
    per_sample_loss: Callable[..., torch.Tensor]


def layer_plan(model: nn.Module, loss_fn: Callable[..., torch.Tensor]) -> LayerPlan | None:
    """A plan for hooked per-sample gradients of ``model`` under ``loss_fn``, or None where they could be
    wrong or are not supported (the ``vmap`` path then serves).

    ``loss_fn`` must carry ``per_sample(model, *batch)``: the unreduced losses, one per sample, whose mean is
    ``loss_fn(model, *batch)`` (as :func:`analysis.probes.cross_entropy_loss` does)."""
    per_sample = getattr(loss_fn, "per_sample", None)
    if per_sample is None:
        return None
    trainable = [p for p in model.parameters() if p.requires_grad]
    if len(list(model.named_parameters(remove_duplicate=False))) != len(list(model.parameters())):
        return None  # a parameter shared between modules (or a module registered twice)
    rules = _rules()
    layers, covered = [], 0
    for prefix, m in model.named_modules():
        if isinstance(m, _TRAINING_MIXERS) and (m.training or (isinstance(m, nn.modules.batchnorm._BatchNorm)
                                                               and not _bn_ok(m))):
            return None  # batch statistics or dropout: a sample's gradient depends on the batch
        own = [(k, p) for k, p in m.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        rule = rules.get(type(m))
        if rule is None or not rule[1](m):
            return None
        names = [(k, f"{prefix}.{k}" if prefix else k) for k, _ in own]
        layers.append(_Layer(m, rule[0], names))
        covered += len(own)
    if covered != len(trainable):
        return None
    return LayerPlan(layers, per_sample)


def _uses(root: Any) -> dict[int, int]:
    """How many operations of the autograd graph under ``root`` take each leaf tensor (by ``id``): the
    edges into its gradient accumulator."""
    uses: dict[int, int] = {}
    seen, todo = {root}, [root]
    while todo:
        node = todo.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            var = getattr(nxt, "variable", None)
            if var is not None:
                uses[id(var)] = uses.get(id(var), 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return uses


def hooked_grads(plan: LayerPlan, model: nn.Module, batch: Sequence[torch.Tensor]
                 ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-sample gradients (name -> (b, *shape)) and per-sample losses (b,) of one chunk ``batch``.

    Raises :class:`Unsupported` where they could be wrong: a layer called other than once, its input or
    output changed in place, or one of its parameters taken by an operation outside it (checked on the
    autograd graph: each parameter of a called layer must feed exactly one operation, one of an uncalled
    layer none)."""
    for layer in plan.layers:
        layer.calls, layer.inp, layer.out, layer.grad = 0, None, None, None

        def fwd(mod: nn.Module, args: tuple[Any, ...], out: Any, layer: _Layer = layer) -> None:
            layer.calls += 1
            if not args or not isinstance(args[0], torch.Tensor) or not isinstance(out, torch.Tensor):
                layer.calls += 1  # marks it unusable
                return
            layer.inp, layer.version = args[0].detach(), args[0]._version
            layer.out, layer.out_version = out, out._version

        layer.hooks.append(layer.module.register_forward_hook(fwd))
    params = dict(model.named_parameters())
    try:
        with torch.enable_grad():  # as torch.func.grad does: a caller's no_grad block does not stop the pass
            losses = plan.per_sample_loss(model, *batch)
            total = losses.sum()
    finally:
        for layer in plan.layers:
            for h in layer.hooks:
                h.remove()
            layer.hooks.clear()
    b = int(batch[0].shape[0])
    if losses.shape != (b,) or losses.grad_fn is None:
        raise Unsupported(f"per-sample loss of shape {tuple(losses.shape)} for {b} samples")
    uses = _uses(total.grad_fn)
    called = []
    for layer in plan.layers:
        want = 1 if layer.calls == 1 and layer.out is not None and layer.out.requires_grad else 0
        if layer.calls > 1 or any(uses.get(id(params[full]), 0) != want for _, full in layer.params):
            raise Unsupported(f"a parameter of {type(layer.module).__name__} is used outside one call of it")
        if want and (layer.inp._version != layer.version or layer.out._version != layer.out_version):
            raise Unsupported(f"the input or output of {type(layer.module).__name__} was changed in place")
        if want:
            called.append(layer)
    out_grads = torch.autograd.grad(total, [layer.out for layer in called], allow_unused=True)
    out: dict[str, torch.Tensor] = {}
    for layer in plan.layers:
        layer.grad = out_grads[called.index(layer)] if layer in called else None
        if layer.grad is None:  # not on the loss's path: every sample's gradient is zero
            for _, full in layer.params:
                out[full] = torch.zeros(b, *params[full].shape, dtype=params[full].dtype, device=params[full].device)
        else:
            got = layer.rule(layer.module, layer.inp, layer.grad)
            for k, full in layer.params:
                out[full] = got[k].reshape(b, *params[full].shape)
        layer.inp = layer.out = layer.grad = None
    return out, losses.detach()
