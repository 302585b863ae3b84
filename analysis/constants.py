"""Theory constants with provenance: *certified* (a closed form or a proven bound, read from the data) or
*estimated* (measured along the run's iterates: a lower estimate of the uniform bound a theorem assumes).

The theorems assume uniform bounds (sup over the domain, max over clients).  A probe sees the global model
at a few iterates only, so its L, σ² and ζ² are lower estimates, and F(w_0) − min_t F(w_t) is a lower
estimate of the gap F(w_0) − F*.  A bound evaluated on lower estimates is itself smaller than the theorem's:
a measurement above it is no refutation, and a step-size condition met by it is not proven.  This module
gives the constants that *are* known, from the run's own data:

* **Smoothness of a linear model** (``model: linear`` or ``logreg``), per client, as the theorems state
  it (each F_i is L-smooth, L = max_i L_i):

  - squared loss ½·mean_j (x_jᵀw − y_j)² (task ``regression``): ∇²F_i = X_iᵀX_i / n_i exactly, so
    L_i = λ_max(X_iᵀX_i / n_i);
  - softmax cross-entropy (task ``classification``): with x̃ = (x, 1) when the model has a bias, the
    per-sample Hessian in the parameters (W, b) is (diag p − ppᵀ) ⊗ x̃x̃ᵀ (Böhning 1992, "Multinomial
    logistic regression algorithm", Ann. Inst. Statist. Math. 44; Bishop, PRML §4.3.4).  Since
    0 ≼ diag p − ppᵀ ≼ ½ I (Gershgorin: row k's diagonal p_k(1 − p_k) plus its off-diagonal
    p_k Σ_{j≠k} p_j is 2 p_k(1 − p_k) ≤ ½), and the Kronecker product of PSD matrices is PSD, the mean over
    client i's samples satisfies ∇²F_i ≼ ½ I ⊗ X̃_iᵀX̃_i / n_i, so L_i ≤ ½ λ_max(X̃_iᵀX̃_i / n_i) — an
    upper bound valid at every w;
  - weight decay λ (``train.weight_decay``) adds λ‖w‖²/2 to each F_i and λ to L_i.

* **F***: F* ≥ 0 for cross-entropy and squared losses (both are non-negative), so F(w_0) − 0 is an upper
  bound of the gap; for least squares with a linear model, F* = min_w (1/m) Σ_i F_i(w) exactly (normal
  equations, uniform client weights as in the theorems' f = (1/m) Σ F_i).

* **σ² = 0** when every local step takes the client's whole data (``train.batch_size`` ≥ n_i: one batch is
  a permutation of all samples, so the stochastic gradient is the full gradient).

* **ζ²** (max_i sup_w ‖∇F_i − ∇F‖²) for least squares when every client's Hessian is the same (to 1e-6 of
  L: the float32 storage of the data is the only departure): ∇F_i − ∇F is then constant in w and ζ² is its
  largest squared norm.  With different Hessians the deviation grows with ‖w‖ and ζ² is unbounded: the
  probe's value along the run stays an estimate.

Everything else (a network's smoothness, σ² of minibatches, ζ² of non-quadratic losses) is estimated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

CERTIFIED = "certified"
ESTIMATED = "estimated"

#: the models whose smoothness follows from the data (one linear block)
LINEAR_MODELS = ("linear", "logreg")
#: relative tolerance under which client Hessians count as equal (float32 data: ~1e-7 relative error)
EQUAL_HESSIANS_RTOL = 1e-6


@dataclass(frozen=True)
class Constant:
    """A theory constant, where it came from, and why it is what it is."""

    value: float
    provenance: str  # CERTIFIED or ESTIMATED
    note: str = ""
    #: a certified value that is the constant itself (least squares' Hessian), not only an upper bound of it
    #: (cross-entropy's ½λ_max): a condition that fails at an upper bound is not proven to fail
    exact: bool = False

    @property
    def certified(self) -> bool:
        return self.provenance == CERTIFIED


def _grams(x: np.ndarray, parts: Sequence[np.ndarray], bias: bool) -> list[np.ndarray]:
    """X̃_iᵀX̃_i / n_i per client (float64), with a column of ones when ``bias``."""
    out = []
    for idx in parts:
        xi = x[np.asarray(idx, dtype=np.int64)].reshape(len(idx), -1).astype(np.float64)
        if bias:
            xi = np.hstack([xi, np.ones((xi.shape[0], 1))])
        out.append(xi.T @ xi / max(1, xi.shape[0]))
    return out


def smoothness_linear(x: np.ndarray, parts: Sequence[np.ndarray], *, task: str, bias: bool,
                      weight_decay: float = 0.0) -> Constant:
    """L = max_i L_i of a linear model on each client's data: λ_max(X_iᵀX_i/n_i) for the squared loss,
    ½ λ_max(X̃_iᵀX̃_i/n_i) for softmax cross-entropy (see the module docstring), plus the weight decay."""
    grams = _grams(x, parts, bias)
    lam = max(float(np.linalg.eigvalsh(g)[-1]) for g in grams)
    if task == "regression":
        return Constant(lam + weight_decay, CERTIFIED, exact=True, note=
                        "max over clients of lambda_max(X_i^T X_i / n_i) (the squared loss's exact Hessian)"
                        + (f" + weight decay {weight_decay:g}" if weight_decay else ""))
    return Constant(0.5 * lam + weight_decay, CERTIFIED,
                    "max over clients of lambda_max(X~_i^T X~_i / n_i) / 2 (softmax cross-entropy's Hessian "
                    "(diag p - pp^T) x x~x~^T, diag p - pp^T <= I/2" + (", bias column included" if bias else "")
                    + ")" + (f" + weight decay {weight_decay:g}" if weight_decay else ""))


def least_squares(x: np.ndarray, y: np.ndarray, parts: Sequence[np.ndarray]
                  ) -> tuple[float, float | None, float]:
    """(F*, ζ² or None, L) of f = (1/m) Σ_i ½·mean_j (x_jᵀw − y_j)² over the clients' rows: F* from the normal
    equations; ζ² = max_i ‖∇F_i − ∇F‖² when every client's Hessian is the same (else None: unbounded)."""
    a, b, c = [], [], []
    for idx in parts:
        idx = np.asarray(idx, dtype=np.int64)
        xi = x[idx].reshape(len(idx), -1).astype(np.float64)
        yi = y[idx].reshape(len(idx)).astype(np.float64)
        a.append(xi.T @ xi / len(idx))
        b.append(xi.T @ yi / len(idx))
        c.append(float(yi @ yi) / len(idx))
    a_bar, b_bar = np.mean(a, axis=0), np.mean(b, axis=0)
    w = np.linalg.lstsq(a_bar, b_bar, rcond=None)[0]
    f_star = float(np.mean([0.5 * (w @ ai @ w) - bi @ w + 0.5 * ci for ai, bi, ci in zip(a, b, c)]))
    L = max(float(np.linalg.eigvalsh(ai)[-1]) for ai in a)
    spread = max(float(np.linalg.norm(ai - a_bar, 2)) for ai in a)
    zeta2 = None
    if spread <= EQUAL_HESSIANS_RTOL * max(L, 1e-300):
        dev = [(ai - a_bar) @ w - (bi - b_bar) for ai, bi in zip(a, b)]
        zeta2 = float(max(d @ d for d in dev))
    return max(f_star, 0.0), zeta2, L


