"""Similarity functions against published golden values, invariances, hand cases and random-matrix theory."""
import numpy as np
import pytest
from scipy.stats import ortho_group

from analysis import similarity as sim
from fedsim.errors import ConfigError


@pytest.fixture(scope="module")
def kornblith_xy():
    # Test vectors of Kornblith et al.'s reference notebook (legacy global seed, as published).
    np.random.seed(1337)
    x = np.random.randn(100, 10)
    y = np.random.randn(100, 10) + x
    return x, y


def test_cka_golden_values(kornblith_xy):
    x, y = kornblith_xy
    assert sim.linear_cka(x, y) == pytest.approx(0.55761, abs=1e-4)
    # Gram-matrix formulation must agree with the feature-space one.
    assert sim.cka(sim.gram_linear(x), sim.gram_linear(y)) == pytest.approx(0.55761, abs=1e-4)
    assert sim.rbf_cka(x, y, threshold=0.5) == pytest.approx(0.65483, abs=1e-4)
    assert sim.linear_cka(x, y, debiased=True) == pytest.approx(0.51346, abs=1e-4)


def test_cka_from_hsic_definition(kornblith_xy):
    # HSIC0 = tr(K H L H)/(n-1)^2, CKA = HSIC(K,L)/sqrt(HSIC(K,K) HSIC(L,L)); computed with explicit H.
    x, y = kornblith_xy
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = x @ x.T, y @ y.T
    hsic = lambda a, b: np.trace(a @ h @ b @ h) / (n - 1) ** 2
    assert sim.linear_cka(x, y) == pytest.approx(hsic(k, l) / np.sqrt(hsic(k, k) * hsic(l, l)), rel=1e-10)


def test_unbiased_hsic_matches_nguyen_formula(kornblith_xy):
    # HSIC1 (Song et al. 2012, eq. 3 of Nguyen et al. 2020) equals <K~,L~>/(n(n-3)) with U-centring.
    x, y = kornblith_xy
    n = x.shape[0]
    k, l = x @ x.T, y @ y.T
    kt, lt = k.copy(), l.copy()
    np.fill_diagonal(kt, 0)
    np.fill_diagonal(lt, 0)
    one = np.ones(n)
    hsic1 = (np.trace(kt @ lt) + (one @ kt @ one) * (one @ lt @ one) / ((n - 1) * (n - 2))
             - 2.0 / (n - 2) * one @ kt @ lt @ one) / (n * (n - 3))
    ours = np.sum(sim.center_gram(k, True) * sim.center_gram(l, True)) / (n * (n - 3))
    assert ours == pytest.approx(hsic1, rel=1e-9)


def test_cka_invariances(kornblith_xy):
    x, y = kornblith_xy
    q = ortho_group.rvs(10, random_state=np.random.default_rng(1))
    base = sim.linear_cka(x, y)
    assert sim.linear_cka(x @ q, y) == pytest.approx(base, abs=1e-10)
    assert sim.linear_cka(x, 3.7 * y) == pytest.approx(base, abs=1e-10)
    assert sim.rbf_cka(x @ q * 2.5, y, 0.5) == pytest.approx(sim.rbf_cka(x, y, 0.5), abs=1e-10)
    assert sim.linear_cka(x, x) == pytest.approx(1.0)
    # Not invariant to a general invertible map (the property that distinguishes CKA from CCA).
    a = np.diag(np.linspace(0.1, 10, 10))
    assert abs(sim.linear_cka(x @ a, y) - base) > 1e-3


def test_orientation_features_first(kornblith_xy):
    x, y = kornblith_xy
    assert sim.linear_cka(x.T, y.T, orientation="features_first") == pytest.approx(sim.linear_cka(x, y))
    assert sim.svcca(x.T, y.T, keep=5, orientation="features_first") == pytest.approx(sim.svcca(x, y, keep=5))
    with pytest.raises(ConfigError, match="orientation"):
        sim.cca(x, y, orientation="rows")
    with pytest.raises(ConfigError, match="same inputs"):
        sim.cca(x, y[:50])


