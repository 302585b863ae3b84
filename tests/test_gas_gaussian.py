"""Per-label Gaussians of GAS: eqs. (11)-(12), the batched merge, sampling and the top-up rule."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsim.errors import ConfigError
from fedsim.algorithms.gas_parts import LabelGaussians, weight_fn

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

torch.set_num_threads(1)


def _direct_weighted_stats(X: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The definitions of mu_N and Sigma_N (weighted mean / weight-normalised covariance), in numpy."""
    S = w.sum()
    mu = (w[:, None] * X).sum(0) / S
    Xc = X - mu
    cov = np.einsum("i,ij,ik->jk", w, Xc, Xc) / S
    return mu, cov


def _stream(rng: np.random.Generator, n: int, dim: int, num_classes: int):
    X = rng.normal(size=(n, dim)) * rng.uniform(0.5, 2.0, size=dim) + rng.normal(size=dim)
    Y = rng.integers(0, num_classes, size=n)
    Y[:num_classes] = np.arange(num_classes)  # every label present
    return X, Y


@pytest.mark.parametrize("wname,params", [("linear", {}), ("polynomial", {"a": 2.0, "b": 0.5}),
                                          ("exponential", {"a": 0.3, "b": 0.05})])
def test_sequential_updates_equal_direct_weighted_formula(wname, params):
    rng = np.random.default_rng(0)
    dim, M, n = 5, 3, 120
    X, Y = _stream(rng, n, dim, M)
    s = weight_fn(wname, **params)
    progress = np.arange(1, n + 1)  # activation i produced at progress n = i + 1
    g = LabelGaussians(M, dim, covariance="full", reg=0.0)
    for i in range(n):
        g.update_one(torch.from_numpy(X[i]), int(Y[i]), s(float(progress[i])))
    w_all = s(progress.astype(float))
    for y in range(M):
        mu, cov = _direct_weighted_stats(X[Y == y], w_all[Y == y])
        np.testing.assert_allclose(g.mean(y).numpy(), mu, rtol=0, atol=1e-10)
        np.testing.assert_allclose(g.cov(y).numpy(), cov, rtol=0, atol=1e-10)
        assert g.weight_sums[y].item() == pytest.approx(w_all[Y == y].sum(), rel=1e-12)
        assert g.counts[y].item() == int((Y == y).sum())


def test_weight_functions_match_their_formulas():
    assert weight_fn("linear")(7.0) == 7.0
    assert weight_fn("polynomial", a=2.0, b=0.5)(9.0) == pytest.approx(6.0)
    assert weight_fn("exponential", a=0.5, b=0.1)(10.0) == pytest.approx(0.5 * math.e)
    assert weight_fn("constant")(123.0) == 1.0
    with pytest.raises(ConfigError, match="unknown weight function 'cubic'"):
        weight_fn("cubic")
    with pytest.raises(ConfigError, match="unexpected"):
        weight_fn("linear", a=1.0)
    with pytest.raises(ConfigError, match="b"):
        weight_fn("exponential", a=1.0, b=-0.1)


@pytest.mark.parametrize("mode", ["full", "diag"])
def test_batch_merge_equals_sequential_without_reg(mode):
    rng = np.random.default_rng(1)
    dim, M = 4, 3
    seq = LabelGaussians(M, dim, covariance=mode, reg=0.0)
    bat = LabelGaussians(M, dim, covariance=mode, reg=0.0)
    s = weight_fn("linear")
    progress = 1
    for batch_size in (7, 1, 12, 5, 9):  # uneven batches, some labels missing from some batches
        X, Y = _stream(rng, batch_size, dim, M) if batch_size >= M else (rng.normal(size=(batch_size, dim)),
                                                                           rng.integers(0, M, batch_size))
        w = np.array([s(float(progress + i)) for i in range(batch_size)])
        progress += batch_size
        for i in range(batch_size):
            seq.update_one(torch.from_numpy(X[i]), int(Y[i]), float(w[i]))
        bat.update_batch(torch.from_numpy(X), torch.from_numpy(Y), torch.from_numpy(w))
    for y in range(M):
        np.testing.assert_allclose(bat.mean(y).numpy(), seq.mean(y).numpy(), rtol=0, atol=1e-10)
        np.testing.assert_allclose(bat.cov(y).numpy(), seq.cov(y).numpy(), rtol=0, atol=1e-10)
    assert torch.equal(bat.counts, seq.counts)


def test_batch_merge_reg_accumulates_as_closed_form():
    # k equally weighted batches of one constant activation: data variance is 0, so the covariance is
    # the accumulated regulariser R_k with R_1 = 0, R_k = (k-1)/k R_{k-1} + reg  =>  R_k = reg((k+1)/2 - 1/k).
    reg, dim = 1e-3, 3
    g = LabelGaussians(1, dim, covariance="full", reg=reg)
    A = torch.ones(4, dim)
    for k in range(1, 31):
        g.update_batch(A, torch.zeros(4, dtype=torch.int64), 1.0)
        expected = reg * ((k + 1) / 2 - 1 / k)
        np.testing.assert_allclose(g.cov(0).numpy(), expected * np.eye(dim), atol=1e-14)


