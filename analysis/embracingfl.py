"""EmbracingFL's SVCCA study (Fig. 1 and Fig. 3): how alike the clients' layers stay under partial sync.

m client models start from one initialisation and train on their own (non-IID) data with fedsim's local
SGD, ``sync_every`` steps at a time.  After every period a *scheme* averages part of the models across the
clients (with the one masked weighted average; unsynchronised entries stay local), and the layer-wise
maximum pairwise SVCCA (:func:`analysis.similarity.max_pairwise_svcca`, top 4 directions, conv maps
average-pooled) is measured on held-out inputs every client model sees.

Schemes: ``none`` (independent training, Fig. 1); ``second_half`` (the output-side half of the blocks,
EmbracingFL's layer-wise partial sync, Fig. 3a/b); ``first_half`` (the input-side half, InclusiveFL-like,
Fig. 3b); ``channels`` (the first half of the output channels of every layer, Fig. 3a's channel-wise
sync; the paper does not say which half).  "Half" of an odd number of blocks rounds the synced part down.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from analysis.estimators import probe_activations
from analysis.similarity import max_pairwise_svcca
from fedsim.algorithms.base import Update, masked_weighted_average
from fedsim.algorithms.embracingfl import block_keys
from fedsim.errors import ConfigError
from fedsim.learn.models import BlockModel
from fedsim.learn.train import SGDConfig, local_sgd

__all__ = ["SCHEMES", "sync_masks", "svcca_study", "depth_spearman"]

SCHEMES = ("none", "second_half", "first_half", "channels")


def sync_masks(model: BlockModel, scheme: str) -> dict[str, torch.Tensor]:
    """0/1 mask per floating state entry: 1 where ``scheme`` synchronises it."""
    if scheme not in SCHEMES:
        raise ConfigError("scheme", f"unknown sync scheme {scheme!r} (allowed: {', '.join(SCHEMES)})")
    state = model.state_dict()
    n = model.num_blocks()
    half = n // 2
    chosen: set[str] = set()
    if scheme == "second_half":
        chosen = set(block_keys(model, n - half))
    elif scheme == "first_half":
        chosen = set(block_keys(model, 0, half))
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if not torch.is_floating_point(v):
            continue
        m = torch.zeros_like(v)
        if scheme == "channels":
            if v.dim() >= 1:
                m[: math.ceil(v.shape[0] / 2)] = 1.0
        elif k in chosen:
            m[...] = 1.0
        out[k] = m
    return out


def svcca_study(build: Callable[[], BlockModel], x: torch.Tensor, y: torch.Tensor, parts: Sequence[np.ndarray],
                probe_x: torch.Tensor, *, scheme: str = "none", iterations: int = 100, sync_every: int = 10,
                sgd: SGDConfig | None = None, seed: int = 0, task: str = "classification",
                measure_every: int = 1) -> pd.DataFrame:
    """Train ``len(parts)`` clients from one initialisation for ``iterations`` local steps, syncing per
    ``scheme`` every ``sync_every`` steps; returns rows (iteration, layer, depth, svcca) measured after
    every ``measure_every`` periods (and at iteration 0 and the end), SVCCA being the maximum over client
    pairs on ``probe_x``."""
    base = build()
    init = {k: v.detach().clone() for k, v in base.state_dict().items()}
    m = len(parts)
    if m < 2:
        raise ConfigError("parts", f"need at least 2 clients, got {m}")
    sgd = sgd or SGDConfig(lr=0.05, momentum=0.0, batch_size=32)
    period = SGDConfig(**{**sgd.__dict__, "local_steps": int(sync_every), "local_epochs": None})
    states = [{k: v.clone() for k, v in init.items()} for _ in range(m)]
    masks = sync_masks(base, scheme)
    gens = [torch.Generator().manual_seed(int(seed) * 100_003 + i) for i in range(m)]
    rows: list[dict] = []

    def measure(it: int) -> None:
        acts = []
        for st in states:
            base.load_state_dict(st)
            acts.append(probe_activations(base, probe_x, conv="pool"))
        s = max_pairwise_svcca(acts, keep=4)
        for depth, (layer, val) in enumerate(s.items()):
            rows.append({"iteration": it, "layer": layer, "depth": depth, "svcca": float(val), "scheme": scheme})

    measure(0)
    it, period_no = 0, 0
    while it < iterations:
        period_no += 1
        for i in range(m):
            base.load_state_dict(states[i])
            local_sgd(base, x, y, parts[i], period, gens[i], task=task)
            states[i] = {k: v.detach().clone() for k, v in base.state_dict().items()}
        it += sync_every
        if scheme != "none":
            ups = [Update(client=i, tensors=states[i], mask=masks) for i in range(m)]
            avg = masked_weighted_average(ups, states[0])
            for i in range(m):
                states[i] = {k: (torch.where(masks[k] > 0, avg[k], v) if k in masks else v) for k, v in states[i].items()}
        if period_no % max(1, int(measure_every)) == 0 or it >= iterations:
            measure(it)
    return pd.DataFrame(rows)


def depth_spearman(df: pd.DataFrame) -> float:
    """Spearman correlation of layer depth with SVCCA at the last measured iteration (Fig. 1 predicts < 0)."""
    from scipy.stats import spearmanr

    last = df[df["iteration"] == df["iteration"].max()]
    return float(spearmanr(last["depth"], last["svcca"]).statistic)
