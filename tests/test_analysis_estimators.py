"""Estimators recover the constants a quadratic problem was built with (closed forms, exact by construction)."""
import numpy as np
import pytest
import torch

from analysis import estimators as est
from fedsim.errors import ConfigError
from fedsim.learn.quadratic import QuadraticProblem, quadratic_loss
from fedsim.sim.rng import Streams

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def problem_b1():
    return QuadraticProblem.make(6, 20, L=2.0, mu=0.2, sigma2=0.5, G2=3.0, B=1.0, rng=Streams(1).numpy("quad"))


@pytest.fixture(scope="module")
def problem_b12():
    return QuadraticProblem.make(8, 10, L=4.0, mu=0.5, sigma2=1.5, G2=2.0, B=1.1, rng=Streams(2).numpy("quad"))


def test_construction_realises_the_constants(problem_b12):
    c = problem_b12.constants
    assert c.L == pytest.approx(4.0) and c.mu == pytest.approx(0.5)
    assert c.B == pytest.approx(1.1, rel=1e-9) and c.G2 == pytest.approx(2.0, rel=1e-9)
    assert c.zeta2 == float("inf")  # Hessians differ, so the deviation grows with ‖w‖
    # The (G, B) identity holds with equality at arbitrary points (independent check of the constants).
    rng = np.random.default_rng(0)
    for _ in range(5):
        w = 10 * rng.standard_normal(10)
        g = est.client_gradients(problem_b12, w)
        lhs = np.mean(np.sum(g**2, axis=1))
        rhs = c.G2 + c.B**2 * np.sum(problem_b12.full_grad(w) ** 2)
        assert lhs == pytest.approx(rhs, rel=1e-9)
    with pytest.raises(ConfigError, match="B"):
        QuadraticProblem.make(4, 3, B=0.5, rng=rng)


def test_smoothness_power_iteration_recovers_L(problem_b12):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(10)
    per_client = [est.hessian_top_eigenvalue(est.fd_hvp(lambda v, i=i: problem_b12.grad(i, v), w), 10, rng=rng)
                  for i in range(problem_b12.n_clients)]
    assert max(per_client) == pytest.approx(problem_b12.constants.L, rel=0.05)
    glob = est.hessian_top_eigenvalue(est.fd_hvp(problem_b12.full_grad, w), 10, rng=rng)
    assert glob == pytest.approx(problem_b12.constants.L_global, rel=0.05)


def test_secant_smoothness_is_a_lower_bound_attained_on_top_eigvec(problem_b1):
    a = problem_b1.hessians[0]
    lam, vec = np.linalg.eigh(a)
    w0 = np.zeros(20)
    pts = [w0, w0 + vec[:, -1], w0 + vec[:, 0] + vec[:, -1]]
    grads = [problem_b1.grad(0, p) for p in pts]
    assert est.smoothness_secant(pts, grads, pairs="all") == pytest.approx(lam[-1])
    rng = np.random.default_rng(2)
    rnd = [rng.standard_normal(20) for _ in range(6)]
    assert est.smoothness_secant(rnd, [problem_b1.grad(0, p) for p in rnd]) <= lam[-1] + 1e-12


def test_sigma2_estimate(problem_b1):
    s = est.stochastic_variance(problem_b1, np.ones(20), n_samples=400, rng=Streams(3).numpy("sigma"))
    assert s.mean() == pytest.approx(0.5, rel=0.05)
    assert s.max() == pytest.approx(0.5, rel=0.1)


def test_bgd_fit_recovers_G_and_B(problem_b12, problem_b1):
    for prob in (problem_b12, problem_b1):
        rng = np.random.default_rng(4)
        pts = [prob.minimizer + scale * rng.standard_normal(prob.dim) for scale in (0.0, 0.5, 2.0, 5.0, 20.0)]
        sets = [est.client_gradients(prob, w) for w in pts]
        fit = est.fit_bgd(sets)
        c = prob.constants
        assert fit.B == pytest.approx(c.B, rel=0.05)
        assert fit.G2 == pytest.approx(c.G2, rel=0.05)
        # Given B, the envelope G² is the exact sup over these points (identity holds with equality).
        assert est.fit_bgd(sets, B=c.B).G2 == pytest.approx(c.G2, rel=1e-6)
        assert est.fit_bgd(sets, method="lstsq").G2 == pytest.approx(c.G2, rel=0.05)


