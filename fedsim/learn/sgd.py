"""Local training (minibatch SGD on a client's index set) and evaluation.

Training is SGD on in-memory tensors, with exactly the arithmetic of ``torch.optim.SGD`` (its
single-tensor path, the one it takes on CPU; :func:`sgd_update_`, tested bit for bit against it).  The step
is written here once: :func:`sgd_step` (objective term, masking, clipping, then :func:`sgd_update_`) is the
step of :func:`local_sgd` and of FjORD's ordered dropout, and batched training applies :func:`sgd_update_`
and :func:`clip_grads_` to its stacked tensors; :class:`PlainSGD` is the optimizer object over
:func:`sgd_step` for hand-written loops.  The batches come from
:func:`batch_schedule`, which depends only on the sample count and a torch generator (a named stream),
so the same inputs always give the same weights.  A fresh optimizer is built per call: momentum
state is local to one round of local training, as in FedAvg and its relatives.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedsim.errors import ConfigError, DivergenceError

from .data import TASKS, ArrayDataset

__all__ = ["SGDConfig", "PlainSGD", "PlainAdam", "sgd_update_", "clip_grads_", "sgd_step", "TrainStats", "TASKS", "loss_for",
           "half_squared_error", "num_steps", "SampleOrder", "batch_schedule", "local_sgd", "evaluate",
           "static_bn_statistics"]


def half_squared_error(output: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """½ (output − target)², averaged (``mean``) or summed (``sum``) over samples.

    The ½ makes the mean the least-squares form of a quadratic f(w) = ½ (w − c)ᵀ A (w − c)
    (:func:`fedsim.learn.quadratic.quadratic_loss` is the same formula), so a run's training loss, its
    gradients and the theory constants are those of the quadratic itself.  A model output of shape
    (N, 1) is compared with targets of shape (N,).
    """
    if output.dim() == target.dim() + 1 and output.shape[-1] == 1:
        output = output.squeeze(-1)
    if output.shape != target.shape:
        raise ConfigError("loss", f"regression output of shape {tuple(output.shape)} does not match targets of shape "
                                  f"{tuple(target.shape)} (the model needs one output)")
    sq = 0.5 * (output - target.to(output.dtype)) ** 2
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    raise ConfigError("loss.reduction", f"unknown reduction '{reduction}' (allowed: mean, sum)")


def loss_for(task: str) -> Callable[..., torch.Tensor]:
    """The training loss of a task, as ``loss(output, target, reduction="mean")``: the one place that decides it.

    classification: cross-entropy on logits; regression: :func:`half_squared_error`.  Local training,
    evaluation and the theory probes all take their loss from here.
    """
    if task == "classification":
        return F.cross_entropy
    if task == "regression":
        return half_squared_error
    raise ConfigError("data.task", f"unknown task '{task}' (allowed: {', '.join(TASKS)})")


@dataclass
class SGDConfig:
    """Local optimiser settings.  ``local_steps`` (if set) wins over ``local_epochs``."""

    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch_size: int = 32
    local_steps: int | None = None
    local_epochs: float | None = 1.0
    clip_norm: float | None = None

    def validate(self) -> None:
        if not self.lr > 0 or not math.isfinite(self.lr):
            raise ConfigError("train.lr", f"must be a positive number, got {self.lr!r}")
        if self.momentum < 0 or self.weight_decay < 0:
            raise ConfigError("train", f"momentum and weight_decay must be >= 0, got {self.momentum!r}, "
                                       f"{self.weight_decay!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError("train.batch_size", f"must be a positive integer, got {self.batch_size!r}")
        if self.local_steps is None and self.local_epochs is None:
            raise ConfigError("train.local_steps", "set local_steps or local_epochs (both are unset)")
        if self.local_steps is not None and self.local_steps < 0:
            raise ConfigError("train.local_steps", f"must be >= 0, got {self.local_steps!r}")
        if self.local_steps is None and self.local_epochs is not None and self.local_epochs < 0:
            raise ConfigError("train.local_epochs", f"must be >= 0, got {self.local_epochs!r}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError("train.clip_norm", f"must be > 0 or unset, got {self.clip_norm!r}")


def num_steps(n_samples: int, cfg: SGDConfig) -> int:
    """SGD steps of one local round: ``local_steps`` if set, else ceil(epochs * ceil(n / batch_size)).

    A client with no samples takes no steps.
    """
    if cfg.local_steps is not None:
        return int(cfg.local_steps) if n_samples > 0 else 0
    if cfg.local_epochs is None:
        raise ConfigError("train.local_steps", "set local_steps or local_epochs (both are unset)")
    per_epoch = math.ceil(n_samples / cfg.batch_size)
    return int(math.ceil(cfg.local_epochs * per_epoch - 1e-9))


def samples_processed(n_samples: int, steps: int, batch_size: int) -> int:
    """Samples that ``steps`` batches of :func:`batch_schedule` cover, without drawing them.

    Each pass over the n samples has ceil(n / B) batches, the last one partial; systems-only runs use
    this to cost training they do not perform.
    """
    if n_samples <= 0 or steps <= 0:
        return 0
    per_pass = math.ceil(n_samples / batch_size)
    full_passes, rest = divmod(steps, per_pass)
    return full_passes * n_samples + min(rest * batch_size, n_samples)


#: ``order(n_samples, epoch, generator) -> positions``: the order in which one local training visits its
#: client's samples in pass ``epoch`` (0, 1, ...), as a permutation of ``0..n_samples-1`` (array, tensor or
#: sequence).  ``generator`` is the client's stream for this task; an order may ignore it and draw from its
#: own source (reproducing another framework's run: ``numpy.random.default_rng(1000 * round + client)``).
#: ``fedsim.algorithms.Assignment.order`` hands one to local SGD; None is :func:`batch_schedule`'s default,
#: a fresh ``torch.randperm`` per pass.
SampleOrder = Callable[[int, int, torch.Generator], "np.ndarray | torch.Tensor | Sequence[int]"]


def _order_positions(order: SampleOrder, n_samples: int, epoch: int, generator: torch.Generator) -> torch.Tensor:
    """The positions ``order`` gives for one pass, checked to be a permutation of ``0..n_samples-1``."""
    got = order(n_samples, epoch, generator)
    try:
        a = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError("Assignment.order", f"the sample order returned {type(got).__name__}, not positions: {exc}") from None
    ok = a.shape == (n_samples,) and (n_samples == 0 or a.dtype.kind in "iu")
    if ok and n_samples:  # a permutation: every position once (a Python sort is the cheapest check for small n)
        ok = (sorted(a.tolist()) == list(range(n_samples)) if n_samples <= 512
              else bool(np.array_equal(np.sort(a), np.arange(n_samples))))
    if not ok:
        raise ConfigError("Assignment.order", f"a sample order must return a permutation of 0..{n_samples - 1} "
                                              f"(pass {epoch}), got {a.dtype} of shape {a.shape}")
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def batch_schedule(n_samples: int, steps: int, batch_size: int, generator: torch.Generator,
                   order: SampleOrder | None = None) -> list[torch.Tensor]:
    """Positions (0..n-1) of the samples in each of ``steps`` batches.

    Each pass over the data is a fresh ``torch.randperm(n, generator=generator)`` (or what ``order`` gives
    for that pass: :data:`SampleOrder`) cut into consecutive batches; the last, partial batch of a pass is
    kept (no drop_last), and the next pass starts a new permutation, until ``steps`` batches exist.
    """
    if steps > 0 and n_samples < 1:
        raise ConfigError("train", f"cannot take {steps} SGD steps on a client with no samples")
    out: list[torch.Tensor] = []
    epoch = 0
    while len(out) < steps:
        perm = (torch.randperm(n_samples, generator=generator) if order is None
                else _order_positions(order, n_samples, epoch, generator))
        epoch += 1
        for i in range(0, n_samples, batch_size):
            out.append(perm[i : i + batch_size])
            if len(out) == steps:
                break
    return out


def sgd_update_(param: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None, *, lr: float,
                momentum: float = 0.0, weight_decay: float = 0.0, active: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One SGD update of one tensor: weight decay, momentum (dampening 0, no Nesterov), the step.

    The one place local SGD's update arithmetic is written: ``torch.optim.SGD``'s single-tensor path
    operation for operation (``grad + wd·param`` and ``param − lr·d`` as ``add`` with ``alpha``, which
    rounds once), so every trainer that goes through it gives the weights ``torch.optim.SGD`` would.
    ``buf`` is the momentum buffer (None before the first step: it starts as a copy of the gradient);
    ``param`` and a given ``buf`` are updated in place.  Returns (param, buffer).

    ``active`` (batched training: ``param`` stacks clients along dim 0) is one bool per client; the
    others keep their weights and buffer, and the returned tensors are new ones.
    """
    if torch.is_grad_enabled():  # the in-place step on a leaf needs autograd off (callers in a loop turn it off once)
        with torch.no_grad():
            return sgd_update_(param, grad, buf, lr=lr, momentum=momentum, weight_decay=weight_decay, active=active)
    if weight_decay != 0:
        grad = grad.add(param, alpha=weight_decay)
    if active is None:
        if momentum != 0:
            if buf is None:
                buf = grad.detach().clone()
            else:
                buf.mul_(momentum).add_(grad, alpha=1.0)
            grad = buf
        return param.add_(grad, alpha=-lr), buf
    act = active.view(-1, *([1] * (param.dim() - 1)))
    if momentum != 0:
        buf = grad.clone() if buf is None else torch.where(act, buf * momentum + grad, buf)
        grad = buf
    return torch.where(act, param.add(grad, alpha=-lr), param), buf


