"""Deliberately broken FedAvg variants for the discrimination suite (benchmarks/discrimination.py).

Each is a FedAvg subclass written through the public API (docs/extending.md) that *claims* FedAvg's
theorem (``theorems = ("local_sgd",)``), as a buggy implementation of FedAvg would: ``fedsim check`` must
never say "holds" or "consistent" for one, and with certified constants it must say "refuted".  (Without
the claim a subclass that overrides ``server_rule`` inherits no theorem at all.)
"""
from __future__ import annotations

from typing import Any

from fedsim.algorithms import FedAvg
from fedsim.algorithms.fedavg import fedavg_rule
from fedsim.learn.state import state_axpy, state_sub


class IgnoresUpdates(FedAvg):
    """Installs the base model again: no update is ever applied."""

    name = "ignores-updates"
    theorems = ("local_sgd",)

    def server_rule(self, updates: list, base: Any) -> tuple[Any, list[float]]:
        _, weights = fedavg_rule(updates, base)
        return dict(base), weights


class FirstClientOnly(FedAvg):
    """Installs the first client's model instead of the average."""

    name = "first-client-only"
    theorems = ("local_sgd",)

    def server_rule(self, updates: list, base: Any) -> tuple[Any, list[float]]:
        first = min(updates, key=lambda u: u.client)
        return fedavg_rule([first], base)[0], [1.0 if u is first else 0.0 for u in updates]


class WrongSign(FedAvg):
    """Moves the server away from the average: base − (average − base)."""

    name = "wrong-sign"
    theorems = ("local_sgd",)

    def server_rule(self, updates: list, base: Any) -> tuple[Any, list[float]]:
        avg, weights = fedavg_rule(updates, base)
        return state_axpy(base, state_sub(avg, base), -1.0), weights


class AppliesTwice(FedAvg):
    """Applies the averaged update twice: base + 2 (average − base)."""

    name = "applies-twice"
    theorems = ("local_sgd",)

    def server_rule(self, updates: list, base: Any) -> tuple[Any, list[float]]:
        avg, weights = fedavg_rule(updates, base)
        return state_axpy(base, state_sub(avg, base), 2.0), weights


class StaleBase(FedAvg):
    """Adds the round's average update to the model of the round before (a stale base)."""

    name = "stale-base"
    theorems = ("local_sgd",)

    def server_rule(self, updates: list, base: Any) -> tuple[Any, list[float]]:
        avg, weights = fedavg_rule(updates, base)
        previous = getattr(self, "_previous", None)
        stale = previous if previous is not None else base
        self._previous = dict(base)
        return state_axpy(stale, state_sub(avg, base), 1.0), weights
