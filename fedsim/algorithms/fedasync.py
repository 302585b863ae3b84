"""FedAsync (Xie, Koyejo & Gupta, "Asynchronous Federated Optimization", 2019).

``concurrency`` clients train at once.  When an update reaches the server it queues for a worker, and
at the end of its service the server mixes it in:  w ← (1 − α_t) w + α_t w_client with
α_t = α · s(τ), τ = versions applied since the client downloaded.  The freed slot is then given to an
idle client drawn uniformly, which downloads the model as it is at that moment.  Updates staler than
``max_staleness`` (if set) are discarded and recorded as drops.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fedsim.algorithms.loops.async_slots import AsyncSlots

from fedsim.algorithms.staleness import staleness_weight

from fedsim.messages import Update
from fedsim.config import num, positive, require
from fedsim.learn.state import State, masked_weighted_average, state_mix
from fedsim.algorithms.configs import FedAsyncConfig


def fedasync_rule(update: Update, base: State, tau: int, alpha: float, staleness: str = "polynomial",
                  a: float = 0.5, b: float = 4.0) -> tuple[State, float]:
    """FedAsync's server rule: ``(1 − α_t) w + α_t w_client`` with ``α_t = α · s(τ)``; a partial update (a
    mask) mixes only the entries it covered.  Returns the new state and α_t."""
    mix = alpha * staleness_weight(tau, staleness, a, b)
    client = update.tensors if update.mask is None and set(update.tensors) == set(base) else \
        masked_weighted_average([update], base)
    return state_mix(base, client, mix), mix


class FedAsync(AsyncSlots):
    name = "fedasync"
    theorems = ("fedasync",)  # Xie, Koyejo & Gupta (2019), Theorem 1

    Config = FedAsyncConfig

    #: the server applies each arrival as the client's own request, then the slot is refilled (AsyncSlots'
    #: defaults are FedBuff's: refill on arrival, one service per full buffer)
    refill_on_arrival = False
    serve_each = True

    def max_staleness(self) -> int | None:
        return self.cfg.max_staleness

    def server_rule(self, batch: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        """FedAsync's mix of the one buffered update into the current model (``bases`` unused: the rule needs
        only the update's staleness).  A subclass that changes only this draws the same clients as
        ``fedasync`` (it inherits its ``family``)."""
        cfg = self.cfg
        (update,) = batch
        new, a = fedasync_rule(update, base, self.ctx.versions.staleness(update), cfg.alpha, cfg.staleness,
                               cfg.staleness_a, cfg.staleness_b)
        return new, [a]
