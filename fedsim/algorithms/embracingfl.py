"""EmbracingFL (Lee et al.): weak clients train only the output-side layers of the one global model.

The model's blocks are split at a layer boundary per client type.  A **strong** client trains the whole
model (exactly FedAvg's local SGD).  A **moderate** or **weak** client freezes the first ``splits[type]``
blocks (the input side ``y``) and trains the rest (the output side ``z``) with the paper's *multi-step
forward pass* (Algorithm 1): once per round it pushes its whole local dataset through the frozen blocks,
caches their outputs, and then runs the round's τ local SGD steps on the cached activations only.  It
uploads the trained blocks alone.  The server averages every entry over the clients that trained it
(the one masked weighted average), so ``y`` is averaged over the strong clients and ``z`` over everyone
(spec §2.4); entries nobody trained keep their value.

Choices where the paper is silent (spec §10), documented and tested:

- Frozen blocks run in eval mode during the multi-step forward (BatchNorm uses the global running
  statistics, which the strong clients keep averaged: "Global BN"); they are never uploaded.
- Update weights are fedsim FedAvg's (samples processed).  With a fixed ``train.local_steps`` and every
  client holding at least one batch, every weight is τ·B and the average is the paper's unweighted
  1/s (y) and 1/m (z).  With every client strong the algorithm *is* FedAvg (same streams, same rule).
- Compute time is that of exactly what the weak client does: the frozen blocks' forward FLOPs over the
  whole local dataset once, plus forward + backward FLOPs of the trained blocks on the cached activations
  for the samples of its τ steps.  No input gradient is counted at the cut (the cache needs none).
- Memory of a client type is its training phase (trained blocks' weights, gradients, momentum and saved
  activations for one batch, measured by :func:`fedsim.learn.costs.memory_estimate` on the trained part)
  or its forward phase (frozen weights plus one batch in and out), whichever is larger; the cached
  activations (``cache_bytes``, n samples × cut activation) are kept on storage as the paper allows.
- Client types: ``assign: fraction`` draws ``round(m·weak_fraction)`` weak and
  ``round(m·moderate_fraction)`` moderate clients from the stream ("embracingfl", "types");
  ``assign: devices`` reads ``types`` (device profile → type; unlisted devices are strong);
  ``assign: memory`` gives each client the strongest type whose memory fits ``memory_share`` of its
  device's memory.
- The input-side chunks are downloaded as one transfer of the same total bytes (the paper's extra
  per-chunk latency, 10–20 ms, is left out).
- A systems-only run trains nothing, so the trainer does not run: partial clients are then priced by the
  pipeline's generic sub-model cost (forward of every block per sample processed, backward into the
  trained blocks), not by the multi-step forward's.

The pipeline does the rest: a partial client's ``Assignment`` holds a ``SubModel`` (input-side blocks
frozen, the rest trained) and :class:`MultiStepForward` as its trainer; the context extracts the module,
calls the trainer and inserts the trained blocks with their coverage; FedAvg's server rule (the masked
weighted average) and ``VersionKeeper.apply`` finish the round.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Literal

import numpy as np
import torch

from fedsim.messages import Assignment, TrainOutcome
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import require
from fedsim.errors import ConfigError
from fedsim.learn.costs import activation_bytes, flops_per_sample, memory_estimate, state_bytes
from fedsim.learn.models import BlockModel, split_model
from fedsim.learn.submodel import SubModel, block_of
from fedsim.learn.sgd import SGDConfig, TrainStats, local_sgd
from fedsim.algorithms.configs import CLIENT_TYPES, EmbracingFLConfig

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor

__all__ = ["EmbracingFL", "CLIENT_TYPES", "MultiStepForward", "MultiStepResult", "multi_step_forward_train",
           "block_keys", "type_memory", "TypeCost"]


def block_keys(model: BlockModel, start: int, end: int | None = None) -> list[str]:
    """State-dict keys of ``model.blocks[start:end]`` (parameters and buffers)."""
    stop = model.num_blocks() if end is None else end
    return [k for k in model.state_dict() if start <= block_of(k) < stop]


@dataclass
class MultiStepResult:
    """One weak-client round: statistics, FLOPs split into the frozen forward and the trained part,
    and the bytes of the cached activations."""

    stats: TrainStats
    forward_flops: float
    train_flops: float
    cache_bytes: int

    @property
    def flops(self) -> float:
        return self.forward_flops + self.train_flops


@contextmanager
def _keep_buffers(model: torch.nn.Module) -> Iterator[None]:
    """Restore every buffer afterwards: cost probes run train-mode forwards, which would move BatchNorm's
    running statistics."""
    saved = {k: b.clone() for k, b in model.named_buffers()}
    try:
        yield
    finally:
        named = dict(model.named_buffers())
        for k, b in saved.items():
            named[k].copy_(b)


def _cut_shape(model: BlockModel, input_shape: tuple[int, ...], frozen: int) -> tuple[int, ...]:
    with torch.no_grad():
        was = model.training
        model.eval()
        try:
            p = next(model.parameters())
            out = model(torch.zeros(1, *input_shape, dtype=p.dtype, device=p.device), 0, frozen)
        finally:
            model.train(was)
    return tuple(out.shape[1:])


def multi_step_forward_train(model: BlockModel, frozen: int, x: torch.Tensor, y: torch.Tensor,
                             indices: np.ndarray | torch.Tensor, sgd: SGDConfig, generator: torch.Generator, *,
                             task: str = "classification", chunk: int = 1024) -> MultiStepResult:
    """Algorithm 1 + Algorithm 2's local loop for a client that freezes ``model.blocks[:frozen]``.

    Forward the frozen blocks once over all of ``x[indices]`` (eval mode, no gradients, in chunks of
    ``chunk`` samples), cache the outputs in the order of ``indices``, then train ``blocks[frozen:]`` in
    place with :func:`local_sgd` on the cache.  The batch schedule depends only on the sample count and
    ``generator``, so the batches are the very samples ordinary training would draw: the update equals
    training the whole model with the frozen blocks' parameters excluded (for blocks without
    train-mode behaviour such as BatchNorm statistics or dropout).
    """
    n_blocks = model.num_blocks()
    if not 0 < frozen < n_blocks:
        raise ConfigError("algorithm.splits", f"frozen blocks must be in 1..{n_blocks - 1}, got {frozen}")
    idx = torch.as_tensor(np.asarray(indices) if not isinstance(indices, torch.Tensor) else indices, dtype=torch.int64,
                          device=x.device)
    prefix, suffix = split_model(model, frozen)
    input_shape = tuple(x.shape[1:])
    was = prefix.training
    prefix.eval()
    try:
        with torch.no_grad():
            parts = [prefix(x[idx[i:i + chunk]]) for i in range(0, len(idx), chunk)]
    finally:
        prefix.train(was)
    cache = torch.cat(parts) if parts else torch.zeros(0, *_cut_shape(model, input_shape, frozen), device=x.device)
    stats = local_sgd(suffix, cache, y[idx], torch.arange(len(idx), device=x.device), sgd, generator, task=task)
    with _keep_buffers(model):
        fwd = flops_per_sample(model, input_shape, end=frozen).forward * len(idx)
        train = flops_per_sample(suffix, tuple(cache.shape[1:])).total * stats.samples
    return MultiStepResult(stats=stats, forward_flops=float(fwd), train_flops=float(train),
                           cache_bytes=int(cache.numel() * cache.element_size()))


@dataclass(frozen=True)
class TypeCost:
    """What one client type needs: memory (bytes, the larger of its two phases), trained parameters and
    the bytes of its activation cache per local sample."""

    memory_bytes: int
    train_params: int
    cache_bytes_per_sample: int
    training_bytes: int
    forward_bytes: int


def type_memory(model: BlockModel, frozen: int, input_shape: tuple[int, ...], batch_size: int, *,
                momentum: bool = True) -> TypeCost:
    """Memory of a client that freezes ``blocks[:frozen]`` (0: a strong client training everything).

    Training phase: :func:`memory_estimate` of the trained blocks on inputs of the cut's shape (weights,
    gradients, momentum, saved activations).  Forward phase (frozen > 0): the frozen blocks' weights and
    buffers plus one batch's input and cut activation.  The reported memory is the larger of the two.
    """
    input_shape = tuple(int(s) for s in input_shape)
    with _keep_buffers(model):
        return _type_memory(model, frozen, input_shape, batch_size, momentum)


def _type_memory(model: BlockModel, frozen: int, input_shape: tuple[int, ...], batch_size: int,
                 momentum: bool) -> TypeCost:
    if frozen == 0:
        est = memory_estimate(model, input_shape, batch_size, momentum=momentum)
        n = sum(p.numel() for p in model.parameters())
        return TypeCost(int(est.total), int(n), 0, int(est.total), 0)
    prefix, suffix = split_model(model, frozen)
    cut = _cut_shape(model, input_shape, frozen)
    est = memory_estimate(suffix, cut, batch_size, momentum=momentum)
    per_sample = activation_bytes(model, input_shape, frozen, 1)
    p = next(model.parameters())
    in_bytes = math.prod(input_shape) * p.element_size() * batch_size
    fwd = state_bytes(prefix) + in_bytes + per_sample * batch_size
    n = sum(q.numel() for q in suffix.parameters())
    return TypeCost(int(max(est.total, fwd)), int(n), int(per_sample), int(est.total), int(fwd))


class EmbracingFL(FedAvg):
    """FedAvg rounds in which moderate and weak clients train only the output-side blocks."""

    name = "embracingfl"
    theorems = ("embracingfl",)  # EmbracingFL Theorem 1
    fits_submodels = True   # partial clients need less memory than the whole model: no whole-model check

    Config = EmbracingFLConfig

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        model: BlockModel = ctx.training.worker
        n = model.num_blocks()
        self.frozen: dict[str, int] = {"strong": 0}
        for t in ("weak", "moderate"):   # a type missing from ``splits`` freezes as much as the weak one
            k = int(config.splits.get(t, config.splits.get("weak", 1)))
            if k >= n:
                raise ConfigError(f"algorithm.splits.{t}",
                                  f"freezes {k} of the model's {n} blocks, leaving a {t} client nothing to train "
                                  f"(allowed: 1..{n - 1})")
            self.frozen[t] = k
        sgd = ctx.training.sgd
        self.costs = {t: type_memory(model, k, ctx.training.input_shape, sgd.batch_size, momentum=sgd.momentum > 0)
                      for t, k in self.frozen.items()}
        self.client_types = self._assign_types()
        counts = {t: self.client_types.count(t) for t in CLIENT_TYPES}
        ctx.measure("client_types", types=self.client_types, counts=counts,
                    frozen_blocks=dict(self.frozen), num_blocks=n,
                    memory_bytes={t: c.memory_bytes for t, c in self.costs.items()},
                    train_params={t: c.train_params for t, c in self.costs.items()})

    # ------------------------------------------------------------------------------ client types
    def _assign_types(self) -> list[str]:
        ctx, cfg = self.ctx, self.cfg
        m = ctx.num_clients
        if cfg.assign == "fraction":
            n_weak = int(round(m * cfg.weak_fraction))
            n_mod = min(m - n_weak, int(round(m * cfg.moderate_fraction)))
            order = ctx.streams.numpy("embracingfl", "types").permutation(m)
            out = ["strong"] * m
            for c in order[:n_weak]:
                out[int(c)] = "weak"
            for c in order[n_weak:n_weak + n_mod]:
                out[int(c)] = "moderate"
            return out
        if cfg.assign == "devices":
            return [cfg.types.get(ctx.world.device_class(c), "strong") for c in range(m)]
        out = []
        for c in range(m):
            budget = ctx.world.device(c).memory_bytes * cfg.memory_share
            fits = [t for t in CLIENT_TYPES if self.costs[t].memory_bytes <= budget]
            if not fits:
                raise ConfigError("algorithm.memory_share",
                                  f"client {c} ({ctx.world.device_name(c)}) has {budget:.3g} bytes, less than the weak "
                                  f"type's {self.costs['weak'].memory_bytes} bytes; raise memory_share or freeze more blocks")
            out.append(fits[0])
        return out

    # ------------------------------------------------------------------------------ assignment
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        """Strong: FedAvg's whole-model task.  Moderate/weak: the input-side blocks frozen, the rest trained
        by the multi-step forward pass (:class:`MultiStepForward`)."""
        ctype = self.client_types[client]
        ctx = self.ctx
        cost = self.costs[ctype]
        k = self.frozen[ctype]
        ctx.measure("assignment", client=client, client_type=ctype, frozen_blocks=k,
                    memory_bytes=cost.memory_bytes, cache_bytes=cost.cache_bytes_per_sample * len(ctx.parts[client]),
                    round=round_)
        if ctype == "strong":
            return Assignment(round=round_, info={"client_type": ctype})
        n = ctx.training.worker.num_blocks()
        sub = SubModel.of(ctx.training.worker, states=("frozen",) * k + ("train",) * (n - k))
        return Assignment(submodel=sub, trainer=MultiStepForward(k), round=round_, info={"client_type": ctype})


@dataclass(frozen=True)
class MultiStepForward:
    """The local trainer of a partial client (``Assignment.trainer``): Algorithm 1 then τ SGD steps on
    the cache (:func:`multi_step_forward_train`), reporting exactly those FLOPs."""

    frozen: int

    def __call__(self, module: BlockModel, training: "TrainingExecutor", client: int, indices: np.ndarray,
                 generator: torch.Generator) -> TrainOutcome:
        tr = training.data.train
        res = multi_step_forward_train(module, self.frozen, tr.x, tr.y, indices, training.sgd, generator, task=tr.task)
        return TrainOutcome(stats=res.stats, flops=res.flops)
