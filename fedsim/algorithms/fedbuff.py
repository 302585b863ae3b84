"""FedBuff (Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022).

``concurrency`` clients train at once and send model deltas.  Each arriving delta is scaled by the
staleness function (default 1/√(1 + τ), the paper's choice) and put in the buffer; when the buffer
holds ``buffer_size`` deltas the server queues for a worker and applies
w ← w + η_g · (1/K) Σ s(τ_i) Δ_i (the rule forms the aggregate w + (1/K) Σ s(τ_i) Δ_i; the loop shape's server
step moves by η_g toward it, or hands it to ``server_opt``).  A client's slot is refilled as soon as its upload
arrives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithms.loops.async_slots import AsyncSlots

from fedsim.algorithms.staleness import staleness_weight

from fedsim.messages import Update
from fedsim.algorithms.server_opt import ServerOptimizer
from fedsim.config import num, positive
from fedsim.learn.state import State, is_counter, masked_weighted_average, state_axpy
from fedsim.algorithms.configs import FedBuffConfig


def fedbuff_rule(batch: list[Update], base: State, version: int, server_lr: float, staleness: str = "fedbuff",
                 a: float = 0.5, b: float = 4.0, opt: ServerOptimizer | None = None) -> tuple[State, list[float]]:
    """FedBuff's server rule: ``w + η_g · (1/K) Σ s(τ_i) Δ_i`` over the buffer's K deltas (entries that an
    update's mask leaves out are averaged over the updates that covered them).  Returns the new state and
    each update's factor s(τ_i)/K.  With a server optimiser ``opt``, the buffer's delta is its pseudo-gradient."""
    scales = [staleness_weight(version - u.base_version, staleness, a, b) for u in batch]
    scaled = [
        Update(client=u.client, tensors={k: v if is_counter(v) else v * s for k, v in u.tensors.items()}, kind="delta", mask=u.mask,
               base_version=u.base_version, download_time=u.download_time)
        for u, s in zip(batch, scales)
    ]
    delta = masked_weighted_average(scaled, base)
    new = state_axpy(base, delta, server_lr) if opt is None else opt.step(base, delta=delta)
    return new, [s / len(batch) for s in scales]


class FedBuff(AsyncSlots):
    name = "fedbuff"
    theorems = ("fedbuff",)  # Nguyen et al. (AISTATS 2022), Theorem 1
    #: name of the client-selection stream; variants that keep FedBuff's scheduling (CA2FL) share it, so the
    #: same seed dispatches the same clients in the same order until their timelines diverge
    family = "fedbuff"

    Config = FedBuffConfig

    update_kind = "delta"
    #: a slot is refilled as soon as its upload arrives; the server serves one ``aggregate`` per full buffer
    refill_on_arrival = True
    serve_each = False

    @classmethod
    def buffer_size_of(cls, config: Any) -> int:
        return int(config.buffer_size)

    def server_rule(self, batch: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        """The buffer's aggregate ``w + (1/K) Σ s(τ_i) Δ_i``, and each update's weight in it (for the trace);
        the shape then takes the server step (``server_lr``, ``server_opt``) toward it.

        Subclasses (CA2FL) replace this rule and keep the buffering, scheduling, server step and recording.
        """
        ctx, cfg = self.ctx, self.cfg
        return fedbuff_rule(batch, base, ctx.version, 1.0, cfg.staleness, cfg.staleness_a, cfg.staleness_b)
