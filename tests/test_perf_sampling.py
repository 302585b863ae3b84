"""Client sampling without listing every client draws exactly the clients numpy draws from the listed pool."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.algorithms.base import _nth_not_excluded


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
