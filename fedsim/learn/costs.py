"""Costs measured on the real model: FLOPs, bytes on the wire, and training memory.

FLOPs come from torch's FLOP formulas (``torch.utils.flop_counter.flop_registry``, the table behind
:class:`~torch.utils.flop_counter.FlopCounterMode`) applied to every operator of an actual batch.  The
counting mode here is a minimal dispatch mode with the same rules (an operator without a formula is
decomposed first, as FlopCounterMode does; a test compares the two).  It exists because
FlopCounterMode's dispatch hook is wrapped to disable ``torch.compile``, and that wrapper imports torch's
whole compiler stack (``torch._dynamo``) on first use: about 2 s of start-up for a run that never
compiles anything.  The counts are the same, so no disk cache is needed.  The counter
reports *FLOPs* = 2 x multiply-accumulates for matmuls and convolutions (a Linear(a, b) forward is
2ab per sample), does not count bias additions, activations, pooling or other elementwise work.
Tools such as fvcore report *MACs* under the name "flops", so published counts from them are half of
ours (GAS's 5,603,328 for its client-side AlexNet is 11,206,656 here).

The backward pass is counted on ``torch.autograd.grad`` over the parameters (and over the input when the
measured range starts after block 0, because a split-learning server must send the activation gradient
back).  For a linear or conv layer the backward is therefore 2x its forward (weight gradient + input
gradient), except for the model's first layer, whose input gradient is never needed (1x).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from .models import BlockModel

__all__ = ["FlopCost", "flops_per_sample", "tensor_bytes", "state_bytes", "activation_bytes", "MemoryEstimate",
           "memory_estimate"]


@dataclass(frozen=True)
class FlopCost:
    """FLOPs per sample (2 x MACs, as FlopCounterMode counts them)."""

    forward: float
    backward: float

    @property
    def total(self) -> float:
        return self.forward + self.backward


_FLOP_CACHE: dict[tuple, FlopCost] = {}
_ACT_CACHE: dict[tuple, int] = {}


class _FlopCounter(TorchDispatchMode):
    """Sums ``flop_registry``'s formulas over the operators run inside it (FlopCounterMode's total, without
    its per-module table and without importing ``torch._dynamo``)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # keep __torch_dispatch__ unwrapped: nothing here is compiled
        return False

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func not in flop_registry and func is not torch.ops.prim.device.default:
            with self:
                out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out


def _arch_key(model: nn.Module) -> tuple:
    """Identifies an architecture (not its weights): BlockModel's ``arch`` or the module's repr, plus every
    parameter's shape and trainability (so a model edited in place, e.g. sliced or frozen, is re-measured)."""
    arch = getattr(model, "arch", None)
    shapes = tuple((tuple(p.shape), p.requires_grad) for p in model.parameters())
    return (type(model).__name__, arch if arch is not None else repr(model), shapes)


def _run(model: nn.Module, x: torch.Tensor, start: int, end: int | None) -> torch.Tensor:
    if isinstance(model, BlockModel):
        return model(x, start, end)
    if start != 0 or end is not None:
        raise TypeError("start/end need a BlockModel")
    return model(x)


def _probe_input(model: nn.Module, input_shape: tuple[int, ...], start: int, batch: int) -> torch.Tensor:
    """A batch entering block ``start``: a fixed pseudo-random input run through blocks[:start]."""
    g = torch.Generator().manual_seed(0)
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    x = torch.randn(batch, *input_shape, generator=g, dtype=dtype)  # CPU draw: the same input on every device
    if param is not None:
        x = x.to(param.device)
    if start > 0:
        with torch.no_grad():
            x = _run(model, x, 0, start)
    return x


