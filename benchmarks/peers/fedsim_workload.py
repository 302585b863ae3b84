"""The peers' workload (README.md here) in fedsim, through its public extension points only.

Each piece is a ``module:attribute`` the scenario names (``workload.yaml``, ``workload-scaled.yaml``):

* ``fedsim_workload:digits`` (a dataset loader): the workload's data and partition from ``common.py``.  It
  returns the training rows regrouped client by client, each client's rows in the workload's order, with
  one client id per row, so ``partition.method: natural`` gives client k exactly the workload's client k
  rows, and position i of its index array is the workload's row i of that client.  The test split is the
  workload's last 297 samples, unchanged.
* ``fedsim_workload:mlp`` (a model factory): ``Linear(64, 64), ReLU, Linear(64, 10)`` with PyTorch's default
  init after ``torch.manual_seed(init_seed)``, the workload's init (fedsim restores its own RNG afterwards).
* ``fedsim_workload:ScheduledFedAvg`` (an algorithm, a FedAvg subclass) with three decisions:
  - ``select``: round r's clients are ``numpy.random.default_rng(r).choice(N, C, replace=False)``, in that
    order (the server sums the updates in that order);
  - ``assign``: local SGD visits the client's samples in ``default_rng(1000 r + client).permutation(n)``
    order, one permutation per epoch from that one generator (``Assignment.order``);
  - ``server_rule``: ``Σ_k (n_k / Σ_j n_j) · w_k`` in float32, accumulated from zeros in selection order
    (``fedsim.learn.state.state_weighted_sum``), the workload's arithmetic; fedsim's own FedAvg rule
    accumulates in float64, which rounds differently in the last bits.

Local SGD itself is fedsim's (``torch.optim.SGD``'s arithmetic, cross-entropy, batch 16, last partial
batch kept), set in the scenario's ``train`` section.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

import common as c
from fedsim.algorithms import Assignment, FedAvg, Update
from fedsim.learn.state import State, state_weighted_sum


def digits(rng: np.random.Generator, *, size: str = "reference") -> tuple[np.ndarray, ...]:
    """The workload's (x_train, y_train, x_test, y_test, client id per train row), train rows grouped by
    client in the workload's order.  ``rng`` is unused: the workload fixes its own seeds."""
    c.use(size)
    xtr, ytr, xte, yte = c.load_data()
    parts = c.partition()
    rows = np.concatenate(parts)
    ids = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    return xtr[rows], ytr[rows], xte, yte, ids


def mlp(input_shape: tuple[int, ...], num_classes: int, *, init_seed: int = 0) -> nn.Module:
    """The workload's MLP, initialised as ``torch.manual_seed(init_seed)`` then PyTorch's default init."""
    torch.manual_seed(init_seed)
    return nn.Sequential(nn.Linear(int(np.prod(input_shape)), 64), nn.ReLU(), nn.Linear(64, num_classes))


class ScheduledFedAvg(FedAvg):
    """FedAvg with the workload's client schedule, per-client sample order and float32 server sum."""

    name = "scheduled-fedavg"

    def select(self, k: int, round_: int) -> list[int]:
        return np.random.default_rng(round_).choice(self.ctx.num_clients, k, replace=False).tolist()

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        rng = np.random.default_rng(1000 * round_ + client)
        return Assignment(round=round_, order=lambda n, epoch, generator: rng.permutation(n))

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        total = sum(float(u.weight) for u in updates)
        if total == 0:  # the round's clients had no samples: the model stays
            return dict(base), [0.0] * len(updates)
        shares = [float(u.weight) / total for u in updates]
        return state_weighted_sum(base, [u.tensors for u in updates], shares), shares


def final_accuracy(state: dict[str, Any]) -> float:
    """The workload's accuracy (a float32 mean, as ``common.accuracy``) of a fedsim state dict."""
    model = c.make_model()
    model.load_state_dict({k.split(".", 2)[-1]: v for k, v in state.items()})
    return c.accuracy(model)