@torch.no_grad()
def clip_grads_(grads: Sequence[torch.Tensor], max_norm: float, *, per_client: bool = False) -> torch.Tensor | None:
    """Scale ``grads`` in place so that their joint 2-norm is at most ``max_norm``, exactly as
    ``torch.nn.utils.clip_grad_norm_`` does (coefficient ``max_norm / (norm + 1e-6)`` capped at 1).

    ``per_client``: every tensor stacks clients along dim 0 (batched training), and each client is
    clipped by its own norm over all its tensors.  Returns the norm before clipping (one per client when
    ``per_client``; None without gradients) as a tensor, so a caller can record whether clipping bound
    without a device synchronisation per step: it bound where ``norm + 1e-6 > max_norm``.
    """
    if not grads:
        return None
    if per_client:
        n = len(grads[0])
        total = torch.stack([g.reshape(n, -1).norm(dim=1) for g in grads], dim=1).norm(dim=1)
    else:
        total = torch.nn.utils.get_total_norm(grads)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))) if per_client else coef)
    return total


def clip_bound(norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Whether clipping at ``max_norm`` changed a gradient of pre-clip ``norm`` (:func:`clip_grads_`'s
    coefficient is below 1 exactly there)."""
    return (norm + 1e-6) > max_norm


def sgd_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None],
             buffers: list[torch.Tensor | None], cfg: SGDConfig, *, objective: "LocalObjective | None" = None,
             names: Sequence[str] | None = None, masks: Sequence[torch.Tensor | None] | None = None
             ) -> torch.Tensor | None:
    """One local SGD step from the loss gradients: every trainer's step (:func:`local_sgd`, FjORD's
    ordered dropout), so the order of its parts is decided here once.

    1. ``objective.add_gradient`` (``names[i]`` names ``params[i]``) adds the objective's term;
    2. ``masks[i]`` (0/1, or a weight) multiplies gradient ``i``; entries where it is 0 stay bit-identical;
    3. ``cfg.clip_norm`` clips the gradients jointly (:func:`clip_grads_`);
    4. :func:`sgd_update_`: weight decay, momentum (``buffers[i]``, replaced as it changes), the step.

    With masks, weight decay is added before the step and masked again, so a masked entry never decays.
    A None gradient is skipped (its parameter and buffer stay).  The gradient tensors may be changed.
    Returns the gradients' joint norm before clipping when ``cfg.clip_norm`` is set (a 0-d tensor), else
    None: the record of whether clipping bound (:class:`TrainStats`).
    """
    grads = list(grads)
    norm: torch.Tensor | None = None
    if objective is not None:  # outside no_grad: an objective may differentiate its own term
        if names is None:
            raise ValueError("sgd_step: an objective needs the parameters' names")
        for k, p, g in zip(names, params, grads):
            if g is not None:
                objective.add_gradient(k, p, g)
    with torch.no_grad():
        if masks is not None:
            grads = [g if m is None or g is None else torch.where(m == 0, torch.zeros_like(g), g * m)
                     for g, m in zip(grads, masks)]
        if cfg.clip_norm is not None:
            norm = clip_grads_([g for g in grads if g is not None], cfg.clip_norm)
        weight_decay = cfg.weight_decay
        if masks is not None and any(m is not None for m in masks) and weight_decay > 0:
            for p, g in zip(params, grads):
                if g is not None:
                    g.add_(p.detach(), alpha=weight_decay)
            grads = [g if m is None or g is None else torch.where(m == 0, torch.zeros_like(g), g)
                     for g, m in zip(grads, masks)]
            weight_decay = 0.0
        for i, (p, g) in enumerate(zip(params, grads)):
            if g is not None:
                _, buffers[i] = sgd_update_(p, g, buffers[i], lr=cfg.lr, momentum=cfg.momentum,
                                            weight_decay=weight_decay)
    return norm


class PlainSGD:
    """An optimizer object over the one step, for hand-written loops: ``loss.backward(); opt.step()`` is
    :func:`sgd_step` on the parameters' ``.grad`` with ``cfg``'s lr, momentum, weight decay and clipping
    (``torch.optim.SGD`` with ``clip_grad_norm_``, bit for bit).

    Why not ``torch.optim.SGD`` itself: constructing any ``torch.optim`` optimizer imports torch's compiler
    stack (``torch._dynamo``, about 2 s) on first use, a fixed cost of every run that never compiles
    anything (``tests/test_perf_train.py`` checks both the numbers and that the stack stays unloaded).
    """

    def __init__(self, params: Iterable[nn.Parameter], cfg: SGDConfig) -> None:
        self.params = list(params)
        self.cfg = cfg
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        sgd_step(self.params, [p.grad for p in self.params], self.buffers, self.cfg)


class PlainAdam:
    """Adam (no weight decay, no AMSGrad) over leaf tensors, for hand-written loops: ``torch.optim.Adam``'s
    single-tensor path (the one it takes on CPU) operation for operation, so its steps give the same
    tensors bit for bit (``tests/test_perf_train.py`` checks that against ``torch.optim.Adam``).

    Why not ``torch.optim.Adam`` itself: as for :class:`PlainSGD`, constructing it imports torch's compiler
    stack (``torch._dynamo``, about 2 s of every process that learns Co-S²P's width masks).
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.steps = [0] * len(self.params)  # per tensor, as torch counts them (one without a gradient waits)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        beta1, beta2 = self.betas
        for i, (param, exp_avg, exp_avg_sq) in enumerate(zip(self.params, self.exp_avg, self.exp_avg_sq)):
            grad = param.grad
            if grad is None:  # torch.optim skips a tensor without a gradient, its step count too
                continue
            self.steps[i] += 1
            # torch keeps the count as a float32 tensor and reads it back with .item(): an exact float
            step = float(self.steps[i])
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = self.lr / bias_correction1
            bias_correction2_sqrt = bias_correction2 ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


@dataclass
class TrainStats:
    """What one call of :func:`local_sgd` did: steps, samples processed, mean and final batch loss, and,
    when ``clip_norm`` is set, whether clipping bound: ``clipped_steps`` (steps whose gradient it scaled
    down) and ``max_grad_norm`` (the largest gradient norm before clipping).  Why: clipping changes the
    step a convergence theorem bounds only where it binds, and only the trainer sees whether it did
    (``fedsim check`` reads both from the ``apply`` records).  None: not recorded (no clipping, or a
    trainer that does not report it)."""

    steps: int
    samples: int
    mean_loss: float
    last_loss: float
    clipped_steps: int | None = None
    max_grad_norm: float | None = None


class LocalObjective:
    """What a client minimises locally beyond the task loss, and the extra tensors that travels with it.

    A template: override only what your method needs.  :func:`local_sgd` calls :meth:`begin` once with the
    trainable parameters by name (as they were downloaded), :meth:`loss` on every batch (a differentiable
    term added to the batch loss), and :meth:`add_gradient` for every trainable parameter after the
    backward pass (add your term to ``grad`` in place; it joins before gradient masking and clipping, so
    masked entries stay as downloaded).  :meth:`download` and :meth:`upload` declare the extra tensors a
    client receives with the model and sends back with its update (SCAFFOLD's control variates); they
    are costed on the links, and the uploaded ones reach the server rule as ``Update.extras``.  In a
    systems-only run nothing trains, but both are still called for their sizes.
    """

    def download(self) -> dict[str, torch.Tensor]:
        """Extra tensors the client downloads with the model (default: none)."""
        return {}

    def begin(self, params: dict[str, torch.Tensor]) -> None:
        """Called once before the first step with the trainable parameters by name."""

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor | None:
        """A term added to the batch loss (default: none)."""
        return None

    def add_gradient(self, name: str, param: torch.Tensor, grad: torch.Tensor) -> None:
        """Add this objective's term to ``grad`` (the gradient of ``param``) in place (default: nothing)."""

    def upload(self) -> dict[str, torch.Tensor]:
        """Extra tensors the client uploads with its update, after training (default: none)."""
        return {}


class Proximal(LocalObjective):
    """The proximal term (μ/2)‖w − w₀‖², w₀ the downloaded weights (FedProx, Li et al. 2020; the ρ-term of
    FedAsync and Fed-RAA): μ(w − w₀) joins the loss gradient."""

    def __init__(self, mu: float) -> None:
        if not (mu >= 0 and math.isfinite(mu)):
            raise ConfigError("mu", f"must be a finite number >= 0, got {mu!r}")
        self.mu = float(mu)
        self._anchor: dict[str, torch.Tensor] = {}

    def begin(self, params: dict[str, torch.Tensor]) -> None:
        self._anchor = {k: p.detach().clone() for k, p in params.items()} if self.mu > 0 else {}

    def add_gradient(self, name: str, param: torch.Tensor, grad: torch.Tensor) -> None:
        if self.mu > 0:
            grad.add_(param.detach() - self._anchor[name], alpha=self.mu)


def local_sgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, indices: np.ndarray | torch.Tensor,
              cfg: SGDConfig, generator: torch.Generator, *, loss_fn: Callable | None = None,
              grad_mask: dict[str, torch.Tensor] | None = None,
              params: Iterable[nn.Parameter] | None = None, task: str = "classification",
              objective: LocalObjective | None = None, order: SampleOrder | None = None) -> TrainStats:
    """Train ``model`` in place with SGD on the samples ``x[indices], y[indices]``.

    ``loss_fn(output, target)`` defaults to the loss of ``task`` (:func:`loss_for`; cross-entropy for
    classification).  ``params`` restricts training to those
    parameters (the others are frozen for the call).  ``grad_mask`` maps parameter names (as in
    ``model.named_parameters()``) to tensors that multiply the gradient; entries where the mask is 0 stay
    bit-identical.  To guarantee that, weight decay is then added to the gradient *before* masking (instead
    of inside the optimizer, which would decay masked entries), and the momentum buffer of a masked entry
    stays exactly zero because its every input is zero.  Without a mask, weight decay is the optimizer's,
    so the result equals the textbook ``torch.optim.SGD`` loop bit for bit.  Gradient clipping (if
    ``clip_norm``) acts on the loss gradient after masking, before weight decay, as in a standard loop.
    Each step is :func:`sgd_step`.

    ``objective`` (a :class:`LocalObjective`) adds its terms to the loss and to the gradients (before
    masking and clipping, so masked entries stay bit-identical), e.g. :class:`Proximal` for FedProx.

    ``order`` (a :data:`SampleOrder`) decides the order in which each pass visits the samples; None: a fresh
    ``torch.randperm`` on ``generator`` per pass.

    Raises :class:`DivergenceError` as soon as a batch loss is not finite.
    """
    cfg.validate()
    loss_fn = loss_for(task) if loss_fn is None else loss_fn
    idx = torch.as_tensor(np.asarray(indices) if not isinstance(indices, torch.Tensor) else indices,
                          dtype=torch.int64, device=x.device)
    steps = num_steps(len(idx), cfg)
    schedule = batch_schedule(len(idx), steps, cfg.batch_size, generator, order)

    named = dict(model.named_parameters())
    if params is None:
        train_params = [p for p in named.values() if p.requires_grad]
    else:
        train_params = list(params)
    train_ids = {id(p) for p in train_params}
    frozen = [p for p in named.values() if id(p) not in train_ids and p.requires_grad]
    masks: list[torch.Tensor | None] | None = None
    if grad_mask:
        position = {id(p): i for i, p in enumerate(train_params)}
        masks = [None] * len(train_params)
        for key, m in grad_mask.items():
            if key not in named:
                raise ConfigError("grad_mask", f"no parameter named '{key}' in the model")
            p = named[key]
            if id(p) not in train_ids:
                continue
            if m.shape != p.shape:
                raise ConfigError("grad_mask", f"mask for '{key}' has shape {tuple(m.shape)}, parameter has "
                                               f"{tuple(p.shape)}")
            masks[position[id(p)]] = m.to(device=p.device, dtype=p.dtype)
    names: list[str] | None = None
    if objective is not None:
        by_id = {id(p): k for k, p in named.items()}
        names = [by_id.get(id(p), str(i)) for i, p in enumerate(train_params)]
        objective.begin(dict(zip(names, train_params)))
    buffers: list[torch.Tensor | None] = [None] * len(train_params)

    was_training = model.training
    if not was_training:  # a module in training mode is left alone (train() walks every submodule)
        model.train()
    for p in frozen:
        p.requires_grad_(False)
    losses: list[float] = []
    samples = 0
    clip_norms: list[torch.Tensor] = []  # pre-clip norms, read once at the end (no sync per step)
    try:
        for step, pos in enumerate(schedule):
            b = idx[pos.to(idx.device)]  # positions are drawn on the CPU (the same batches on every device)
            for p in train_params:
                p.grad = None
            out = model(x[b])
            loss = loss_fn(out, y[b])
            if objective is not None:
                term = objective.loss(out, y[b])
                if term is not None:
                    loss = loss + term
            value = float(loss.detach())
            if not math.isfinite(value):
                raise DivergenceError(f"training loss became {value} at step {step} of {steps} (lr={cfg.lr}); "
                                      f"lower the learning rate or set clip_norm")
            loss.backward()
            norm = sgd_step(train_params, [p.grad for p in train_params], buffers, cfg, objective=objective,
                            names=names, masks=masks)
            if norm is not None:
                clip_norms.append(norm.detach())
            losses.append(value)
            samples += len(b)
    finally:
        for p in frozen:
            p.requires_grad_(True)
        if not was_training:
            model.train(False)
    mean = float(np.mean(losses)) if losses else float("nan")
    last = losses[-1] if losses else float("nan")
    return TrainStats(steps=len(losses), samples=samples, mean_loss=mean, last_loss=last,
                      **clip_record(clip_norms, cfg.clip_norm))


