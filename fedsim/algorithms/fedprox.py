"""FedProx (Li et al., MLSys 2020): FedAvg whose local objective adds the proximal term μ/2‖w − w_global‖².

The term is an option of local SGD (``fedsim.learn.train.local_sgd(prox_mu=...)``); this module only
hands it to the clients as their local trainer.  Everything else (rounds, sampling, deadline, averaging)
is FedAvg's.  The same trainer gives Fed-RAA its ρ-term.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fedsim.algorithms.base import Assignment, TrainOutcome
from fedsim.algorithms.fedavg import FedAvg, RoundsConfig
from fedsim.config import positive
from fedsim.learn.train import local_sgd


def prox_trainer(mu: float, grad_mask: dict | None = None) -> Callable[..., TrainOutcome]:
    """A local trainer: local SGD with the scenario's settings, the proximal term μ/2‖w − w₀‖² (w₀ the
    downloaded weights) and an optional gradient mask (entries where it is 0 stay as downloaded)."""

    def train(module: Any, ctx: Any, client: int, indices: np.ndarray, generator: Any) -> TrainOutcome:
        tr = ctx.data.train
        stats = local_sgd(module, tr.x, tr.y, indices, ctx.sgd, generator, task=tr.task, prox_mu=mu, grad_mask=grad_mask)
        return TrainOutcome(stats=stats)

    return train


class FedProx(FedAvg):
    name = "fedprox"

    @dataclass
    class Config(RoundsConfig):
        mu: float = 0.01

        def validate(self, prefix: str) -> None:
            RoundsConfig.validate(self, prefix)
            positive(self.mu, f"{prefix}.mu", allow_zero=True)

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        return Assignment(trainer=prox_trainer(self.cfg.mu), round=round_)
