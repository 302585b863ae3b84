"""Partitioners: coverage, disjointness, label structure, statistics, reproducibility."""
from __future__ import annotations

import numpy as np
import pytest

from fedsim.errors import ConfigError
from fedsim.learn.partition import PARTITIONS, partition, partition_summary

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _labels(n=1000, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def _check_cover(parts, n):
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)  # sorted, no duplicates
    cat = np.concatenate(parts)
    assert len(cat) == n and np.array_equal(np.sort(cat), np.arange(n))  # disjoint and covering


@pytest.mark.parametrize("method", ["iid", "dirichlet", "shards", "quantity"])
def test_cover_disjoint_reproducible(method):
    lab = _labels()
    a = partition(lab, 7, method, np.random.default_rng(11), min_size=5)
    b = partition(lab, 7, method, np.random.default_rng(11), min_size=5)
    c = partition(lab, 7, method, np.random.default_rng(12), min_size=5)
    assert len(a) == 7
    _check_cover(a, len(lab))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_iid_sizes_differ_by_at_most_one():
    parts = partition(_labels(1003), 10, "iid", np.random.default_rng(0))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


@pytest.mark.parametrize("k,lpc", [(10, 2), (20, 2), (7, 3), (10, 1)])
def test_shards_labels_per_client(k, lpc):
    lab = _labels(1200)
    parts = partition(lab, k, "shards", np.random.default_rng(1), labels_per_client=lpc)
    _check_cover(parts, len(lab))
    for p in parts:
        assert 1 <= len(np.unique(lab[p])) <= lpc
    # shards are near-equal: each client holds about n / k samples
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() > 0.5 * len(lab) / k and sizes.max() < 1.5 * len(lab) / k


def test_shards_fewer_shards_than_classes_falls_back_to_contiguous_cut():
    lab = _labels(500)
    parts = partition(lab, 2, "shards", np.random.default_rng(2), labels_per_client=2)  # 4 shards, 10 classes
    _check_cover(parts, len(lab))
    # label-sorted contiguous shards: every shard's labels form a contiguous range, so 4 shards of ~125 span
    # about 10 / 4 labels each
    assert all(len(np.unique(lab[p])) <= 8 for p in parts)


def test_dirichlet_small_alpha_concentrates_labels():
    lab = _labels(3000)

    def mean_labels(alpha, seed):
        parts = partition(lab, 10, "dirichlet", np.random.default_rng(seed), alpha=alpha, min_size=1)
        counts = partition_summary(parts, lab, 10).filter(like="label_").to_numpy()
        # "effective" labels: classes that make up >= 5% of the client's data
        frac = counts / counts.sum(axis=1, keepdims=True)
        return (frac >= 0.05).sum(axis=1).mean()

    small = np.mean([mean_labels(0.05, s) for s in range(5)])
    large = np.mean([mean_labels(100.0, s) for s in range(5)])
    assert small < 4 and large > 9.5


def test_dirichlet_large_alpha_matches_global_distribution():
    lab = _labels(5000)
    parts = partition(lab, 5, "dirichlet", np.random.default_rng(3), alpha=1e4)
    glob = np.bincount(lab, minlength=10) / len(lab)
    for p in parts:
        np.testing.assert_allclose(np.bincount(lab[p], minlength=10) / len(p), glob, atol=0.02)


def test_dirichlet_min_size_and_impossible_request():
    lab = _labels(400)
    parts = partition(lab, 20, "dirichlet", np.random.default_rng(4), alpha=0.5, min_size=8)
    assert min(len(p) for p in parts) >= 8
    _check_cover(parts, len(lab))
    with pytest.raises(ConfigError, match="partition.min_size"):
        partition(lab, 20, "dirichlet", np.random.default_rng(4), alpha=0.5, min_size=30)


def test_dirichlet_balance_cap_evens_sizes():
    lab = _labels(4000)

    def spread(balance):
        out = []
        for s in range(8):
            parts = partition(lab, 10, "dirichlet", np.random.default_rng(s), alpha=0.3, balance=balance)
            _check_cover(parts, len(lab))
            out.append(np.std([len(p) for p in parts]))
        return np.mean(out)

    assert spread(True) < spread(False)


def test_quantity_sizes():
    lab = _labels(2000)
    eq = partition(lab, 8, "quantity", np.random.default_rng(5), sigma=0.0)
    assert max(len(p) for p in eq) - min(len(p) for p in eq) <= 1  # sigma = 0: all weights equal
    cv = []
    for sigma in (0.3, 2.0):
        parts = partition(lab, 8, "quantity", np.random.default_rng(5), sigma=sigma, min_size=10)
        sizes = np.array([len(p) for p in parts])
        assert sizes.min() >= 10 and sizes.sum() == 2000
        cv.append(sizes.std() / sizes.mean())
    assert cv[0] < cv[1]
    with pytest.raises(ConfigError, match="min_size"):
        partition(lab, 8, "quantity", np.random.default_rng(5), min_size=300)


def test_natural():
    nat = [np.array([3, 1]), np.array([0, 2]), np.array([4])]
    parts = partition(np.zeros(5, int), 3, "natural", np.random.default_rng(0), natural=nat)
    assert [p.tolist() for p in parts] == [[1, 3], [0, 2], [4]]
    # fewer clients than natural ones would leave the rest's data unused: refused, saying how much
    with pytest.raises(ConfigError, match=r"3 natural clients \(1 samples of the last 1 would go unused\)"):
        partition(np.zeros(5, int), 2, "natural", np.random.default_rng(0), natural=nat)
    with pytest.raises(ConfigError, match="only 3 natural clients"):
        partition(np.zeros(5, int), 4, "natural", np.random.default_rng(0), natural=nat)
    with pytest.raises(ConfigError, match="natural clients"):
        partition(np.zeros(5, int), 2, "natural", np.random.default_rng(0))


