"""Fed-RAA's fragment partition and fragment schedulers, as pure functions of costs and counters.

Fed-RAA (Zhang et al. 2024, arXiv 2406.13351) splits the neurons of designated layers into M disjoint
fragments with non-uniform ratios (Table 4) and, whenever a client goes idle, gives it one fragment:

- ``gre``    Gre-RAA (Alg. 2): among the fragments whose estimated round trip c_{n,j} <= K, the one
             with the fewest completed server updates q(j); ties broken uniformly from a named stream
             (Alg. 2 as printed breaks ties only partly at random; its stated intent is "randomly select
             one").  If no fragment fits (K set too small by hand) the cheapest fragment is taken and the
             caller records it; with K = K_off this cannot happen (Theorem 2, tested).
- ``random`` uniform over all M fragments, no K filter (the ablation "Random Fed-RAA").
- ``mp``     MP-RAA: argmin_j q(j) over all M, no K filter, ties uniform.
- ``offline`` the static assignment of the proof of Theorem 2: clients sorted fastest first, fragments
             largest first, fragment j owns clients j·g .. (j+1)·g − 1 with g = ⌊N/M⌋, the last group
             extended to client N (the paper's K formula ends with θᴹ/C_N); when N < M each client cycles
             through a fixed run of fragments (time-division multiplexing), the fastest the largest.

Costs are seconds (the paper counts "global epochs"; in a simulator seconds are what the clients
spend), and K_off is the maximum cost over the offline assignment's (client, fragment) pairs, computed
on the same cost matrix the online scheduler filters with, so "c <= K_off" compares like with like.
"Fastest" means the smallest cost on the smallest fragment: with the paper's cost ‖θʲ‖/C_i this is the
sort by capability C_i, and with communication added it keeps the one fact Theorem 2 needs (the
smallest fragment is feasible for every client under K = K_off).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from fedsim.errors import ConfigError
from fedsim.learn.models import FRAGMENT_RATIOS
from fedsim.algorithms.configs import SCHEDULERS, fragment_ratios

# ------------------------------------------------------------------------------------------ offline

def _order(cost: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clients fastest first (by cost on the smallest fragment), fragments largest first (stable)."""
    frag = np.argsort(-sizes, kind="stable")
    clients = np.argsort(cost[:, frag[-1]], kind="stable")
    return clients, frag


def offline_assignment(cost: np.ndarray, sizes: Sequence[float]) -> list[list[int]]:
    """The static assignment of Theorem 2's proof: for every client the fragments it cycles through
    (one fragment when N >= M; a fixed run of fragments under TDM when N < M)."""
    c = np.asarray(cost, dtype=float)
    N, M = c.shape
    clients, frag = _order(c, np.asarray(sizes, dtype=float))
    out: list[list[int]] = [[] for _ in range(N)]
    if N >= M:
        g = N // M
        for rank, client in enumerate(clients):
            out[int(client)] = [int(frag[min(rank // g, M - 1)])]
    else:
        for rank, chunk in enumerate(np.array_split(np.arange(M), N)):
            out[int(clients[rank])] = [int(frag[j]) for j in chunk]
    return out


def k_offline(cost: np.ndarray, sizes: Sequence[float]) -> float:
    """K_off: the largest cost over the (client, fragment) pairs of the offline assignment."""
    c = np.asarray(cost, dtype=float)
    assign = offline_assignment(c, sizes)
    return float(max(c[n, j] for n, js in enumerate(assign) for j in js))


# ------------------------------------------------------------------------------------------ online

def feasible(cost_row: np.ndarray, K: float) -> np.ndarray:
    """Indices of the fragments with c_{n,j} <= K (a relative tolerance of 1e-9 for rounding)."""
    return np.flatnonzero(np.asarray(cost_row) <= K * (1 + 1e-9))


def least_updated(candidates: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> int:
    """Uniform choice among the candidates with the fewest updates."""
    qc = np.asarray(q)[candidates]
    best = candidates[qc == qc.min()]
    return int(best[0] if len(best) == 1 else rng.choice(best))


def choose_fragment(kind: str, *, q: np.ndarray, cost_row: np.ndarray, K: float, rng: np.random.Generator,
                    cycle: Sequence[int] | None = None, turn: int = 0) -> tuple[int, bool]:
    """One scheduling decision for an idle client; returns ``(fragment, S_was_empty)``.

    ``q`` is the per-fragment count of completed server updates, ``cost_row`` the client's estimated
    round trip per fragment, ``K`` the delay bound (Gre-RAA only), ``cycle``/``turn`` the client's offline
    fragments and how many tasks it has had (offline only).
    """
    M = len(q)
    if kind == "gre":
        S = feasible(cost_row, K)
        if len(S) == 0:
            return int(np.argmin(cost_row)), True
        return least_updated(S, q, rng), False
    if kind == "random":
        return int(rng.integers(M)), False
    if kind == "mp":
        return least_updated(np.arange(M), q, rng), False
    if kind == "offline":
        if not cycle:
            raise ConfigError("algorithm.scheduler", "offline scheduling needs the client's fragment cycle")
        return int(cycle[turn % len(cycle)]), False
    raise ConfigError("algorithm.scheduler", f"unknown scheduler {kind!r} (allowed: {', '.join(SCHEDULERS)})")
