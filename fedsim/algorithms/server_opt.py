"""Server optimisers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

The loop shapes hand the output of every server rule to :class:`ServerStep` (when the algorithm's ``Config``
declares ``server_opt``), so the setting works the same for every rule, built-in or written by a user: the
pseudo-gradient Δ = aggregate − w, the rule's output minus the model its updates started from, drives
``sgd``, ``momentum`` (FedAvgM), ``adam`` (FedAdam), ``yogi`` (FedYogi) or ``adagrad`` (FedAdagrad)::

    m ← β₁ m + (1 − β₁) Δ                    (adam, yogi, adagrad; momentum: m ← β₁ m + Δ)
    v ← v + Δ²                               (adagrad)
    v ← β₂ v + (1 − β₂) Δ²                   (adam)
    v ← v − (1 − β₂) Δ² sign(v − Δ²)         (yogi)
    w ← w + η m / (√v + τ)                   (sgd and momentum: w ← w + η m)

v starts at τ² (Reddi et al.'s v₋₁ ≥ τ²), m at 0.  Integer entries (BatchNorm's counters) take the
aggregate's value.  ``sgd`` (and ``momentum`` with β₁ = 0, which is the same step) at η = 1 installs the
aggregate itself, exactly as plain FedAvg does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from fedsim.config import num, require
from fedsim.learn.state import State, is_counter, state_axpy, state_sub, state_toward
from fedsim.algorithms.configs import ServerOptConfig, check_server_lr

OPTIMISERS = ("sgd", "momentum", "adam", "yogi", "adagrad")


class ServerOptimizer:
    """One optimiser's state across versions; :meth:`step` turns an aggregate into the next model."""

    def __init__(self, cfg: ServerOptConfig) -> None:
        self.cfg = cfg
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def step(self, base: State, *, target: State | None = None, delta: State | None = None) -> State:
        """The next model from ``base`` and the aggregate ``target`` (or the pseudo-gradient ``delta``)."""
        cfg = self.cfg
        b1, b2 = float(cfg.betas[0]), float(cfg.betas[1])
        plain = cfg.name == "sgd" or (cfg.name == "momentum" and b1 == 0.0)
        if plain:  # no state: the step the rules take themselves
            if delta is None:
                assert target is not None
                return state_toward(base, target, cfg.lr)
            return state_axpy(base, delta, cfg.lr)
        d = delta if delta is not None else state_sub(target, base)  # type: ignore[arg-type]
        out: dict[str, torch.Tensor] = {}
        for k, w in base.items():
            g = d[k]
            if is_counter(w):
                out[k] = target[k] if target is not None else torch.maximum(w, g.to(w.dtype))
                continue
            m = self.m.get(k, torch.zeros_like(w))
            if cfg.name == "momentum":
                m = b1 * m + g
                out[k] = w + cfg.lr * m
            else:
                m = b1 * m + (1 - b1) * g
                v = self.v.get(k, torch.full_like(w, cfg.tau ** 2))
                g2 = g * g
                if cfg.name == "adagrad":
                    v = v + g2
                elif cfg.name == "adam":
                    v = b2 * v + (1 - b2) * g2
                else:  # yogi
                    v = v - (1 - b2) * g2 * torch.sign(v - g2)
                self.v[k] = v
                out[k] = w + cfg.lr * m / (torch.sqrt(v) + cfg.tau)
            self.m[k] = m
        return out


class ServerStep:
    """The server's step from the model a version started from to the one installed, applied by the loop
    shapes to whatever the algorithm's server rule returns (its aggregate is the target):
    ``server_opt`` over the pseudo-gradient ``aggregate − base``; else ``server_lr`` toward the aggregate
    (``base + η_g (aggregate − base)``); at the defaults (η_g = 1, no optimiser) the aggregate itself, untouched.

    A rule therefore never applies ``server_lr`` or ``server_opt`` itself: FedAvg's, FedBuff's, CA2FL's and a
    user's rule alike return their plain aggregate."""

    def __init__(self, server_lr: float = 1.0, server_opt: ServerOptConfig | None = None) -> None:
        self.server_lr = float(server_lr)
        self.opt = ServerOptimizer(server_opt) if server_opt is not None else None

    @classmethod
    def of(cls, config: Any) -> "ServerStep | None":
        """The step an algorithm's ``Config`` asks for: one when it declares ``server_opt`` (``RoundsConfig``
        and FedBuff's ``Config`` do; its ``server_lr``, if declared, is the plain step), None otherwise (a rule
        such as Co-S²P's, whose own ``server_lr`` is part of the rule, keeps it)."""
        if not hasattr(config, "server_opt"):
            return None
        return cls(getattr(config, "server_lr", 1.0), config.server_opt)

    def __call__(self, base: State, aggregate: State) -> State:
        if self.opt is not None:
            return self.opt.step(base, target=aggregate)
        if self.server_lr == 1.0:
            return aggregate
        return state_toward(base, aggregate, self.server_lr)
