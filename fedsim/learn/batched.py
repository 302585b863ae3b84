"""Batched local training: the clients of one round that share an architecture train together.

Each client's parameters become one slice of stacked tensors (client × parameter shape);
``torch.func.functional_call`` runs the shared module with one client's slice, and ``torch.func.vmap``
maps it over the clients, so one vectorised forward/backward per step replaces one per client.  Small
models on small batches (the usual federated workload) are dominated by per-call overhead, which this
removes.

On an accelerator (``train.device``) the whole round's batch plan (rows, weights, which clients are
still training) is drawn on the CPU, as sequential training draws it, and moved to the device in one
copy; the parameters, data and arithmetic stay there, so a step launches no host-device transfers.

Semantics are those of :func:`fedsim.learn.sgd.local_sgd`, client by client: the same batch schedule
from the same stream, the same SGD step (``fedsim.learn.sgd.sgd_update_`` on the stacked tensors: weight
decay, momentum, the update; ``clip_grads_`` clips each client by its own gradient norm).  Clients differ
in sample count, so batches are padded to ``batch_size`` with rows of weight 0 (the loss is the mean over
the real rows), and a client that has finished its steps stops moving (``sgd_update_``'s ``active``).
Results equal sequential training within float tolerance (batched kernels sum in another order), and are
deterministic (``tests/test_perf_batched.py``).

Where this does not apply, callers train sequentially: models with buffers (BatchNorm statistics),
regression tasks (the per-sample loss is defined for classification here), gradient masks and frozen
parameters (sub-models and custom trainers go through their own path).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from fedsim.errors import DivergenceError

from .sgd import SGDConfig, TrainStats, batch_schedule, clip_grads_, clip_record, num_steps, sgd_update_

__all__ = ["can_batch", "batched_local_sgd"]


def can_batch(model: nn.Module, task: str) -> bool:
    """Whether :func:`batched_local_sgd` handles this model and task (else train one client at a time).

    Not for models with buffers, nor for any BatchNorm layer (static ones included): batch statistics mix
    the rows of a step, so a client's short last batch, padded to the common size, would train on
    statistics of its padding (measured: 1e-2 off sequential training on a 10-sample ResNet-20 batch)."""
    return (task == "classification" and not any(True for _ in model.buffers())
            and not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
            and all(p.requires_grad for p in model.parameters()))


def batched_local_sgd(model: nn.Module, base_state: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      indices: Sequence[torch.Tensor], cfg: SGDConfig, generators: Sequence[torch.Generator]
                      ) -> list[tuple[dict[str, torch.Tensor], TrainStats]]:
    """Local SGD of every client (``indices[i]`` with batch stream ``generators[i]``) from ``base_state``.

    Returns, per client, its trained state and statistics, as :func:`~fedsim.learn.sgd.local_sgd`
    would.  ``model`` provides the architecture only (its weights are not touched).
    """
    cfg.validate()
    n_clients = len(indices)
    bs = cfg.batch_size
    sizes = [len(ix) for ix in indices]
    steps = [num_steps(n, cfg) for n in sizes]
    schedules = [batch_schedule(n, s, bs, g) for n, s, g in zip(sizes, steps, generators)]
    total_steps = max(steps, default=0)
    names = [n for n, _ in model.named_parameters()]
    device = x.device
    # the batch plan of every step, built on the CPU from the CPU-drawn schedules, then moved at once
    rows_all = torch.zeros(total_steps, n_clients, bs, dtype=torch.int64, device="cpu")
    weight_all = torch.zeros(total_steps, n_clients, bs, dtype=torch.float32, device="cpu")
    active_all = torch.zeros(total_steps, n_clients, dtype=torch.bool, device="cpu")
    samples = [0] * n_clients
    for c in range(n_clients):
        ix = torch.as_tensor(indices[c], dtype=torch.int64, device="cpu")
        for step in range(steps[c]):
            b = ix[schedules[c][step]]
            rows_all[step, c, : len(b)] = b
            weight_all[step, c, : len(b)] = 1.0
            active_all[step, c] = True
            samples[c] += len(b)
    rows_all, weight_all, active_all = rows_all.to(device), weight_all.to(device), active_all.to(device)
    params = {n: base_state[n].detach().unsqueeze(0).repeat(n_clients, *([1] * base_state[n].dim())).clone()
              for n in names}
    bufs: dict[str, torch.Tensor | None] = {n: None for n in names}  # momentum buffers, stacked like params

    def loss_one(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xb,))
        per = F.cross_entropy(out, yb, reduction="none")
        return (per * wb).sum() / wb.sum().clamp_min(1.0)

    step_fn = vmap(grad_and_value(loss_one))
    losses: list[list[float]] = [[] for _ in range(n_clients)]
    clip_norms: list[torch.Tensor] = []  # per step, each client's pre-clip norm (inactive ones masked below)
    was_training = model.training
    model.train()
    try:
        for step in range(total_steps):
            rows, weight, active = rows_all[step], weight_all[step], active_all[step]
            grads, values = step_fn(params, x[rows], y[rows], weight)
            vals = values.tolist()
            for c in range(n_clients):
                if step < steps[c]:
                    if not math.isfinite(vals[c]):
                        raise DivergenceError(f"training loss became {vals[c]} at step {step} of {steps[c]} "
                                              f"(lr={cfg.lr}); lower the learning rate or set clip_norm")
                    losses[c].append(vals[c])
            with torch.no_grad():  # the step of local_sgd, on every client's slice (sgd_update_, clip_grads_)
                if cfg.clip_norm is not None:  # clip_grad_norm_ per client: its own total norm
                    norm = clip_grads_(list(grads.values()), cfg.clip_norm, per_client=True)
                    if norm is not None:  # a client past its last step does not count (its step is masked)
                        clip_norms.append(torch.where(active, norm, torch.zeros_like(norm)))
                for n in names:
                    params[n], bufs[n] = sgd_update_(params[n], grads[n], bufs[n], lr=cfg.lr, momentum=cfg.momentum,
                                                     weight_decay=cfg.weight_decay, active=active)
    finally:
        model.train(was_training)
    if cfg.clip_norm is not None and clip_norms:  # one synchronisation for the whole run
        allnorms = torch.stack(clip_norms).double().cpu()  # steps x clients
        clip = [clip_record([allnorms[s, c] for s in range(steps[c])], cfg.clip_norm) for c in range(n_clients)]
    else:
        clip = [clip_record([], cfg.clip_norm) for _ in range(n_clients)]
    out = []
    for c in range(n_clients):
        state = {k: (params[k][c].clone() if k in params else v.clone()) for k, v in base_state.items()}
        ls = losses[c]
        mean = float(sum(ls) / len(ls)) if ls else float("nan")
        out.append((state, TrainStats(steps=len(ls), samples=samples[c], mean_loss=mean,
                                      last_loss=ls[-1] if ls else float("nan"), **clip[c])))
    return out