def test_cca_invariant_to_invertible_maps_and_svcca_full():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8))
    y = x[:, :5] @ rng.standard_normal((5, 6)) + 0.7 * rng.standard_normal((300, 6))
    a = rng.standard_normal((8, 8)) + 3 * np.eye(8)   # invertible (checked)
    b = rng.standard_normal((6, 6)) + 3 * np.eye(6)
    assert abs(np.linalg.det(a)) > 1e-3 and abs(np.linalg.det(b)) > 1e-3
    ref = sim.cca(x, y)
    np.testing.assert_allclose(sim.cca(x @ a, y @ b), ref, atol=1e-10)
    # SVCCA keeping every direction is invariant to invertible maps of either input.
    s = sim.svcca(x, y, keep=1.0)
    assert sim.svcca(x @ a, y, keep=1.0) == pytest.approx(s, abs=1e-10)
    assert sim.svcca(x, y @ b, keep=1.0) == pytest.approx(s, abs=1e-10)
    # With truncation it stays invariant to orthogonal maps and isotropic scaling.
    q = ortho_group.rvs(8, random_state=rng)
    assert sim.svcca(5.0 * x @ q, y, keep=3) == pytest.approx(sim.svcca(x, y, keep=3), abs=1e-10)
    # Regularised path agrees with the exact one when epsilon is tiny.
    np.testing.assert_allclose(sim.cca(x, y, epsilon=1e-12), ref, atol=1e-6)


def test_svcca_self_and_variance_keep():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 12)) * np.linspace(5, 0.1, 12)
    assert sim.svcca(x, x) == pytest.approx(1.0)
    assert sim.svcca(x, x, keep=4) == pytest.approx(1.0)
    assert sim.pwcca(x, x) == pytest.approx(1.0)
    # keep as a variance fraction: the smallest k whose leading squared singular values reach it.
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    frac = np.cumsum(s**2) / np.sum(s**2)
    k = int(np.argmax(frac >= 0.9)) + 1
    assert sim.svd_reduce(x, 0.9).shape == (200, k)
    with pytest.raises(ConfigError, match="keep"):
        sim.svcca(x, x, keep=1.5)


def test_cca_hand_case_and_pwcca_weights():
    # Orthogonal centred columns a, b, c: X = [3a, b], Y = [a, c]  =>  rho = (1, 0);
    # PWCCA weights are |<a,3a>|+|<a,b>| = 3 and |<b,3a>|+|<b,b>| = 1, so PWCCA = 3/4.
    rng = np.random.default_rng(5)
    m = rng.standard_normal((50, 3))
    m -= m.mean(0)
    q, _ = np.linalg.qr(m)
    a, b, c = q.T
    x = np.stack([3 * a, b], axis=1)
    y = np.stack([a, c], axis=1)
    np.testing.assert_allclose(sim.cca(x, y), [1.0, 0.0], atol=1e-12)
    assert sim.pwcca(x, y) == pytest.approx(0.75, abs=1e-12)


def test_random_gaussian_cca_matches_wachter_law():
    """Independent Gaussians: mean squared correlation is exactly q/(n-1) in expectation; the mean
    correlation follows the asymptotic Wachter law.  Linear spectral statistics of Jacobi ensembles have
    O(1) fluctuations, so the mean over p = 100 correlations deviates by O(1/p); 0.01 absolute is a
    several-sigma band at these sizes and far below the gap to the neighbouring sizes tested below."""
    rng = np.random.default_rng(6)
    n, p, q = 2000, 100, 150
    x = rng.standard_normal((n, p))
    y = rng.standard_normal((n, q))
    rho = sim.cca(x, y)
    assert rho.size == p
    assert np.mean(rho**2) == pytest.approx(sim.expected_random_cca(p, q, n, squared=True), abs=0.005)
    assert np.mean(rho**2) == pytest.approx(q / (n - 1), abs=0.005)
    expected = sim.expected_random_cca(p, q, n)
    assert np.mean(rho) == pytest.approx(expected, abs=0.01)
    # The law depends on size: doubling q moves the expectation by far more than the tolerance.
    assert sim.expected_random_cca(p, 2 * q, n) - expected > 0.05
    # SVCCA with k kept directions of independent Gaussians: chance level with p = q = k.
    k = 60
    assert sim.svcca(x, y, keep=k) == pytest.approx(sim.expected_random_cca(k, k, n), abs=0.015)


