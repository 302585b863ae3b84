"""CA2FL: cache-aided asynchronous FL (Wang, Zhang, Chen, Zhang, Li & Gu, "Tackling the Data Heterogeneity
in Asynchronous Federated Learning with Cached Update Calibration", ICLR 2024).

FedBuff's machinery (``concurrency`` clients training at once, a buffer of ``buffer_size`` deltas, a
slot refilled as soon as an upload arrives) with CA2FL's server rule instead of the buffer mean: the
server caches every client's latest delta and, when the buffer fills, calibrates the buffered arrivals
with the cache (``rules.ca2fl_apply``): ``v = mean_i h_i + mean_{S}(Δ_i − h_i)``, ``w ← w + η_g v``.
``variant: gas-code`` runs the GAS authors' version (the data-size-weighted sum of all cached deltas).
There is no staleness scaling in CA2FL; the cache is what corrects stale and absent clients.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fedsim.messages import Update
from fedsim.algorithms.fedbuff import FedBuff
from fedsim.algorithms.rules import ca2fl_apply
from fedsim.learn.state import State
from fedsim.algorithms.configs import CA2FLConfig


class CA2FL(FedBuff):
    name = "ca2fl"
    theorems = ()  # its own server rule: FedBuff's theorem does not cover it

    Config = CA2FLConfig

    def __init__(self, ctx: Any, config: Any) -> None:
        super().__init__(ctx, config)
        self.cache: dict[int, State] = {}

    def server_rule(self, batch: list[Update], base: State, bases: list[State]) -> tuple[State, list[float]]:
        """The calibrated aggregate ``w + v`` (the shape's server step then applies ``server_lr`` or
        ``server_opt`` to it)."""
        ctx, cfg = self.ctx, self.cfg
        sizes = {c: float(len(p)) for c, p in enumerate(ctx.parts)}
        new, self.cache = ca2fl_apply(base, self.cache, [(u.client, u.tensors) for u in batch],
                                      1.0, ctx.num_clients, variant=cfg.variant, data_sizes=sizes)
        return new, [1.0 / len(batch)] * len(batch)
