"""Server update rules of GAS and its baselines, as pure functions on state dicts.

Nothing here knows about time, clients' processes or models: every function takes tensors keyed by
parameter name (a model ``state_dict`` or a delta ``w_end - w_start``) and returns new ones, leaving
its inputs untouched. The asynchronous algorithms call them when a buffer fills.

Conventions: a delta is ``w_after_local_training - w_downloaded``, so rules *add* ``server_lr * v``.
Floating tensors are combined in their own dtype; integer entries (e.g. BatchNorm's
``num_batches_tracked``) follow ``fedsim.learn.state``'s one rule for counters (the maximum).  FedAvg's,
FedBuff's and FedAsync's rules live beside their algorithms and use ``fedsim.learn.state``'s one average.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np
import torch

from fedsim.errors import ConfigError
from fedsim.learn.state import state_axpy, state_weighted_sum

State = Mapping[str, torch.Tensor]


def _check_same_keys(reference: State, other: State, field: str) -> None:
    if set(other.keys()) != set(reference.keys()):
        missing = sorted(set(reference) - set(other))
        extra = sorted(set(other) - set(reference))
        raise ConfigError(field, f"keys differ from the global state (missing {missing}, unexpected {extra})")


def _apply(global_state: State, direction: Mapping[str, torch.Tensor], server_lr: float) -> dict[str, torch.Tensor]:
    return state_axpy(global_state, direction, server_lr)


def _check_lr(server_lr: float) -> float:
    lr = float(server_lr)
    if not np.isfinite(lr) or lr <= 0:
        raise ConfigError("server.lr", f"must be a finite number > 0, got {server_lr!r}")
    return lr


# ---------------------------------------------------------------------------------------------------
# CA2FL
# ---------------------------------------------------------------------------------------------------

def ca2fl_apply(
    global_state: State,
    cache: Mapping[Hashable, State],
    new: Mapping[Hashable, State] | Sequence[tuple[Hashable, State]],
    server_lr: float,
    num_clients: int,
    *,
    variant: str = "canonical",
    data_sizes: Mapping[Hashable, float] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[Hashable, State]]:
    """One CA2FL server update when the buffer fills; returns ``(new_global_state, new_cache)``.

    ``variant="canonical"``: Wang, Zhang, Chen, Zhang, Li and Gu, "Tackling the Data Heterogeneity in
    Asynchronous Federated Learning with Cached Update Calibration", ICLR 2024 (Algorithm 1). The
    server caches every client's latest delta ``h_i`` (zero before its first arrival) and, for the
    buffered arrivals ``S_t``,

        v_t = h_bar + (1/|S_t|) sum_{i in S_t} (Delta_i - h_i^old),   h_bar = (1/N) sum_{i=1..N} h_i^old,

    then refreshes ``h_i <- Delta_i`` for ``i in S_t`` and sets ``w <- w + server_lr * v_t``. The
    calibration replaces the stale contribution of every absent client by its cached update, so fast
    clients cannot dominate the direction. ``new`` may be a mapping or a sequence of
    ``(client, delta)`` arrivals; if one client arrives twice in a buffer, each arrival is corrected
    by the cache as it was when the buffer opened, ``|S_t|`` counts arrivals, and the cache keeps the
    last one (a choice: the paper assumes distinct clients per buffer).

    ``variant="gas-code"``: what the GAS authors' baseline runs. The caches are refreshed first, then
    ``w <- w + server_lr * sum_{i=1..N} (|D_i| / sum_j |D_j|) h_i`` over *all* clients' cached deltas
    (``server_lr = 1`` in their code; ``data_sizes`` None means uniform ``1/N``).
    """
    if variant not in ("canonical", "gas-code"):
        raise ConfigError("ca2fl.variant", f"unknown variant {variant!r} (allowed: canonical, gas-code)")
    lr = _check_lr(server_lr)
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ConfigError("ca2fl.num_clients", f"must be a positive integer, got {num_clients!r}")
    arrivals = list(new.items()) if isinstance(new, Mapping) else list(new)
    if not arrivals:
        raise ConfigError("ca2fl.new", "the buffer is empty")
    for _, d in arrivals:
        _check_same_keys(global_state, d, "ca2fl.new")
    for _, h in cache.items():
        _check_same_keys(global_state, h, "ca2fl.cache")
    new_cache: dict[Hashable, State] = dict(cache)
    for i, d in arrivals:
        new_cache[i] = d
    if len(new_cache) > num_clients:
        raise ConfigError("ca2fl.num_clients", f"{num_clients} clients but {len(new_cache)} distinct clients have updates")

    if variant == "canonical":
        cached = list(cache.values())
        v = state_weighted_sum(global_state, cached, [1.0 / num_clients] * len(cached))
        m = len(arrivals)
        for i, d in arrivals:
            h_old = cache.get(i)
            for k in v:
                corr = d[k].to(v[k].dtype)
                if h_old is not None:
                    corr = corr - h_old[k].to(v[k].dtype)
                v[k] += corr / m
        return _apply(global_state, v, lr), new_cache

    if data_sizes is None:
        coeffs = {i: 1.0 / num_clients for i in new_cache}
    else:
        unknown = [i for i in new_cache if i not in data_sizes]
        if unknown:
            raise ConfigError("ca2fl.data_sizes", f"no data size for clients {unknown}")
        if len(data_sizes) != num_clients:
            raise ConfigError("ca2fl.data_sizes", f"need one size per client ({num_clients}), got {len(data_sizes)}")
        total = float(sum(data_sizes.values()))
        if total <= 0:
            raise ConfigError("ca2fl.data_sizes", "sizes must sum to a positive number")
        coeffs = {i: float(data_sizes[i]) / total for i in new_cache}
    keys = list(new_cache)
    v = state_weighted_sum(global_state, [new_cache[i] for i in keys], [coeffs[i] for i in keys])
    return _apply(global_state, v, lr), new_cache


# ---------------------------------------------------------------------------------------------------
# S2FL grouping and MiniBatch-SFL batch sizes
# ---------------------------------------------------------------------------------------------------

def s2fl_objective(label_hists: np.ndarray, groups: Sequence[Sequence[int]]) -> float:
    """Mean over groups of the L2 distance between the group's label distribution and uniform."""
    H = np.asarray(label_hists, dtype=np.float64)
    M = H.shape[1]
    uniform = np.full(M, 1.0 / M)
    dists = []
    for g in groups:
        h = H[list(g)].sum(0)
        tot = h.sum()
        p = h / tot if tot > 0 else np.zeros(M)
        dists.append(float(np.linalg.norm(p - uniform)))
    return float(np.mean(dists))