def certified_constants(scenario: Any, prepared: Any) -> dict[str, Constant]:
    """The constants of the local-SGD theorems that the run's data certify (keys ``L``, ``F_star``,
    ``sigma2``, ``zeta2``; a key is absent where nothing is certified).  ``scenario``: the run's
    :class:`fedsim.Scenario`; ``prepared``: :func:`fedsim.build.prepare_data` of it."""
    out: dict[str, Constant] = {}
    train = prepared.data.train
    task = getattr(train, "task", "classification")
    if task in ("classification", "regression"):
        out["F_star"] = Constant(0.0, CERTIFIED, "F* >= 0: the loss (cross-entropy or squared error) is non-negative")
    parts = [np.asarray(p, dtype=np.int64) for p in prepared.parts]
    if parts and min(len(p) for p in parts) > 0 and scenario.train.batch_size >= max(len(p) for p in parts):
        out["sigma2"] = Constant(0.0, CERTIFIED, f"every local step takes the client's whole data (batch_size "
                                                 f"{scenario.train.batch_size} >= {max(len(p) for p in parts)} "
                                                 "samples): the stochastic gradient is the full gradient")
    model = str(scenario.model.name)
    if model not in LINEAR_MODELS or task not in ("classification", "regression"):
        return out
    x = train.x.detach().cpu().numpy()
    wd = float(scenario.train.weight_decay or 0.0)
    out["L"] = smoothness_linear(x, parts, task=task, bias=model == "logreg", weight_decay=wd)
    if task == "regression" and model == "linear" and wd == 0.0:
        y = train.y.detach().cpu().numpy()
        f_star, zeta2, _ = least_squares(x, y, parts)
        out["F_star"] = Constant(f_star, CERTIFIED, "min of (1/m) sum_i F_i from the normal equations (least squares)",
                                 exact=True)
        if zeta2 is not None:
            out["zeta2"] = Constant(zeta2, CERTIFIED, "the clients' Hessians are equal, so grad F_i - grad F is "
                                                      "constant: its largest squared norm", exact=True)
    return out


def as_json(constants: Mapping[str, Constant]) -> dict[str, dict[str, Any]]:
    """The constants as a JSON object {key: {value, provenance, note}} (``measured.json``'s ``certified``)."""
    return {k: {"value": c.value, "provenance": c.provenance, "note": c.note, "exact": c.exact}
            for k, c in constants.items()}
