"""The probes' faster estimators against exact values on small cases: σ² from per-sample gradients equals
the with-replacement minibatch variance computed by brute force, and the Lanczos top Hessian eigenvalue
(from a random start or from the empirical Fisher's top direction, the default) lies within its stated
error of the exact one."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from analysis.estimators import (
    TorchClients,
    fisher_top_direction,
    flat_params,
    lanczos_top_eigenvalue,
    per_sample_pass,
    per_sample_stats,
    per_sample_stats_many,
    set_flat_params,
    torch_hvp_reusing,
)
from analysis.probes import cross_entropy_loss, probe_point
from fedsim.errors import ConfigError


def _model_and_data(seed: int = 0, n: int = 24):
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()
    for p in model.parameters():
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    return model.eval(), x, y


def test_per_sample_sigma2_is_the_with_replacement_minibatch_variance():
    model, x, y = _model_and_data()
    stats = per_sample_stats(model, cross_entropy_loss, (x, y), chunk=7)  # chunks that do not divide n
    per = []
    for j in range(len(x)):  # brute force: one autograd call per sample
        model.zero_grad()
        F.cross_entropy(model(x[j:j + 1]), y[j:j + 1]).backward()
        per.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().copy())
    per = np.array(per)
    full = per.mean(axis=0)
    assert np.allclose(stats.grad, full, rtol=1e-10, atol=1e-12)
    assert stats.loss == pytest.approx(float(F.cross_entropy(model(x), y).detach()), rel=1e-12)
    B = 4
    exact = float(np.mean(np.sum((per - full) ** 2, axis=1))) / B
    assert stats.minibatch_variance(B) == pytest.approx(exact, rel=1e-9)
    # and what the sampled estimator converges to: the mean over many drawn minibatches
    rng = np.random.default_rng(1)
    draws = [np.sum((per[rng.integers(0, len(x), B)].mean(axis=0) - full) ** 2) for _ in range(20000)]
    assert float(np.mean(draws)) == pytest.approx(exact, rel=0.03)


def test_per_sample_stats_of_many_datasets_equal_each_dataset_alone():
    """One stream of chunks over the clients' concatenated data, with chunks straddling client boundaries
    (sizes 5, 1, 11 in chunks of 4), gives every client its own gradient, loss and σ², as brute force does."""
    model, x, y = _model_and_data(n=17)
    cuts = [(0, 5), (5, 6), (6, 17)]
    datasets = [(x[a:b], y[a:b]) for a, b in cuts]
    many = per_sample_stats_many(model, cross_entropy_loss, datasets, chunk=4)
    assert [st.n for st in many] == [5, 1, 11]
    for st, (a, b) in zip(many, cuts):
        alone = per_sample_stats(model, cross_entropy_loss, (x[a:b], y[a:b]))
        per = []
        for j in range(a, b):
            model.zero_grad()
            F.cross_entropy(model(x[j:j + 1]), y[j:j + 1]).backward()
            per.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().copy())
        per = np.array(per)
        assert np.allclose(st.grad, per.mean(axis=0), rtol=1e-10, atol=1e-12)
        assert np.allclose(st.grad, alone.grad, rtol=1e-12, atol=1e-14)
        assert st.loss == pytest.approx(alone.loss, rel=1e-12)
        assert st.sq_mean == pytest.approx(float(np.mean(np.sum(per * per, axis=1))), rel=1e-10)
        assert st.minibatch_variance(3) == pytest.approx(alone.minibatch_variance(3), rel=1e-10, abs=1e-14)
    with pytest.raises(Exception, match="non-empty"):
        per_sample_stats_many(model, cross_entropy_loss, [(x[:0], y[:0])])


def test_lanczos_top_eigenvalue_is_within_its_stated_error_of_the_exact_one():
    model, x, y = _model_and_data(seed=3)
    w = flat_params(model)

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        set_params = {}
        off = 0
        for name, p in model.named_parameters():
            set_params[name] = flat[off:off + p.numel()].reshape(p.shape)
            off += p.numel()
        return F.cross_entropy(torch.func.functional_call(model, set_params, (x,)), y)

    H = torch.autograd.functional.hessian(loss_of, torch.from_numpy(w)).numpy()
    eig = np.linalg.eigvalsh(H)
    exact = float(np.max(np.abs(eig)))
    hvp = torch_hvp_reusing(model, cross_entropy_loss, (x, y))
    est, err, vec = lanczos_top_eigenvalue(hvp, w.size, iters=60, tol=1e-8, rng=np.random.default_rng(0))
    assert abs(est - exact) <= err + 1e-9 * exact and err <= 1e-8 * est + 1e-12
    # stopped early, the estimate still lies within its (larger) stated error of an eigenvalue
    est3, err3, _ = lanczos_top_eigenvalue(hvp, w.size, iters=3, tol=0.0, rng=np.random.default_rng(0))
    assert np.min(np.abs(np.abs(eig) - est3)) <= err3 + 1e-9 and est3 <= exact + 1e-9
    # warm-started from the converged direction, one or two products suffice
    calls = []
    est_w, err_w, _ = lanczos_top_eigenvalue(lambda v: calls.append(1) or hvp(v), w.size, iters=60, tol=1e-4,
                                             rng=np.random.default_rng(5), start=vec)
    assert len(calls) <= 3 and abs(est_w - exact) <= err_w + 1e-9 * exact


def test_exact_probe_matches_the_sampled_one_where_both_are_exact():
    """Both methods give the same gradients, losses and dissimilarities; σ² differs only by the sampled
    estimator's Monte-Carlo error (checked above), and the Hessian by the iterations' tolerance."""
    model, x, y = _model_and_data(seed=7, n=30)
    clients = TorchClients(model, [(x[:10], y[:10]), (x[10:], y[10:])], cross_entropy_loss, batch_size=4)
    w = flat_params(model)
    kw = dict(sigma_samples=4000, sigma_rng=np.random.default_rng(0), hessian_batch=(x, y),
              hessian_rng=np.random.default_rng(0), hessian_iters=200, hessian_tol=1e-10)
    fast, g1 = probe_point(clients, w, method="exact", **kw)
    slow, g2 = probe_point(clients, w, method="sampled", **kw)
    assert np.allclose(g1, g2, rtol=1e-9)
    for k in ("loss", "grad_norm_sq", "client_grad_sq_mean", "zeta2_mean", "zeta2_max", "B_local"):
        assert fast[k] == pytest.approx(slow[k], rel=1e-9)
    assert fast["sigma2_mean"] == pytest.approx(slow["sigma2_mean"], rel=0.1)
    assert fast["L_hessian"] == pytest.approx(slow["L_hessian"], rel=1e-4)
    assert fast["L_hessian_err"] <= 1e-10 * fast["L_hessian"] + 1e-12


def _brute_per_sample(model, x, y):
    per = []
    for j in range(len(x)):
        model.zero_grad()
        F.cross_entropy(model(x[j:j + 1]), y[j:j + 1]).backward()
        per.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy().copy())
    return np.array(per)


def test_per_sample_pass_keeps_the_asked_gradients_in_order_across_chunks():
    """The kept rows are the per-sample gradients at the asked positions of the concatenated data, in the
    asked order, whichever chunk (of 4) and client (sizes 5, 1, 11) they fall in; the stats are unchanged."""
    model, x, y = _model_and_data(n=17)
    datasets = [(x[a:b], y[a:b]) for a, b in [(0, 5), (5, 6), (6, 17)]]
    keep = [16, 0, 5, 7, 3, 12]
    stats, rows = per_sample_pass(model, cross_entropy_loss, datasets, chunk=4, keep=keep)
    per = _brute_per_sample(model, x, y)
    assert rows.shape == (len(keep), per.shape[1]) and rows.dtype == torch.float32
    np.testing.assert_allclose(rows.numpy(), per[keep], rtol=1e-6, atol=1e-7)
    alone = per_sample_stats_many(model, cross_entropy_loss, datasets, chunk=4)
    for a, b in zip(stats, alone):
        assert a.sq_mean == pytest.approx(b.sq_mean, rel=1e-12) and np.allclose(a.grad, b.grad, rtol=1e-12)
    with pytest.raises(ConfigError, match="keep"):
        per_sample_pass(model, cross_entropy_loss, datasets, keep=[17])


def _exact_hessian(model, x, y):
    w = flat_params(model)

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        set_params, off = {}, 0
        for name, p in model.named_parameters():
            set_params[name] = flat[off:off + p.numel()].reshape(p.shape)
            off += p.numel()
        return F.cross_entropy(torch.func.functional_call(model, set_params, (x,)), y)

    return torch.autograd.functional.hessian(loss_of, torch.from_numpy(w)).numpy()


@pytest.mark.parametrize("seed", [3, 11])
def test_lanczos_from_the_fisher_start_meets_its_stopping_rule_and_its_stated_error_holds(seed):
    """The default probe's estimator: Lanczos from the empirical Fisher's top direction, stopped once the
    residual bound is at most 1e-2 of the estimate.  Against the exact Hessian: the bound was met, the
    estimate lies within it of an eigenvalue, and (a Ritz value) at most the top one."""
    model, x, y = _model_and_data(seed=seed, n=40)
    eig = np.linalg.eigvalsh(_exact_hessian(model, x, y))
    exact = float(np.max(np.abs(eig)))
    _, rows = per_sample_pass(model, cross_entropy_loss, [(x, y)], keep=range(40))
    start = fisher_top_direction(rows, rng=np.random.default_rng(0))
    hvp = torch_hvp_reusing(model, cross_entropy_loss, (x, y))
    est, err, _ = lanczos_top_eigenvalue(hvp, eig.size, iters=60, tol=1e-2, rng=np.random.default_rng(1), start=start)
    assert err <= 1e-2 * est
    assert np.min(np.abs(np.abs(eig) - est)) <= err + 1e-12
    assert est <= exact * (1 + 1e-9) and est >= exact - err


def test_probe_point_gives_the_same_hessian_from_every_start_within_the_stated_errors():
    """Only the start differs between "fisher", "previous" and "random": every estimate lies within its
    stated error of the exact top eigenvalue, and σ², gradients and losses are identical."""
    model, x, y = _model_and_data(seed=5, n=30)
    exact = float(np.max(np.abs(np.linalg.eigvalsh(_exact_hessian(model, x, y)))))
    clients = TorchClients(model, [(x[:12], y[:12]), (x[12:], y[12:])], cross_entropy_loss, batch_size=4)
    w = flat_params(model)
    rows = {}
    for start in ("fisher", "previous", "random"):
        rows[start], _ = probe_point(clients, w, sigma_samples=1, sigma_rng=np.random.default_rng(0),
                                     hessian_batch=(x, y), hessian_rng=np.random.default_rng(0), hessian_iters=60,
                                     hessian_tol=1e-3, hessian_rows=list(range(30)), hessian_start=start)
        r = rows[start]
        assert abs(r["L_hessian"] - exact) <= r["L_hessian_err"] + 1e-9 * exact
        assert r["L_hessian_err"] <= 1e-3 * r["L_hessian"]
    for k in ("loss", "grad_norm_sq", "zeta2_max", "sigma2_max", "sigma2_mean"):
        assert rows["fisher"][k] == rows["random"][k] == rows["previous"][k]
    with pytest.raises(ConfigError, match="hessian_start"):
        probe_point(clients, w, sigma_samples=1, sigma_rng=np.random.default_rng(0), hessian_batch=(x, y),
                    hessian_rng=np.random.default_rng(0), hessian_start="best")