def test_dissimilarities_closed_forms(problem_b1, problem_b12):
    w = np.full(20, 0.3)
    g = est.client_gradients(problem_b1, w)
    d = est.dissimilarity(g)
    c = problem_b1.constants
    assert d["max"] == pytest.approx(c.zeta2) and d["mean"] == pytest.approx(c.zeta2_mean)
    assert c.zeta2_mean == pytest.approx(c.G2)  # B = 1: mean deviation is G² exactly
    # B(w)² = B² + G²/‖∇f‖² holds exactly for this construction.
    g2 = est.client_gradients(problem_b12, np.ones(10))
    gf = np.sum(problem_b12.full_grad(np.ones(10)) ** 2)
    cc = problem_b12.constants
    assert est.local_dissimilarity(g2) ** 2 == pytest.approx(cc.B**2 + cc.G2 / gf, rel=1e-9)
    # Gradient diversity hand cases: equal gradients -> 1/m; orthogonal equal-norm -> 1.
    assert est.gradient_diversity(np.ones((4, 3))) == pytest.approx(0.25)
    assert est.gradient_diversity(np.eye(3)) == pytest.approx(1.0)
    assert est.local_dissimilarity(np.ones((4, 3))) == pytest.approx(1.0)


def test_gas_quantities_hand_values():
    assert est.gas_kappa_sq(np.array([1.0, 2.0]), np.array([0.0, 0.0])) == pytest.approx(5.0)
    gb = {"w": np.array([1.0, 1.0]), "b": np.array([3.0])}
    gp = {"w": np.array([0.0, 0.0]), "b": np.array([0.0])}
    assert est.gas_kappa_sq(gb, gp) == pytest.approx(11.0)
    assert est.gas_kappa_sq(gb, gp, reduction="mean_tensor") == pytest.approx(5.5)
    assert est.gas_lemma1_rho(16, 4, 64) == pytest.approx(0.5)
    assert est.gas_lemma1_rho(16, 4, 0) == pytest.approx(1.0)


def test_torch_form_matches_closed_form(problem_b12):
    rng = Streams(5).numpy("torchdata")
    data = [problem_b12.torch_data(i, 64, rng) for i in range(problem_b12.n_clients)]
    model = problem_b12.torch_model()
    oracle = est.TorchClients(model, data, quadratic_loss, batch_size=8, chunk=20)
    w = np.linspace(-1, 1, 10)
    for i in (0, 3):
        np.testing.assert_allclose(oracle.grad(i, w), problem_b12.grad(i, w), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(oracle.full_grad(w), problem_b12.full_grad(w), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(est.flat_params(model), w)
    # Exact Hessian-vector products through autograd give L.
    lam = est.hessian_top_eigenvalue(oracle.hvp(w, i=0), 10, rng=np.random.default_rng(6))
    assert lam == pytest.approx(np.linalg.eigvalsh(problem_b12.hessians[0]).max(), rel=1e-6)
    # Minibatch noise variance against its exact value for sampling with replacement.
    s = est.stochastic_variance(oracle, w, clients=[1], n_samples=400, rng=np.random.default_rng(7))
    exact = QuadraticProblem.minibatch_variance(*data[1], w, 8)
    assert s[1] == pytest.approx(exact, rel=0.1)
    # Per-sample squared norms: their mean bounds the full-gradient squared norm (Jensen).
    ps = oracle.per_sample_sq_norms(1, w)
    assert ps.mean() >= np.sum(problem_b12.grad(1, w) ** 2)


class _BlockNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([
            torch.nn.Sequential(torch.nn.Conv1d(1, 3, 3, padding=1), torch.nn.ReLU()),
            torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(24, 5)),
        ])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def test_probe_activations_hooks_match_manual_forward():
    torch.manual_seed(0)
    net = _BlockNet()
    x = torch.randn(7, 1, 8)
    acts = est.probe_activations(net, x)
    with torch.no_grad():
        h0 = net.blocks[0](x)
        h1 = net.blocks[1](h0)
    assert list(acts) == ["block0", "block1"]
    np.testing.assert_allclose(acts["block0"], h0.numpy(), rtol=1e-6)
    np.testing.assert_allclose(acts["block1"], h1.numpy(), rtol=1e-6)
    pooled = est.probe_activations(net, x, conv="pool")
    assert pooled["block0"].shape == (7, 3)
    assert net.training  # training flag restored
    with pytest.raises(ConfigError, match="blocks"):
        est.probe_activations(torch.nn.Linear(2, 2), torch.randn(3, 2))