def s2fl_groups(
    label_hists: np.ndarray | Sequence[Sequence[float]],
    n_groups: int = 2,
    passes: int = 100,
    rng: np.random.Generator | None = None,
) -> list[list[int]]:
    """S2FL activation grouping (Yan et al. 2023, as run by the GAS authors' baseline).

    Clients (rows of ``label_hists``, label counts) are split into ``n_groups`` groups whose label
    mixes are as close to uniform as possible, so that each group's concatenated activations give a
    less biased server update. Start: a random split into groups of near-equal size (``rng``). Then up
    to ``passes`` greedy passes: each pass visits all cross-group client pairs in a random order and
    swaps a pair whenever that strictly lowers :func:`s2fl_objective`; it stops early after a pass
    with no swap. The exact proposal order of the authors' code is not published; this one is
    deterministic for a given ``rng`` state and ends in a swap-local optimum when it stops early.
    Returns the groups as sorted lists of row indices; ``passes=0`` returns the initial split.
    """
    H = np.asarray(label_hists, dtype=np.float64)
    if H.ndim != 2 or H.shape[0] == 0:
        raise ConfigError("s2fl.label_hists", f"must be a (clients, labels) matrix, got shape {H.shape}")
    n = H.shape[0]
    if not isinstance(n_groups, (int, np.integer)) or not 1 <= n_groups <= n:
        raise ConfigError("s2fl.n_groups", f"must be an integer in 1..{n} (number of clients), got {n_groups!r}")
    if not isinstance(passes, (int, np.integer)) or passes < 0:
        raise ConfigError("s2fl.passes", f"must be an integer >= 0, got {passes!r}")
    if rng is None:
        raise ConfigError("s2fl.rng", "a numpy Generator from a named stream is required")
    assign = np.empty(n, dtype=np.int64)
    for gi, members in enumerate(np.array_split(rng.permutation(n), n_groups)):
        assign[members] = gi

    def groups_of(a: np.ndarray) -> list[list[int]]:
        return [sorted(np.flatnonzero(a == gi).tolist()) for gi in range(n_groups)]

    best = s2fl_objective(H, groups_of(assign))
    for _ in range(passes):
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if assign[i] != assign[j]]
        swapped = False
        for idx in rng.permutation(len(pairs)):
            i, j = pairs[idx]
            if assign[i] == assign[j]:  # an earlier swap in this pass moved one of them
                continue
            assign[i], assign[j] = assign[j], assign[i]
            val = s2fl_objective(H, groups_of(assign))
            if val < best - 1e-15:
                best, swapped = val, True
            else:
                assign[i], assign[j] = assign[j], assign[i]
        if not swapped:
            break
    return groups_of(assign)


def minibatch_sfl_batch_sizes(sizes: Sequence[int], B: int, C: int) -> list[int]:
    """Per-client batch sizes of MiniBatch-SFL: ``max(1, int(|D_k| / sum_j |D_j| * B * C))``.

    The server batch is then about ``B * C`` split by data share (the GAS authors' baseline);
    ``int`` truncates, so the total can fall short of ``B * C`` by up to one per client.
    """
    s = np.asarray(sizes, dtype=np.float64).reshape(-1)
    if s.size == 0 or np.any(s < 0) or s.sum() <= 0:
        raise ConfigError("minibatch_sfl.sizes", "need at least one client and non-negative sizes with a positive sum")
    if int(B) < 1 or int(C) < 1:
        raise ConfigError("minibatch_sfl.batch", f"B and C must be >= 1, got B={B!r}, C={C!r}")
    total = s.sum()
    return [max(1, int(x / total * B * C)) for x in s]
