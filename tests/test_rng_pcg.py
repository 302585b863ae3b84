"""Named streams seeded as arrays give numpy's own draws, bit for bit (numpy is the reference here)."""
from __future__ import annotations

import numpy as np
import pytest

from fedsim.sim import pcg
from fedsim.sim.rng import Streams, _name_key


def _one(seed: int, key) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=tuple(int(k) for k in key))))


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**40 + 5, 2**130 + 3])  # one to five entropy words
def test_seed_states_and_first_outputs_are_numpys(seed):
    keys = np.random.default_rng(seed % 1000).integers(0, 2**32, size=(300, 4), dtype=np.uint64)
    keys[0], keys[1] = 0, 2**32 - 1
    states = pcg.seed_states(seed, keys.astype(np.uint32))
    outputs = pcg.first_outputs(states)
    for k, st, out in zip(keys, states, outputs):
        ss = np.random.SeedSequence(entropy=seed, spawn_key=tuple(int(v) for v in k))
        assert (ss.generate_state(4, np.uint64) == st).all()
        assert np.random.PCG64(ss).random_raw() == out


def test_first_normals_of_named_streams_equal_one_at_a_time():
    streams = Streams(2024)
    names = [("jitter", c, n) for c in range(400) for n in range(5)]
    z = streams.first_normals(names)
    expect = np.array([streams.numpy(*name).standard_normal() for name in names])
    assert np.array_equal(z, expect)  # exact, not within a tolerance
    keys = np.array([_name_key(name) for name in names], dtype=np.uint64)
    fast, accepted = pcg.first_normals(2024, keys)
    assert 0.95 < accepted.mean() < 1.0  # some rows take the ziggurat's slow path, drawn one at a time
    assert np.array_equal(fast[accepted], expect[accepted])


def test_a_numpy_that_cannot_be_reproduced_falls_back_to_one_at_a_time(monkeypatch):
    monkeypatch.setattr(pcg, "_works", lambda seed: False)
    streams = Streams(3)
    names = [("jitter", c, 0) for c in range(50)]
    assert pcg.first_normals(3, np.zeros((2, 4), dtype=np.uint64)) is None
    assert np.array_equal(streams.first_normals(names), [streams.numpy(*n).standard_normal() for n in names])


def test_ziggurat_tables_read_from_numpy():
    """Layer widths grow outwards from the peak and nearly every layer has a fast path to read; a layer
    without one (numpy's layer 1) is left at 0 and its draws go one at a time."""
    wi, ki = pcg._ziggurat()
    readable = ki > 0
    assert readable.sum() >= 250 and (wi[~readable] == 0).all()
    assert (np.diff(wi[2:]) > 0).all() and (ki[readable] <= 2**52).all()
    assert pcg._works(0) and pcg._works(12345)
