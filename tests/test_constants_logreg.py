"""The certified smoothness of softmax (multinomial logistic) regression, analysis.constants.smoothness_linear:
L = max over clients of ½ λ_max(X̃_iᵀX̃_i / n_i) (X̃ with the bias column), held against the largest eigenvalue
of the numeric Hessian of each client's mean cross-entropy on small data.

Known truths: the bound is never below the numeric Hessian at any w; at w = 0 with two classes (p = ½, ½) it is
attained exactly, so the sigmoid parametrisation's quarter of λ_max would be too small for fedsim's softmax
``logreg`` (a deliberately wrong constant this test catches); at w = 0 with C classes the Hessian's top
eigenvalue is λ_max / C (diag p − ppᵀ = I/C − 11ᵀ/C², top eigenvalue 1/C)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from analysis.constants import smoothness_linear


def _hessian_top(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    """Largest eigenvalue of the Hessian of mean_j CE(W x_j + b, y_j) in (W, b), by autograd (float64)."""
    xt, yt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.int64)
    c, d = w.shape

    def loss(theta: torch.Tensor) -> torch.Tensor:
        W, bb = theta[: c * d].view(c, d), theta[c * d:]
        return F.cross_entropy(xt @ W.T + bb, yt)

    theta = torch.as_tensor(np.concatenate([w.ravel(), b]), dtype=torch.float64)
    h = torch.autograd.functional.hessian(loss, theta)
    return float(torch.linalg.eigvalsh(h)[-1])


def _data(seed: int, classes: int):
    rng = np.random.default_rng(seed)
    # three clients of different sizes and scales: the per-client maximum is not the global F's smoothness
    xs = [rng.normal(size=(n, 3)) * s for n, s in ((6, 1.0), (9, 2.5), (5, 0.5))]
    x = np.vstack(xs).astype(np.float32)
    y = rng.integers(0, classes, size=len(x))
    bounds = np.cumsum([0] + [len(a) for a in xs])
    parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(xs))]
    return x, y, parts


def _gram_top(x: np.ndarray) -> float:
    xb = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    return float(np.linalg.eigvalsh(xb.T @ xb / len(x))[-1])


@pytest.mark.parametrize("classes", [2, 3, 5])
def test_the_certified_bound_is_above_the_numeric_hessian_everywhere(classes):
    x, y, parts = _data(0, classes)
    L = smoothness_linear(x, parts, task="classification", bias=True)
    assert L.certified and not L.exact
    per_client = [0.5 * _gram_top(x[p]) for p in parts]
    assert L.value == pytest.approx(max(per_client), rel=1e-12)  # ½ λ_max, max over clients
    rng = np.random.default_rng(1)
    worst = 0.0
    for scale in (0.0, 0.1, 1.0, 5.0):
        for _ in range(8):
            w, b = rng.normal(size=(classes, 3)) * scale, rng.normal(size=classes) * scale
            for p, bound in zip(parts, per_client):
                top = _hessian_top(x[p], y[p], w, b)
                assert top <= bound * (1 + 1e-9), (scale, top, bound)
                worst = max(worst, top)
    assert worst <= L.value * (1 + 1e-9)


def test_two_classes_at_zero_attain_the_half_so_a_quarter_would_be_wrong():
    x, y, parts = _data(2, 2)
    L = smoothness_linear(x, parts, task="classification", bias=True)
    tops = [_hessian_top(x[p], y[p], np.zeros((2, 3)), np.zeros(2)) for p in parts]
    for p, top in zip(parts, tops):
        assert top == pytest.approx(0.5 * _gram_top(x[p]), rel=1e-9)  # attained: the bound is tight
        assert 0.25 * _gram_top(x[p]) < top  # the sigmoid's quarter is below the softmax Hessian
    assert L.value == pytest.approx(max(tops), rel=1e-9)
    # the global objective (1/m) sum F_i is smoother than the worst client: the theorems need the latter
    global_top = _hessian_top(x, y, np.zeros((2, 3)), np.zeros(2))
    assert global_top < L.value


def test_c_classes_at_zero_give_lambda_max_over_c():
    x, y, parts = _data(3, 4)
    for p in parts:
        assert _hessian_top(x[p], y[p], np.zeros((4, 3)), np.zeros(4)) == pytest.approx(_gram_top(x[p]) / 4, rel=1e-9)


def test_weight_decay_adds_its_coefficient():
    x, y, parts = _data(0, 3)
    plain = smoothness_linear(x, parts, task="classification", bias=True).value
    assert smoothness_linear(x, parts, task="classification", bias=True, weight_decay=0.01).value == \
        pytest.approx(plain + 0.01, rel=1e-12)