def test_diag_mode_equals_full_diagonal():
    rng = np.random.default_rng(2)
    dim, M = 6, 2
    full = LabelGaussians(M, dim, covariance="full", reg=1e-4)
    diag = LabelGaussians(M, dim, covariance="diag", reg=1e-4)
    for step in range(5):
        X, Y = _stream(rng, 20, dim, M)
        w = torch.arange(1, 21, dtype=torch.float64) + 20 * step
        full.update_batch(torch.from_numpy(X), torch.from_numpy(Y), w)
        diag.update_batch(torch.from_numpy(X), torch.from_numpy(Y), w)
        full.update_one(torch.from_numpy(X[0]), int(Y[0]), 500.0)
        diag.update_one(torch.from_numpy(X[0]), int(Y[0]), 500.0)
    for y in range(M):
        np.testing.assert_allclose(diag.cov(y).numpy(), torch.diagonal(full.cov(y)).numpy(), atol=1e-12)
        np.testing.assert_allclose(diag.mean(y).numpy(), full.mean(y).numpy(), atol=1e-12)


def _gaussian_with(mu: np.ndarray, cov: np.ndarray, mode: str) -> LabelGaussians:
    """A one-label model whose statistics are exactly (mu, cov): built from 2*dim symmetric points."""
    dim = mu.size
    L = np.linalg.cholesky(cov)
    pts = np.concatenate([mu + math.sqrt(dim) * L.T, mu - math.sqrt(dim) * L.T])  # mean mu, cov L L^T
    g = LabelGaussians(1, dim, covariance=mode, reg=0.0)
    g.update_batch(torch.from_numpy(pts), torch.zeros(2 * dim, dtype=torch.int64), 1.0)
    return g


@pytest.mark.parametrize("mode", ["full", "diag"])
def test_sampling_reproduces_mean_and_covariance(mode):
    rng = np.random.default_rng(3)
    dim = 4
    mu = rng.normal(size=dim)
    R = rng.normal(size=(dim, dim))
    cov = R @ R.T + 0.5 * np.eye(dim)
    g = _gaussian_with(mu, cov, mode)
    np.testing.assert_allclose(g.mean(0).numpy(), mu, atol=1e-12)
    n = 40000
    gen = torch.Generator().manual_seed(11)
    S = g.sample(0, n, gen).numpy()
    target_cov = cov if mode == "full" else np.diag(np.diag(cov))
    # Monte-Carlo tolerances: 5 standard errors of the mean and of each covariance entry.
    se_mu = np.sqrt(np.diag(target_cov) / n)
    assert np.all(np.abs(S.mean(0) - mu) < 5 * se_mu)
    emp = np.cov(S.T, bias=True)
    var = np.diag(target_cov)
    se_cov = np.sqrt((np.outer(var, var) + target_cov**2) / n)
    assert np.all(np.abs(emp - target_cov) < 5 * se_cov)
    # same generator seed -> same draws
    assert torch.equal(g.sample(0, 5, torch.Generator().manual_seed(4)), g.sample(0, 5, torch.Generator().manual_seed(4)))


def test_singular_covariance_uses_jitter():
    g = LabelGaussians(1, 3, covariance="full", reg=0.0)
    g.update_one(torch.tensor([1.0, 2.0, 3.0]), 0, 1.0)  # one activation: Sigma = 0, not PD
    S = g.sample(0, 2000, torch.Generator().manual_seed(0))
    assert g.last_jitter[0] == pytest.approx(1e-6)
    np.testing.assert_allclose(S.mean(0).numpy(), [1.0, 2.0, 3.0], atol=1e-4)
    assert S.std(0).max().item() == pytest.approx(1e-3, rel=0.1)  # sqrt(1e-6)


def test_generation_rule_on_hand_made_buffers():
    M, dim, B = 4, 2, 5
    g = LabelGaussians(M, dim, covariance="diag", reg=0.0)
    gen = torch.Generator().manual_seed(0)
    # only labels 0 and 1 seen so far: nothing is generated, but the deficit is reported
    g.update_batch(torch.randn(6, dim), torch.tensor([0, 0, 0, 1, 1, 1]), 1.0)
    out = g.generate_for_buffer([0, 0, 0, 1, 1, 1], B, gen)
    assert out.n_generated == 0 and out.activations.shape == (0, dim)
    assert out.deficit.tolist() == [2, 2, 5, 5]
    # all labels seen; buffer with a surplus label (7 > B), a deficit label, an exact label and a missing one
    g.update_batch(torch.randn(2, dim) + 10.0, torch.tensor([2, 3]), 1.0)
    buffer = [0] * 7 + [1] * 3 + [2] * 5
    out = g.generate_for_buffer(torch.tensor(buffer), B, gen)
    assert out.deficit.tolist() == [0, 2, 0, 5]  # max(0, B - n_y) with n_y = (7, 3, 5, 0)
    assert out.labels.tolist() == [1, 1, 3, 3, 3, 3, 3]
    assert out.activations.shape == (7, dim)
    # label 3 rows come from label 3's Gaussian (mean 10, tiny variance)
    np.testing.assert_allclose(out.activations[2:].mean(0).numpy(), g.mean(3).numpy(), atol=1e-9)
    # a balanced buffer needs nothing
    out = g.generate_for_buffer(torch.arange(M).repeat_interleave(B), B, gen)
    assert out.n_generated == 0 and out.deficit.tolist() == [0] * M


def test_bad_inputs_raise_config_errors():
    with pytest.raises(ConfigError, match="covariance"):
        LabelGaussians(3, 2, covariance="lowrank")
    g = LabelGaussians(3, 2)
    with pytest.raises(ConfigError, match="label 5 out of range"):
        g.update_one(torch.zeros(2), 5, 1.0)
    with pytest.raises(ConfigError, match="weight"):
        g.update_one(torch.zeros(2), 0, 0.0)
    with pytest.raises(ConfigError, match="features per row"):
        g.update_batch(torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64), 1.0)
    with pytest.raises(ConfigError, match="no statistics"):
        g.sample(1, 3, torch.Generator())
