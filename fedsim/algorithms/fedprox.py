"""FedProx (Li et al., MLSys 2020): FedAvg whose local objective adds the proximal term μ/2‖w − w_global‖².

The term is a local objective (``fedsim.learn.sgd.Proximal``) handed to the clients through their
assignment; everything else (rounds, sampling, deadline, averaging) is FedAvg's.  ``prox_trainer`` gives
Fed-RAA its ρ-term together with its fragment's gradient mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from fedsim.messages import Assignment, TrainOutcome
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import num
from fedsim.learn.sgd import Proximal, local_sgd
from fedsim.algorithms.configs import FedProxConfig

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor


def prox_trainer(mu: float, grad_mask: dict | None = None) -> Callable[..., TrainOutcome]:
    """A local trainer: local SGD with the scenario's settings, the proximal term μ/2‖w − w₀‖² (w₀ the
    downloaded weights) and an optional gradient mask (entries where it is 0 stay as downloaded)."""

    def train(module: Any, training: "TrainingExecutor", client: int, indices: np.ndarray,
              generator: Any) -> TrainOutcome:
        tr = training.data.train
        stats = local_sgd(module, tr.x, tr.y, indices, training.sgd, generator, task=tr.task, objective=Proximal(mu),
                          grad_mask=grad_mask)
        return TrainOutcome(stats=stats)

    return train


class FedProx(FedAvg):
    name = "fedprox"
    theorems = ("local_sgd",)  # Yang, Fang & Liu's local SGD: applies only with mu = 0 (plain local SGD)

    Config = FedProxConfig

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        return Assignment(objective=Proximal(self.cfg.mu), round=round_)
