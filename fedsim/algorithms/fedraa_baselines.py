"""Reduced versions of two synchronous baselines of the Fed-RAA paper, as its spec describes them.

- ``ramfed-lite`` (after RAM-Fed, Wang et al. KDD 2023): synchronous rounds in which every client trains
  a sub-model of randomly chosen hidden units, as many as its speed allows: width w_n = t_fastest / t_n
  (t the client's expected compute time for the same work), at least ``min_width``; the units are drawn
  afresh each round from the stream ("ramfed", "units", round, client).  The server averages every entry
  over the clients that covered it (FedAvg's masked average).  RAM-Fed's memory of clients' latest
  updates is not in the Fed-RAA paper and is left out.
- ``prunefl-lite`` (after PruneFL, Jiang et al. TNNLS 2022): FedAvg on a magnitude-pruned model.  Every
  ``reconfigure_every`` rounds the mask keeps the ``density`` fraction of largest-magnitude entries of
  each weight matrix of the global model (biases are never pruned); clients prune their download with it
  and train with the pruned entries frozen at zero (so the average is pruned too), and their compute is charged at ``density`` × the dense FLOPs (sparse training).
  Traffic stays dense (the pipeline sends dense tensors): a choice that favours neither method on
  compute but overstates PruneFL's communication.  PruneFL's importance-vs-time mask search is replaced
  by the fixed density.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from fedsim.messages import Assignment, TrainOutcome
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import require
from fedsim.learn.state import State
from fedsim.learn.sgd import local_sgd
from fedsim.algorithms.configs import PruneFLLiteConfig, RAMFedLiteConfig

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor


class RAMFedLite(FedAvg):
    name = "ramfed-lite"
    theorems = ()  # a baseline of sub-models: no theorem written for its setting

    Config = RAMFedLiteConfig

    def widths(self) -> np.ndarray:
        """Per-client width t_fastest / t_n from the world's expected compute times, floored at min_width."""
        t = np.array([self.ctx.world.expected_compute_seconds(c, 1e9) for c in range(self.ctx.num_clients)])
        return np.maximum(self.cfg.min_width, t.min() / t)

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        from fedsim.learn.submodel import full_submodel

        ctx = self.ctx
        if not hasattr(self, "_widths"):
            self._widths = self.widths()
        base = full_submodel(ctx.training.worker)
        rng = ctx.streams.numpy("ramfed", "units", round_, client)
        keep = dict(base.keep)
        for name, g in ctx.training.worker.width_groups().items():
            units = g.size // max(1, g.unit)
            k = max(1, int(math.ceil(self._widths[client] * units - 1e-9)))
            keep[name] = tuple(int(u) for u in np.sort(rng.choice(units, size=k, replace=False)))
        return Assignment(submodel=dataclasses.replace(base, keep=keep), round=round_,
                          info={"width": float(self._widths[client])})


def magnitude_mask(state: State, density: float) -> dict[str, torch.Tensor]:
    """0/1 masks keeping the ``density`` fraction of largest-|w| entries of every weight matrix (ndim ≥ 2);
    ties at the threshold are kept."""
    out = {}
    for k, v in state.items():
        if torch.is_floating_point(v) and v.ndim >= 2:
            n_keep = max(1, int(round(density * v.numel())))
            thr = torch.topk(v.abs().flatten(), n_keep).values.min()
            out[k] = (v.abs() >= thr).to(v.dtype)
    return out


def pruned_trainer(mask: dict[str, torch.Tensor], density: float) -> Callable[..., TrainOutcome]:
    """Local SGD on the pruned model: the downloaded weights are pruned with ``mask`` and the pruned
    entries stay zero; FLOPs charged at ``density`` × the measured dense count."""

    def train(module: Any, training: "TrainingExecutor", client: int, indices: np.ndarray,
              generator: Any) -> TrainOutcome:
        tr = training.data.train
        with torch.no_grad():
            for name, p in module.named_parameters():
                if name in mask:
                    p.mul_(mask[name])
        stats = local_sgd(module, tr.x, tr.y, indices, training.sgd, generator, task=tr.task, grad_mask=mask)
        return TrainOutcome(stats=stats, flops=density * training.flop_cost.total * stats.samples)

    return train


class PruneFLLite(FedAvg):
    name = "prunefl-lite"
    theorems = ()  # a baseline of pruned models: no theorem written for its setting

    Config = PruneFLLiteConfig

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        r = 1 if round_ is None else round_
        if getattr(self, "_mask_round", None) != r and (not hasattr(self, "mask") or (r - 1) % self.cfg.reconfigure_every == 0):
            # the mask of this round: magnitudes of the global model as the round starts (every client
            # prunes its download with it, so the average is pruned too)
            self.mask = magnitude_mask(self.ctx.global_state, self.cfg.density)
        self._mask_round = r
        return Assignment(trainer=pruned_trainer(self.mask, self.cfg.density), round=round_)
