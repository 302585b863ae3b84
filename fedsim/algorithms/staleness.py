"""Staleness functions: how much an update's weight shrinks with the versions installed since its client
downloaded the model (FedAsync, FedBuff, Fed-RAA).  Pure functions, no torch."""
from __future__ import annotations

import math

from fedsim.algorithms.configs import STALENESS_FUNCTIONS, validate_staleness

__all__ = ["staleness_weight", "validate_staleness"]


def staleness_weight(tau: float, kind: str = "constant", a: float = 0.5, b: float = 4.0) -> float:
    """Staleness scaling s(τ) of Xie et al. 2019 (FedAsync, §5.2) and FedBuff.

    constant: 1;  polynomial: (τ + 1)^(−a);  hinge: 1 if τ ≤ b else 1 / (a(τ − b) + 1);
    fedbuff: 1/√(1 + τ) (Nguyen et al. 2022, the polynomial with a = 0.5).
    """
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((tau + 1.0) ** (-a))
    if kind == "hinge":
        return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)
    if kind == "fedbuff":
        return 1.0 / math.sqrt(1.0 + tau)
    raise ValueError(f"unknown staleness function {kind!r} (allowed: {', '.join(STALENESS_FUNCTIONS)})")