def test_bad_inputs():
    with pytest.raises(ConfigError, match=r"partition.method: unknown method 'zipf' \(allowed: iid, dirichlet"):
        partition(_labels(), 3, "zipf", np.random.default_rng(0))
    with pytest.raises(ConfigError, match="partition.alpha"):
        partition(_labels(), 3, "dirichlet", np.random.default_rng(0), alpha=0)
    with pytest.raises(ConfigError, match="partition.num_clients"):
        partition(_labels(10), 11, "iid", np.random.default_rng(0))
    assert PARTITIONS == ("iid", "dirichlet", "dirichlet_client", "shards", "quantity", "natural")


def test_summary_counts():
    lab = np.array([0, 1, 1, 2, 2, 2])
    df = partition_summary([np.array([0, 3]), np.array([1, 2, 4, 5])], lab, 4)
    assert list(df.columns) == ["client", "samples", "label_0", "label_1", "label_2", "label_3"]
    assert df.to_numpy().tolist() == [[0, 2, 1, 0, 1, 0], [1, 4, 0, 2, 2, 0]]


def _dirichlet_reference(labels, k, rng, alpha, min_size, balance=False, size_weights=None):
    """The Dirichlet construction as first written (every try cut into pieces): the reference the faster
    code (class members found once, only the kept try cut) must equal draw for draw.  Returns the parts
    and how many tries it took."""
    n = len(labels)
    for tries in range(1, 1001):
        buckets = [[] for _ in range(k)]
        sizes = np.zeros(k, dtype=np.int64)
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(k, alpha))
            if size_weights is not None:
                p = p * size_weights
                p = p / p.sum()
            if balance:
                p = p * (sizes < n / k)
                s = p.sum()
                p = p / s if s > 0 else np.full(k, 1.0 / k)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            for j, piece in enumerate(np.split(idx, cuts)):
                buckets[j].append(piece)
                sizes[j] += len(piece)
        if sizes.min() >= min_size:
            return [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets], tries
    raise AssertionError("the reference found no draw")


def _dirichlet_client_reference(labels, k, rng, alpha, min_size):
    classes = np.unique(labels)
    for tries in range(1, 1001):
        p = rng.dirichlet(np.full(len(classes), alpha), size=k)
        p = p / np.where(p.sum(0, keepdims=True) > 0, p.sum(0, keepdims=True), 1.0)
        buckets = [[] for _ in range(k)]
        for j, c in enumerate(classes):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(p[:, j]) * len(idx)).astype(np.int64)[:-1]
            for i, piece in enumerate(np.split(idx, cuts)):
                buckets[i].append(piece)
        if min(sum(len(b) for b in bs) for bs in buckets) >= min_size:
            return [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets], tries
    raise AssertionError("the reference found no draw")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", [dict(alpha=0.5, min_size=1), dict(alpha=0.3, min_size=120),
                                  dict(alpha=0.3, min_size=10, balance=True),
                                  dict(alpha=1.5, min_size=5, size_weights=[1, 1, 3, 3, 4, 4, 2, 2])])
def test_dirichlet_draws_equal_the_reference_construction(seed, case):
    """Same seed, same partition as the construction written out try by try (uneven classes, labels not
    sorted, retries when a client misses ``min_size``): finding each class once and cutting only the kept
    try changes the cost, never the draw."""
    lab = np.random.default_rng(100 + seed).choice(10, 1500, p=np.linspace(1, 3, 10) / np.linspace(1, 3, 10).sum())
    kw = {k: v for k, v in case.items() if k != "size_weights"}
    sw = case.get("size_weights")
    got = partition(lab, 8, "dirichlet", np.random.default_rng(seed), size_weights=sw, **kw)
    want, _ = _dirichlet_reference(lab, 8, np.random.default_rng(seed), case["alpha"], case["min_size"],
                                   case.get("balance", False), None if sw is None else np.asarray(sw, dtype=np.float64))
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    client = partition(lab, 8, "dirichlet_client", np.random.default_rng(seed), alpha=case["alpha"],
                       min_size=case["min_size"])
    ref, _ = _dirichlet_client_reference(lab, 8, np.random.default_rng(seed), case["alpha"], case["min_size"])
    assert all(np.array_equal(a, b) for a, b in zip(client, ref))


def test_the_reference_comparison_covers_retries_and_would_catch_a_changed_draw():
    """The cases above include draws that were retried (else the retry path went untested), and a
    partition from another seed differs from the reference (so the comparison can fail)."""
    lab = np.random.default_rng(100).choice(10, 1500, p=np.linspace(1, 3, 10) / np.linspace(1, 3, 10).sum())
    _, tries = _dirichlet_reference(lab, 8, np.random.default_rng(0), 0.3, 120)
    assert tries > 1
    _, tries = _dirichlet_client_reference(lab, 8, np.random.default_rng(0), 0.3, 120)
    assert tries > 1
    other = partition(lab, 8, "dirichlet", np.random.default_rng(1), alpha=0.3, min_size=120)
    want, _ = _dirichlet_reference(lab, 8, np.random.default_rng(0), 0.3, 120)
    assert not all(np.array_equal(a, b) for a, b in zip(other, want))
