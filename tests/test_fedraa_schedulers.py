"""Fed-RAA partition, offline assignment, K_off and the online schedulers, against hand-worked cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.algorithms.fedraa_schedulers import (
    choose_fragment,
    fragment_ratios,
    k_offline,
    offline_assignment,
)
from fedsim.errors import ConfigError
from fedsim.learn.models import FRAGMENT_RATIOS

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

TABLE4 = {1: (1.0,), **FRAGMENT_RATIOS}
from fedsim.system.devices import capability_levels


def paper_cost(caps, ratios):
    """The cost of the proof of Theorem 2: ‖θʲ‖ / C_i (no data size, no communication)."""
    return np.asarray(ratios, float)[None, :] / np.asarray(caps, float)[:, None]


@pytest.mark.parametrize("beta,M,expected", [
    # spec §3.3, worked by hand from Table 4 with capabilities {1, 3}, N = 10
    (0.1, 2, 0.400), (0.1, 3, 0.200), (0.1, 4, 0.4 / 3), (0.1, 5, 0.35 / 3),
    (0.5, 2, 0.400), (0.5, 3, 0.300), (0.5, 4, 0.200), (0.5, 5, 0.200),
    (0.7, 2, 0.600), (0.7, 3, 0.300), (0.7, 4, 0.300), (0.7, 5, 0.300),
    (0.9, 2, 0.600), (0.9, 3, 0.500), (0.9, 4, 0.400), (0.9, 5, 0.350),
])
def test_k_offline_matches_the_worked_table(beta, M, expected):
    caps = [1.0] * round(beta * 10) + [3.0] * (10 - round(beta * 10))
    assert k_offline(paper_cost(caps, TABLE4[M]), TABLE4[M]) == pytest.approx(expected)


def test_offline_assignment_hand_worked():
    # N = 7, M = 5 (spec §3.3 caveat): C = [8,5,2,2,1,1,1], sizes [10,9,2,2,1], g = 1, last group -> N.
    caps, sizes = [8, 5, 2, 2, 1, 1, 1], [10, 9, 2, 2, 1]
    cost = paper_cost(caps, sizes)
    assert offline_assignment(cost, sizes) == [[0], [1], [2], [3], [4], [4], [4]]
    assert k_offline(cost, sizes) == pytest.approx(1.8)
    # shuffled client order: the assignment follows speed, not position
    caps2 = [1, 8, 2, 1, 5, 2, 1]
    assert offline_assignment(paper_cost(caps2, sizes), sizes) == [[4], [0], [2], [4], [1], [3], [4]]


def test_offline_tdm_when_fewer_clients_than_fragments():
    # N = 2, M = 5: the fast client cycles through the 3 largest fragments, the slow one the 2 smallest.
    sizes = TABLE4[5]
    cost = paper_cost([1.0, 3.0], sizes)
    assert offline_assignment(cost, sizes) == [[1, 0], [4, 3, 2]]
    assert k_offline(cost, sizes) == pytest.approx(max(0.35 / 3, 0.1 / 1))


@settings(max_examples=60, deadline=None)
@given(
    caps=st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0]), min_size=1, max_size=12),
    M=st.integers(1, 5),
    comm=st.lists(st.floats(0.0, 2.0), min_size=12, max_size=12),
    seed=st.integers(0, 2**31 - 1),
)
def test_gre_raa_with_k_off_stays_within_k_off(caps, M, comm, seed):
    """Theorem 2 in the form that holds: with K = K_off the feasible set is never empty and no
    assignment costs more than K_off, over random capabilities and per-client link costs."""
    sizes = np.asarray(TABLE4[M])
    n = len(caps)
    cost = paper_cost(caps, sizes) + np.asarray(comm[:n])[:, None] * sizes[None, :]
    K = k_offline(cost, sizes)
    rng = np.random.default_rng(seed)
    q = np.zeros(M, dtype=int)
    for _ in range(40):
        client = int(rng.integers(n))
        j, empty = choose_fragment("gre", q=q, cost_row=cost[client], K=K, rng=rng)
        assert not empty
        assert cost[client, j] <= K * (1 + 1e-9)
        q[j] += 1


def test_gre_picks_least_updated_feasible_and_breaks_ties_uniformly():
    cost = np.array([0.1, 0.5, 0.2, 0.9])
    q = np.array([3, 0, 3, 0])
    rng = np.random.default_rng(0)
    # fragments 1 and 3 have fewer updates but cost more than K = 0.3: the choice is among {0, 2}
    picks = [choose_fragment("gre", q=q, cost_row=cost, K=0.3, rng=rng)[0] for _ in range(400)]
    assert set(picks) == {0, 2}
    assert abs(np.mean(np.array(picks) == 0) - 0.5) < 0.1
    q = np.array([3, 0, 2, 0])
    assert {choose_fragment("gre", q=q, cost_row=cost, K=0.3, rng=rng)[0] for _ in range(50)} == {2}
    # K too small: the cheapest fragment, flagged
    assert choose_fragment("gre", q=q, cost_row=cost, K=0.01, rng=rng) == (0, True)


def test_mp_random_offline_rules():
    rng = np.random.default_rng(1)
    q = np.array([2, 1, 1, 5])
    cost = np.array([9.0, 9.0, 9.0, 9.0])
    assert {choose_fragment("mp", q=q, cost_row=cost, K=0.0, rng=rng)[0] for _ in range(60)} == {1, 2}
    r = [choose_fragment("random", q=q, cost_row=cost, K=0.0, rng=rng)[0] for _ in range(400)]
    assert set(r) == {0, 1, 2, 3}
    assert [choose_fragment("offline", q=q, cost_row=cost, K=0, rng=rng, cycle=[3, 1], turn=t)[0] for t in range(4)] == [3, 1, 3, 1]
    with pytest.raises(ConfigError, match="unknown scheduler"):
        choose_fragment("fifo", q=q, cost_row=cost, K=0, rng=rng)


def test_ratios():
    with pytest.raises(ConfigError, match="algorithm.ratios: must sum to 1"):
        fragment_ratios(2, [0.5, 0.6], "algorithm")
    assert fragment_ratios(3, None, "algorithm") == TABLE4[3]
    with pytest.raises(ConfigError, match="no Table 4 preset"):
        fragment_ratios(7, None, "algorithm")


def test_capability_levels_exact_fraction():
    caps = capability_levels(10, 0.3, [1.0, 3.0], np.random.default_rng(0))
    assert sorted(caps.tolist()) == [1.0] * 3 + [3.0] * 7
