"""SCAFFOLD (Karimireddy et al., ICML 2020), option II, on fedsim's public API.

Each client corrects its local gradient by the drift between the server's control variate c and its own
c_i:  y ← y − η (g_i(y) − c_i + c).  After K local steps it sets c_i⁺ = c_i − c + (x − y)/(K η) and sends
Δy = y − x and Δc_i = c_i⁺ − c_i.  The server moves x by the average Δy (FedAvg's weighted average, η_g = 1)
and c by (1/N) Σ Δc_i.  The control variates are declared by the local objective, so the links carry
them: c downloaded with the model, Δc_i uploaded with the update (twice the bytes of FedAvg each way).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms import Assignment, FedAvg, RoundsConfig, Update
from fedsim.learn.state import State
from fedsim.learn.sgd import LocalObjective


class ControlVariates(LocalObjective):
    """The client side: the drift correction c − c_i on every gradient, and Δc_i after training."""

    def __init__(self, c: dict[str, torch.Tensor], c_i: dict[str, torch.Tensor], lr: float) -> None:
        self.c, self.c_i, self.lr = c, c_i, lr
        self.steps = 0

    def download(self) -> dict[str, torch.Tensor]:
        return self.c

    def begin(self, params: dict[str, torch.Tensor]) -> None:
        self.params, self.x = params, {k: p.detach().clone() for k, p in params.items()}

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> None:
        self.steps += 1  # called once per local step
        return None

    def add_gradient(self, name: str, param: torch.Tensor, grad: torch.Tensor) -> None:
        grad.add_(self.c[name] - self.c_i[name])

    def upload(self) -> dict[str, torch.Tensor]:
        if not self.steps:  # a systems-only run: sizes only
            return {k: torch.zeros_like(v) for k, v in self.c.items()}
        return {k: (self.x[k] - self.params[k].detach()) / (self.steps * self.lr) - self.c[k] for k in self.c}


class Scaffold(FedAvg):
    name = "scaffold"

    @dataclass
    class Config(RoundsConfig):
        """FedAvg's round settings; the server step is FedAvg's average (η_g = server_lr)."""

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        self.c = {k: torch.zeros_like(v) for k, v in ctx.global_state.items() if v.is_floating_point()}
        self.c_local: dict[int, dict[str, torch.Tensor]] = {}

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        c_i = self.c_local.get(client, {k: torch.zeros_like(v) for k, v in self.c.items()})
        return Assignment(objective=ControlVariates(self.c, c_i, self.ctx.training.sgd.lr), round=round_)

    def server_rule(self, updates: list[Update], base: State) -> tuple[State, list[float]]:
        new, weights = super().server_rule(updates, base)
        n = self.ctx.num_clients
        for u in updates:
            c_i = u.info["assignment"].objective.c_i
            self.c_local[u.client] = {k: c_i[k] + u.extras[k] for k in c_i}
        self.c = {k: v + sum(u.extras[k] for u in updates) / n for k, v in self.c.items()}
        return new, weights
