"""Server rules of GAS's baselines: FedBuff, CA2FL (canonical and GAS-code), S2FL grouping, MiniBatch-SFL."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fedsim.messages import Update
from fedsim.algorithms.fedbuff import fedbuff_rule
from fedsim.algorithms.rules import (
    ca2fl_apply,
    minibatch_sfl_batch_sizes,
    s2fl_groups,
    s2fl_objective,
)
from fedsim.errors import ConfigError
from fedsim.learn.state import masked_weighted_average


def _state(w: float, b: tuple[float, float], steps: int = 0) -> dict[str, torch.Tensor]:
    return {"w": torch.tensor([w], dtype=torch.float64), "b": torch.tensor(b, dtype=torch.float64),
            "steps": torch.tensor(steps)}


def _close(state, expected: dict[str, list[float]]) -> None:
    for k, v in expected.items():
        np.testing.assert_allclose(state[k].numpy(), v, atol=1e-12)


def _delta(client: int, state: dict, base_version: int) -> Update:
    return Update(client=client, tensors=state, kind="delta", base_version=base_version)


def test_fedbuff_rule_mean_staleness_and_counters():
    g = _state(1.0, (0.0, 2.0), 10)
    deltas = [_delta(0, _state(2.0, (1.0, 0.0), 4), 3), _delta(1, _state(-1.0, (3.0, 1.0), 12), 3)]
    out, w = fedbuff_rule(deltas, g, version=3, server_lr=0.5, staleness="constant")
    _close(out, {"w": [1.0 + 0.5 * 0.5], "b": [0.0 + 0.5 * 2.0, 2.0 + 0.5 * 0.5]})
    assert w == [0.5, 0.5]
    # counters are never averaged: the largest value wins (fedsim.learn.state's one rule)
    assert out["steps"].dtype == torch.int64 and out["steps"].item() == 12
    # FedBuff's staleness scaling: w + (1/K) sum_k s(tau_k) delta_k with s = 1/sqrt(1 + tau)
    stale = [_delta(0, _state(2.0, (1.0, 0.0)), 3), _delta(1, _state(-1.0, (3.0, 1.0)), 0)]
    out, w = fedbuff_rule(stale, g, version=3, server_lr=1.0, staleness="fedbuff")
    # client 0 is fresh (tau 0, s = 1), client 1 three versions stale (s = 1/2)
    _close(out, {"w": [1.0 + (2.0 * 1.0 - 1.0 * 0.5) / 2]})
    assert w == pytest.approx([0.5, 0.25])
    assert g["w"].item() == 1.0  # inputs untouched


def test_client_model_average_weighted_by_data_size():
    """The SFL client-model average (GAS eq. 10) is the one masked weighted average with |D_k| weights."""
    s = [_state(1.0, (0.0, 0.0)), _state(4.0, (3.0, 6.0))]
    out = masked_weighted_average([Update(client=0, tensors=s[0], weight=2.0), Update(client=1, tensors=s[1], weight=1.0)], s[0])
    _close(out, {"w": [2.0], "b": [1.0, 2.0]})


def test_ca2fl_all_arrive_once_with_empty_cache_equals_fedbuff():
    rng = np.random.default_rng(0)
    N = 4
    g = {"w": torch.tensor(rng.normal(size=(3, 2))), "b": torch.tensor(rng.normal(size=2))}
    deltas = {i: {"w": torch.tensor(rng.normal(size=(3, 2))), "b": torch.tensor(rng.normal(size=2))} for i in range(N)}
    ca, cache = ca2fl_apply(g, {}, deltas, server_lr=0.7, num_clients=N)
    fb, _ = fedbuff_rule([_delta(i, d, 0) for i, d in deltas.items()], g, version=0, server_lr=0.7, staleness="constant")
    for k in g:
        torch.testing.assert_close(ca[k], fb[k], rtol=0, atol=1e-12)
    assert set(cache) == set(range(N)) and cache[2] is deltas[2]


def test_ca2fl_hand_worked_three_clients():
    N = 3
    g = {"w": torch.tensor([0.0], dtype=torch.float64)}
    d = lambda x: {"w": torch.tensor([x], dtype=torch.float64)}  # noqa: E731
    # buffer 1: clients 0, 1 arrive; empty cache -> v = 0 + ((1-0)+(2-0))/2 = 1.5
    g, cache = ca2fl_apply(g, {}, {0: d(1.0), 1: d(2.0)}, server_lr=0.5, num_clients=N)
    _close(g, {"w": [0.75]})
    # buffer 2: clients 1, 2; h_bar = (1+2+0)/3 = 1; corr = ((4-2)+(3-0))/2 = 2.5; v = 3.5
    g, cache = ca2fl_apply(g, cache, {1: d(4.0), 2: d(3.0)}, server_lr=0.5, num_clients=N)
    _close(g, {"w": [0.75 + 0.5 * 3.5]})
    assert [cache[i]["w"].item() for i in range(3)] == [1.0, 4.0, 3.0]
    # buffer 3: client 0 alone; h_bar = (1+4+3)/3 = 8/3; corr = (-2-1)/1 = -3; v = -1/3
    g, cache = ca2fl_apply(g, cache, [(0, d(-2.0))], server_lr=0.5, num_clients=N)
    _close(g, {"w": [2.5 + 0.5 * (8 / 3 - 3)]})
    # duplicate arrival of client 1 in one buffer: both corrected by h_1 = 4, |S| = 2 arrivals
    # h_bar = (-2+4+3)/3 = 5/3; corr = ((6-4)+(0-4))/2 = -1; v = 2/3; cache keeps the last (0.0)
    g2, cache2 = ca2fl_apply(g, cache, [(1, d(6.0)), (1, d(0.0))], server_lr=1.0, num_clients=N)
    _close(g2, {"w": [g["w"].item() + 2 / 3]})
    assert cache2[1]["w"].item() == 0.0


def test_ca2fl_gas_code_variant_hand_worked():
    N, sizes = 3, {0: 10, 1: 30, 2: 60}
    g = {"w": torch.tensor([0.0], dtype=torch.float64)}
    d = lambda x: {"w": torch.tensor([x], dtype=torch.float64)}  # noqa: E731
    g, cache = ca2fl_apply(g, {}, {0: d(1.0), 1: d(2.0)}, 1.0, N, variant="gas-code", data_sizes=sizes)
    _close(g, {"w": [0.1 * 1 + 0.3 * 2]})
    g, cache = ca2fl_apply(g, cache, {1: d(4.0), 2: d(3.0)}, 1.0, N, variant="gas-code", data_sizes=sizes)
    _close(g, {"w": [0.7 + 0.1 * 1 + 0.3 * 4 + 0.6 * 3]})
    with pytest.raises(ConfigError, match="unknown variant 'paper'"):
        ca2fl_apply(g, cache, {0: d(1.0)}, 1.0, N, variant="paper")


def test_rules_reject_mismatched_keys_and_bad_lr():
    g = _state(0.0, (0.0, 0.0))
    with pytest.raises(ConfigError, match="missing"):
        ca2fl_apply(g, {}, {0: {"w": torch.zeros(1)}}, 1.0, num_clients=2)
    with pytest.raises(ConfigError, match="server.lr"):
        ca2fl_apply(g, {}, {0: g}, 0.0, num_clients=2)
    with pytest.raises(ConfigError, match="distinct clients"):
        ca2fl_apply(g, {0: g, 1: g}, {2: g}, 1.0, num_clients=2)


def _brute_force_best(H: np.ndarray) -> float:
    n = H.shape[0]
    best = np.inf
    for first in itertools.combinations(range(n), n // 2):
        rest = [i for i in range(n) if i not in first]
        best = min(best, s2fl_objective(H, [list(first), rest]))
    return best


def test_s2fl_objective_by_hand():
    H = np.array([[4, 0], [0, 4], [2, 2]])
    # group {0,1}: (4,4)/8 = uniform -> 0; group {2}: uniform -> 0
    assert s2fl_objective(H, [[0, 1], [2]]) == 0.0
    # group {0}: (1,0) vs (.5,.5) -> sqrt(.5); group {1,2}: (2,6)/8 = (.25,.75) -> sqrt(.125)
    assert s2fl_objective(H, [[0], [1, 2]]) == pytest.approx((np.sqrt(0.5) + np.sqrt(0.125)) / 2)


def test_s2fl_grouping_improves_and_is_deterministic():
    # shard-like clients: each holds two labels out of 10
    rng0 = np.random.default_rng(5)
    H = np.zeros((10, 10))
    for k in range(10):
        H[k, rng0.choice(10, 2, replace=False)] = rng0.integers(20, 60, 2)
    initial = s2fl_groups(H, passes=0, rng=np.random.default_rng(42))
    grouped = s2fl_groups(H, passes=100, rng=np.random.default_rng(42))
    again = s2fl_groups(H, passes=100, rng=np.random.default_rng(42))
    assert grouped == again
    assert sorted(i for g in grouped for i in g) == list(range(10)) and [len(g) for g in grouped] == [5, 5]
    f0, f1 = s2fl_objective(H, initial), s2fl_objective(H, grouped)
    assert f1 < f0
    # it stopped at a swap-local optimum: no single cross-group swap improves it
    a, b = grouped
    for i in a:
        for j in b:
            ga = sorted(set(a) - {i} | {j})
            gb = sorted(set(b) - {j} | {i})
            assert s2fl_objective(H, [ga, gb]) >= f1 - 1e-12
    # and it is never better than the exhaustive optimum (local search: it may stop slightly above it)
    assert _brute_force_best(H) <= f1 + 1e-12


def test_s2fl_finds_perfect_split_on_single_label_clients():
    H = np.array([[5, 0], [5, 0], [0, 5], [0, 5]])
    groups = s2fl_groups(H, rng=np.random.default_rng(0))
    assert s2fl_objective(H, groups) == 0.0
    assert all(sorted(H[g].argmax(1).tolist()) == [0, 1] for g in groups)


def test_minibatch_sfl_batch_sizes():
    # shares .5, .3, .15, .05 of B*C = 40 -> 20, 12, 6, 2; a tiny client gets at least 1
    assert minibatch_sfl_batch_sizes([500, 300, 150, 50], B=10, C=4) == [20, 12, 6, 2]
    assert minibatch_sfl_batch_sizes([1000, 1], B=4, C=2) == [7, 1]  # int(1000/1001*8) = 7
    with pytest.raises(ConfigError, match="minibatch_sfl"):
        minibatch_sfl_batch_sizes([], B=4, C=2)
