"""The vectorised aggregations of report.html's timeline give exactly what the per-row rules give.

report.html's aggregated levels draw every shown client at every zoom level at once
(:func:`fedsim.output.digest.dominant_rows`, :func:`fedsim.output.report._level_sums`); the rule written
plainly per row (``_rule`` here) and numpy's ``x.reshape(nb, f).sum(axis=1)`` are what they must equal.  Equality is exact (``==`` on floats and codes), so a different summation order or tie rule fails.
"""
from __future__ import annotations

import numpy as np
import pytest

from fedsim.output.digest import dominant, dominant_rows
from fedsim.output.report import _level_sums


def _rule(keys: list[np.ndarray], span: float) -> np.ndarray:
    """The timelines' rule for one row, written plainly: per column the first key with the largest cover,
    unless the idle time (span less the summed cover) is larger, or nothing is covered: -1."""
    c = np.vstack(keys)
    top = c.max(axis=0)
    idle = span - c.sum(axis=0)
    out = np.where(top >= np.maximum(idle, 0.0) * (1 + 1e-9), c.argmax(axis=0), -1)
    out[top <= 0] = -1
    return out


def _covers(rng: np.random.Generator, rows: int, n: int, width: float) -> list[list[np.ndarray]]:
    """Random rows of 0-4 keys each, with exact ties between keys and with the idle time."""
    out = []
    for _ in range(rows):
        keys = []
        for _ in range(int(rng.integers(0, 5))):
            h = rng.uniform(0, width, n) * (rng.random(n) < 0.4)
            h[rng.random(n) < 0.2] = width / 2  # two keys at half each: a tie, and a tie with idle time 0
            keys.append(h)
        out.append(keys)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_dominant_rows_is_dominant_per_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    width, n = 0.01, 97
    covers = _covers(rng, 40, n, width)
    k = max(len(c) for c in covers)
    stack = np.zeros((k, len(covers), n))
    for i, keys in enumerate(covers):
        for j, h in enumerate(keys):
            stack[j, i] = h
    got = dominant_rows(stack, width)
    for i, keys in enumerate(covers):
        want = _rule(keys, width) if keys else np.full(n, -1)
        assert got[i].tolist() == want.tolist()
        if keys:  # the one-row form is the same rule
            assert dominant({j: h for j, h in enumerate(keys)}, width)[1].tolist() == want.tolist()


@pytest.mark.parametrize("f", [1, 2, 4, 8, 32])
@pytest.mark.parametrize("used", [1, 255, 256, 1023])
def test_level_sums_are_numpys_sums_of_each_row(f: int, used: int) -> None:
    rng = np.random.default_rng(f * 1000 + used)
    stack = rng.uniform(0, 1, (7, used)) * 10.0 ** rng.uniform(-6, 3, (7, used))
    nb = -(-used // f)
    got = _level_sums(stack, f, nb)
    for row, sums in zip(stack, got):
        x = np.zeros(nb * f)
        x[:used] = row
        assert sums.tolist() == x.reshape(nb, f).sum(axis=1).tolist()