def test_expected_random_cca_limits():
    # Wachter law reduces to exact known cases: p = q = c n gives support [0, 4c(1-c)] and E rho^2 = c.
    assert sim.expected_random_cca(10, 10, 1001, squared=True) == pytest.approx(0.01)
    with pytest.raises(ConfigError):
        sim.expected_random_cca(60, 60, 100)


def test_max_pairwise_svcca_picks_the_most_similar_pair():
    rng = np.random.default_rng(7)
    base = rng.standard_normal((64, 6))
    q = ortho_group.rvs(6, random_state=rng)
    c0 = {"l1": base, "l2": rng.standard_normal((64, 6))}
    c1 = {"l1": base @ q, "l2": rng.standard_normal((64, 6))}          # same l1 up to rotation
    c2 = {"l1": rng.standard_normal((64, 6)), "l2": c0["l2"] * 2.0}    # same l2 up to scaling
    out = sim.max_pairwise_svcca([c0, c1, c2], keep=4)
    assert out["l1"] == pytest.approx(1.0) and out["l2"] == pytest.approx(1.0)
    # Hand computation for l1 over the three pairs with batching: mean over batches, max over pairs.
    out_b = sim.max_pairwise_svcca([c0, c2], keep=4, batch_size=32)
    hand = np.mean([sim.svcca(c0["l1"][s], c2["l1"][s], keep=4) for s in (slice(0, 32), slice(32, 64))])
    assert out_b["l1"] == pytest.approx(hand)
    # Conv maps are pooled over space by default.
    conv = rng.standard_normal((10, 3, 4, 4))
    np.testing.assert_allclose(sim.flatten_activations(conv), conv.mean(axis=(2, 3)))
    assert sim.flatten_activations(conv, "positions").shape == (160, 3)


def test_layer_similarity_matrix_shape_and_diagonal():
    rng = np.random.default_rng(8)
    acts = {"a": rng.standard_normal((40, 5)), "b": rng.standard_normal((40, 7, 2))}
    df = sim.layer_similarity_matrix(acts, acts, sim.linear_cka)
    assert list(df.index) == ["a", "b"] and list(df.columns) == ["a", "b"]
    np.testing.assert_allclose(np.diag(df.values), 1.0)
    assert df.loc["a", "b"] == pytest.approx(df.loc["b", "a"])


def test_pwcca_equals_reference_compute_pwcca_on_unequal_neuron_counts():
    """Golden numbers from google/svcca's compute_pwcca (run outside this project on the stored matrices,
    features-first, the side with fewer neurons as its first argument): equal to 1e-6 for p != q."""
    import json
    from pathlib import Path

    data = Path(__file__).parent / "data"
    arrays = np.load(data / "pwcca_cases.npz")
    golden = json.loads((data / "pwcca_golden.json").read_text())
    assert len(golden) >= 4 and all(g["p"] != g["q"] for g in golden)
    for g in golden:
        x, y = arrays[f"x{g['case']}"], arrays[f"y{g['case']}"]
        got = sim.pwcca(x, y, epsilon=g["epsilon"], orientation="features_first")
        assert got == pytest.approx(g["pwcca"], abs=1e-6), g
        # the larger side second or first gives the same number (the reference's working branch)
        assert sim.pwcca(y, x, epsilon=g["epsilon"], orientation="features_first") == pytest.approx(g["pwcca"], abs=1e-6)