def clip_record(norms: Sequence[torch.Tensor], clip_norm: float | None) -> dict[str, Any]:
    """:class:`TrainStats`' clipping fields from the pre-clip norms of every step (one synchronisation):
    steps whose gradient clipping scaled down and the largest norm; empty when ``clip_norm`` is unset."""
    if clip_norm is None:
        return {}
    if not norms:
        return {"clipped_steps": 0, "max_grad_norm": 0.0}
    a = torch.stack([n.reshape(()) for n in norms]).double().cpu()
    return {"clipped_steps": int(clip_bound(a, clip_norm).sum()), "max_grad_norm": float(a.max())}


@contextmanager
def static_bn_statistics(model: nn.Module, x: torch.Tensor | None, batch_size: int = 1024) -> Iterator[None]:
    """Within the block, BatchNorm layers without running statistics (static BN) normalise with statistics
    of ``x`` instead of each batch's own: HeteroFL's sBN evaluation, where the server queries the clients'
    training data for the statistics of the model it evaluates (so a narrower model gets its own).

    The statistics are PyTorch's cumulative average (``momentum=None``) of the batch means and unbiased
    variances over ``x`` cut into batches of ``batch_size``, run in training mode without gradients; the
    model is left in eval mode inside the block, and afterwards has no running statistics again (its
    state dict is unchanged).  With ``x`` None, or no such layer, nothing changes.
    """
    layers = [m for m in model.modules()
              if isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.track_running_stats]
    if x is None or not layers:
        yield
        return
    momenta = [m.momentum for m in layers]
    was_training = model.training
    try:
        for m in layers:
            ref = m.weight if m.weight is not None else x
            m.track_running_stats, m.momentum = True, None
            m.running_mean = torch.zeros(m.num_features, dtype=ref.dtype, device=ref.device)
            m.running_var = torch.ones(m.num_features, dtype=ref.dtype, device=ref.device)
            m.num_batches_tracked = torch.zeros((), dtype=torch.long, device=ref.device)
        model.train()
        with torch.no_grad():
            for i in range(0, len(x), batch_size):
                model(x[i : i + batch_size])
        model.eval()
        yield
    finally:
        for m, mom in zip(layers, momenta):
            m.track_running_stats, m.momentum = False, mom
            m.running_mean = m.running_var = m.num_batches_tracked = None
        model.train(was_training)


@torch.no_grad()
def evaluate(model: nn.Module, data: ArrayDataset, batch_size: int = 1024) -> tuple[float, float]:
    """(accuracy, mean loss) of ``model`` on ``data``, in eval mode and without gradients.

    The loss is the task's training loss (:func:`loss_for`): mean cross-entropy for classification,
    mean ½ squared error for regression, whose accuracy is NaN (there is nothing to count as correct).
    An empty dataset gives (nan, nan).
    """
    n = len(data)
    if n == 0:
        return float("nan"), float("nan")
    task = getattr(data, "task", "classification")
    loss_fn = loss_for(task)
    was_training = model.training
    model.eval()
    correct = 0
    loss_sum = 0.0
    try:
        for i in range(0, n, batch_size):
            out = model(data.x[i : i + batch_size])
            yb = data.y[i : i + batch_size]
            loss_sum += float(loss_fn(out, yb, reduction="sum"))
            if task == "classification":
                correct += int((out.argmax(dim=1) == yb).sum())
    finally:
        model.train(was_training)
    acc = correct / n if task == "classification" else float("nan")
    return acc, loss_sum / n
