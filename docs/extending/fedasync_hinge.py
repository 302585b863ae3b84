"""FedAsync with a hinge staleness function, written as a user's variant of the built-in (Xie, Koyejo & Gupta,
"Asynchronous Federated Optimization", 2019, §5.2), on fedsim's public API.

An update that is τ versions stale is mixed in with α_t = α · s(τ), where the hinge keeps fresh updates at
full weight and discounts older ones:

    s(τ) = 1                      if τ ≤ b
    s(τ) = 1 / (a (τ − b) + 1)    otherwise

The class changes only the server rule, so it keeps everything else of FedAsync: its class flags
(``refill_on_arrival = False``, ``serve_each = True``) and its random streams (``family``), hence the same
clients in the same order as ``fedasync`` for as long as the timelines agree.  Its settings are its own: the
``Config`` below replaces FedAsync's (it extends the shape's ``SlotsConfig``, not ``FedAsync.Config``), so
``fedsim show`` lists the hinge's knobs and not FedAsync's ``staleness*`` fields, which this rule never reads.
It keeps ``alpha`` (its rule reads it) and ``max_staleness`` (the inherited ``FedAsync.max_staleness`` reads
it; leaving it out is refused when the class is loaded, naming that method).  ``bases[0]`` is the model
the update started from; the hinge does not need it, a drift-aware rule would.  With the same a and b it is
the built-in ``fedasync`` with ``staleness: hinge`` bit for bit (a test checks it).
"""
from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithms import FedAsync, SlotsConfig, Update
from fedsim.config import num
from fedsim.learn.state import State, state_mix


def hinge(tau: int, a: float, b: float) -> float:
    """The hinge staleness function s(τ)."""
    return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)


class HingeFedAsync(FedAsync):
    name = "hinge-fedasync"

    @dataclass
    class Config(SlotsConfig):
        """The settings this class reads: the shape's (``concurrency``, ``retry_s``), FedAsync's mixing weight and
        staleness limit, and the hinge's own knobs."""

        alpha: float = num(0.6, gt=0, le=1, doc="α: mixing weight of a fresh update")
        max_staleness: int | None = num(None, ge=0, le=10**9, unit="versions", doc="staler updates are dropped")
        hinge_a: float = num(10.0, ge=0, le=1e3, doc="a: the hinge's slope past b")
        hinge_b: float = num(6.0, ge=0, le=1e9, unit="versions", doc="b: staleness mixed in at full weight")

    def server_rule(self, batch: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        (update,) = batch  # FedAsync's buffer holds one update
        tau = self.ctx.versions.staleness(update)
        alpha_t = self.cfg.alpha * hinge(tau, self.cfg.hinge_a, self.cfg.hinge_b)
        return state_mix(base, update.tensors, alpha_t), [alpha_t]