def flops_per_sample(model: nn.Module, input_shape: tuple[int, ...], *, start: int = 0,
                     end: int | None = None) -> FlopCost:
    """Forward and backward FLOPs per sample of ``model`` (or of ``blocks[start:end]`` of a BlockModel).

    ``input_shape`` is the shape of one sample at the *model's* input (block 0), also when ``start`` > 0.
    Measured on a batch of 2 and divided by 2.  Cached per (architecture, input shape, range); the
    weights' values do not change the count.
    """
    input_shape = tuple(int(s) for s in input_shape)
    key = (_arch_key(model), input_shape, start, end)
    hit = _FLOP_CACHE.get(key)
    if hit is not None:
        return hit
    was_training = model.training
    model.train()
    try:
        x = _probe_input(model, input_shape, start, 2)
        x.requires_grad_(start > 0)
        params = [p for p in model.parameters() if p.requires_grad]
        if isinstance(model, BlockModel):
            params = [p for b in model.blocks[start:end] for p in b.parameters() if p.requires_grad]
        with _FlopCounter() as fwd:
            out = _run(model, x, start, end)
        inputs = params + ([x] if x.requires_grad else [])
        if inputs and out.requires_grad:
            with _FlopCounter() as bwd:
                torch.autograd.grad(out.sum(), inputs, allow_unused=True)
            back = bwd.total
        else:
            back = 0
    finally:
        model.train(was_training)
    cost = FlopCost(forward=fwd.total / 2.0, backward=back / 2.0)
    _FLOP_CACHE[key] = cost
    return cost


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the tensor's elements (what sending it costs, headers aside)."""
    return int(t.numel()) * int(t.element_size())


def state_bytes(state: Mapping[str, torch.Tensor] | nn.Module) -> int:
    """Bytes of a state dict, or of a module's state dict (parameters and buffers)."""
    if isinstance(state, nn.Module):
        state = state.state_dict()
    return sum(tensor_bytes(t) for t in state.values())


def activation_bytes(model: BlockModel, input_shape: tuple[int, ...], cut: int, batch_size: int) -> int:
    """Bytes of the activation that ``blocks[:cut]`` sends for a batch of ``batch_size`` samples."""
    input_shape = tuple(int(s) for s in input_shape)
    key = (_arch_key(model), input_shape, cut)
    per_sample = _ACT_CACHE.get(key)
    if per_sample is None:
        a = _probe_input(model, input_shape, cut, 1)
        per_sample = tensor_bytes(a)
        _ACT_CACHE[key] = per_sample
    return per_sample * int(batch_size)


@dataclass(frozen=True)
class MemoryEstimate:
    """Training memory in bytes: weights, their gradients, optimizer state, saved activations."""

    params: int
    grads: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


def _saved_bytes(model: nn.Module, input_shape: tuple[int, ...], batch: int) -> int:
    """Bytes of the tensors autograd saves for backward in one forward pass (weights excluded).

    Tensors are deduplicated by storage, so a tensor saved by two operations counts once and views of a
    weight (e.g. its transpose kept by a linear layer) count as weights, not activations.
    """
    weight_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    weight_storages |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in weight_storages:
            seen[ptr] = max(seen.get(ptr, 0), s.nbytes())
        return t

    x = _probe_input(model, input_shape, 0, batch)
    was_training = model.training
    model.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = _run(model, x, 0, None)
            del out
    finally:
        model.train(was_training)
    return sum(seen.values())


def memory_estimate(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, *,
                    momentum: bool = True) -> MemoryEstimate:
    """Memory to train ``model`` with SGD on batches of ``batch_size``.

    params: parameters and buffers; grads: one gradient per trainable parameter; optimizer: one momentum
    buffer per trainable parameter when ``momentum``; activations: tensors saved for backward, measured
    with autograd's saved-tensor hooks at batch 1 and 2 and extrapolated linearly (saved tensors grow
    linearly with the batch), so probing stays cheap for large batches.
    """
    input_shape = tuple(int(s) for s in input_shape)
    p_bytes = sum(tensor_bytes(p) for p in model.parameters()) + sum(tensor_bytes(b) for b in model.buffers())
    g_bytes = sum(tensor_bytes(p) for p in model.parameters() if p.requires_grad)
    o_bytes = g_bytes if momentum else 0
    s1 = _saved_bytes(model, input_shape, 1)
    s2 = _saved_bytes(model, input_shape, 2)
    per_sample = s2 - s1
    act = max(0, s1 + per_sample * (int(batch_size) - 1))
    return MemoryEstimate(params=p_bytes, grads=g_bytes, optimizer=o_bytes, activations=act)
