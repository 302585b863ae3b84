"""Client sampling without listing every client draws exactly the clients numpy draws from the listed pool."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.algorithms.algorithm import _nth_not_excluded


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), k=st.integers(1, 12), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_positions_map_to_the_listed_pool(n, k, seed, data):
    exclude = data.draw(st.sets(st.integers(0, n - 1), max_size=n))
    pool = np.array([c for c in range(n) if c not in exclude], dtype=np.int64)
    if len(pool) == 0:
        return
    listed = sorted(int(c) for c in np.random.default_rng(seed).choice(pool, size=min(k, len(pool)), replace=False))
    picks = np.random.default_rng(seed).choice(len(pool), size=min(k, len(pool)), replace=False)
    fast = sorted(_nth_not_excluded(int(i), sorted(exclude)) for i in picks)
    assert fast == listed
    assert not set(fast) & exclude


def test_fedavg_takes_the_fast_path_and_draws_the_clients_of_the_listed_pool(tmp_path, monkeypatch):
    """FedAvg (every client eligible) samples by position; forcing the listing path gives the same trace."""
    from fedsim.algorithms.fedavg import FedAvg
    from fedsim.runner import run_scenario
    from fedsim import load_scenario

    sc = load_scenario("default", ["algorithm=fedavg", "algorithm.clients_per_round=5", "train.systems_only=true",
                                   "stop.max_versions=6", "stop.max_time_s=null", "output.figures=false"])
    calls = []
    fast = FedAvg.everyone_eligible
    monkeypatch.setattr(FedAvg, "everyone_eligible", lambda self: calls.append(fast(self)) or calls[-1])
    run_scenario(sc, tmp_path / "fast", progress=False)
    assert calls and all(calls)
    monkeypatch.setattr(FedAvg, "everyone_eligible", lambda self: False)
    run_scenario(sc, tmp_path / "listed", progress=False)
    runs = [p for p in (tmp_path / "fast").iterdir() if p.is_dir()] or [tmp_path / "fast"]
    for run in runs:
        other = tmp_path / "listed" / run.relative_to(tmp_path / "fast")
        assert (run / "trace.jsonl").read_bytes() == (other / "trace.jsonl").read_bytes()
