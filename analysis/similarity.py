"""Representation similarity: CCA, SVCCA, PWCCA and CKA, written from their definitions.

Orientation
-----------
Every function takes two activation matrices of the *same inputs* and, by default, reads them as
``(examples, features)``: row ``j`` is the representation of input ``j``, column ``k`` is one neuron
(``orientation="examples_first"``).  Pass ``orientation="features_first"`` for ``(features, examples)``
arrays, the layout of the google/svcca code.  The two inputs may have different numbers of features but
must have the same number of examples.  Activations with more than two axes (e.g. conv maps
``(N, C, H, W)``) must first be turned into a matrix with :func:`flatten_activations`.

Definitions
-----------
* CCA (Hotelling 1936): after centring each feature, the canonical correlations ρ₁ ≥ ρ₂ ≥ … are the
  cosines of the principal angles between the column spaces of X and Y, i.e. the singular values of
  Q_xᵀQ_y for orthonormal bases Q_x, Q_y of those spaces.
* SVCCA (Raghu et al. 2017): keep the top singular directions of each centred matrix (a fixed number,
  or enough to explain a variance fraction), then average the canonical correlations of the reduced
  matrices.
* PWCCA (Morcos et al. 2018): canonical correlations averaged with weights equal to how much of the
  original neurons each canonical direction accounts for; implemented exactly as the authors' code
  (google/svcca ``compute_pwcca``), whose directions and weights differ from the paper's prose (see
  :func:`pwcca`).
* CKA (Kornblith et al. 2019): HSIC(K, L)/sqrt(HSIC(K, K)·HSIC(L, L)) for Gram matrices K, L of the two
  representations; the debiased variant uses the U-statistic HSIC estimator (Song et al. 2012,
  Székely & Rizzo 2014).
"""
from __future__ import annotations

import itertools
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from fedsim.errors import ConfigError

ORIENTATIONS = ("examples_first", "features_first")


# ----------------------------------------------------------------------------- input handling

def _as_matrix(a: np.ndarray, orientation: str, name: str) -> np.ndarray:
    if orientation not in ORIENTATIONS:
        raise ConfigError("orientation", f"unknown orientation {orientation!r} (allowed: {', '.join(ORIENTATIONS)})")
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ConfigError(name, f"expected a 2-D activation matrix, got shape {a.shape} "
                                "(use flatten_activations for conv maps)")
    if not np.all(np.isfinite(a)):
        raise ConfigError(name, "activations contain NaN or inf")
    return a.T if orientation == "features_first" else a


def _pair(x: np.ndarray, y: np.ndarray, orientation: str) -> tuple[np.ndarray, np.ndarray]:
    x = _as_matrix(x, orientation, "X")
    y = _as_matrix(y, orientation, "Y")
    if x.shape[0] != y.shape[0]:
        raise ConfigError("Y", f"has {y.shape[0]} examples but X has {x.shape[0]}; both must describe the same inputs")
    return x, y


def flatten_activations(acts: np.ndarray, conv: str = "pool") -> np.ndarray:
    """Turn an ``(N, C, *spatial)`` activation tensor into an ``(examples, features)`` matrix.

    ``conv="pool"`` averages over the spatial axes (one row per input, one column per channel);
    ``conv="positions"`` treats every spatial position as an example (``(N·H·W, C)``), as the google/svcca
    tutorial does for conv layers; ``conv="flatten"`` keeps every (channel, position) as a feature.
    2-D inputs are returned unchanged.
    """
    a = np.asarray(acts, dtype=np.float64)
    if a.ndim <= 2:
        return a.reshape(a.shape[0], -1) if a.ndim == 2 else a.reshape(-1, 1)
    if conv == "pool":
        return a.reshape(a.shape[0], a.shape[1], -1).mean(axis=2)
    if conv == "positions":
        return np.moveaxis(a.reshape(a.shape[0], a.shape[1], -1), 1, 2).reshape(-1, a.shape[1])
    if conv == "flatten":
        return a.reshape(a.shape[0], -1)
    raise ConfigError("conv", f"unknown conv reduction {conv!r} (allowed: pool, positions, flatten)")


def _orth_basis(a: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis of the column space of a centred matrix (numerically rank-revealing SVD)."""
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    if s.size == 0 or s[0] == 0.0:
        return u[:, :0]
    rank = int(np.sum(s > rtol * s[0]))
    return u[:, :rank]


# ----------------------------------------------------------------------------- CCA family

def cca(x: np.ndarray, y: np.ndarray, *, epsilon: float = 0.0,
        orientation: str = "examples_first") -> np.ndarray:
    """Canonical correlations of X and Y, sorted descending.

    With ``epsilon == 0`` the correlations are the singular values of Q_xᵀQ_y (orthonormal bases of the
    centred column spaces), and ``min(rank X, rank Y)`` values are returned: directions in which a matrix
    has no variance have no canonical correlation.  With ``epsilon > 0`` the covariance blocks are
    ridge-regularised, Σxx + εI and Σyy + εI, before whitening (after scaling each block by its largest
    absolute entry, as the reference svcca code does), and ``min(p, q)`` values are returned.
    """
    x, y = _pair(x, y, orientation)
    xc = x - x.mean(axis=0)
    yc = y - y.mean(axis=0)
    if epsilon < 0:
        raise ConfigError("epsilon", f"must be >= 0, got {epsilon}")
    if epsilon == 0.0:
        qx, qy = _orth_basis(xc), _orth_basis(yc)
        if qx.shape[1] == 0 or qy.shape[1] == 0:
            return np.zeros(0)
        rho = np.linalg.svd(qx.T @ qy, compute_uv=False)
        return np.clip(rho, 0.0, 1.0)
    n = x.shape[0]
    sxx, syy, sxy = xc.T @ xc / (n - 1), yc.T @ yc / (n - 1), xc.T @ yc / (n - 1)
    mx, my = max(np.abs(sxx).max(), 1e-300), max(np.abs(syy).max(), 1e-300)
    sxx, syy, sxy = sxx / mx, syy / my, sxy / np.sqrt(mx * my)

    def inv_sqrt(s: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(s + epsilon * np.eye(s.shape[0]))
        return (v / np.sqrt(np.maximum(w, 1e-300))) @ v.T

    rho = np.linalg.svd(inv_sqrt(sxx) @ sxy @ inv_sqrt(syy), compute_uv=False)
    return np.clip(rho, 0.0, 1.0)


def _n_keep(s: np.ndarray, keep: int | float, name: str) -> int:
    if isinstance(keep, (bool, np.bool_)):
        raise ConfigError("keep", f"must be an int (directions) or a float in (0, 1] (variance fraction), got {keep!r}")
    if isinstance(keep, (int, np.integer)):
        if keep < 1:
            raise ConfigError("keep", f"number of directions must be >= 1, got {keep}")
        return int(min(keep, s.size))
    keep = float(keep)
    if not 0.0 < keep <= 1.0:
        raise ConfigError("keep", f"variance fraction must lie in (0, 1], got {keep}")
    var = s**2
    total = var.sum()
    if total == 0.0:
        raise ConfigError(name, "activations have zero variance")
    frac = np.cumsum(var) / total
    return int(min(np.searchsorted(frac, keep - 1e-12) + 1, s.size))


def svd_reduce(a: np.ndarray, keep: int | float = 0.99, *, orientation: str = "examples_first",
               name: str = "X") -> np.ndarray:
    """Centre ``a`` and project it on its top singular directions: ``U_k diag(s_k)`` (examples × k).

    ``keep`` is either the number of directions (int) or the fraction of variance (sum of squared
    singular values) to retain (float in (0, 1]); the smallest k reaching the fraction is used.
    """
    a = _as_matrix(a, orientation, name)
    ac = a - a.mean(axis=0)
    u, s, _ = np.linalg.svd(ac, full_matrices=False)
    k = _n_keep(s, keep, name)
    return u[:, :k] * s[:k]


def svcca(x: np.ndarray, y: np.ndarray, *, keep: int | float = 0.99, epsilon: float = 0.0,
          orientation: str = "examples_first") -> float:
    """SVCCA similarity: mean canonical correlation of the SVD-reduced representations.

    The SVD step makes the result invariant to orthogonal transforms and isotropic scaling of either
    input; it is invariant to *every* invertible linear map only when no direction is dropped (``keep=1.0``
    or ``keep >= rank``), because truncation depends on the singular spectrum.  EmbracingFL keeps the top
    4 directions (``keep=4``); the original paper keeps 99% of the variance (the default).
    """
    x, y = _pair(x, y, orientation)
    xr = svd_reduce(x, keep, name="X")
    yr = svd_reduce(y, keep, name="Y")
    rho = cca(xr, yr, epsilon=epsilon)
    return float(rho.mean()) if rho.size else 0.0


def pwcca(x: np.ndarray, y: np.ndarray, *, epsilon: float = 0.0,
          orientation: str = "examples_first") -> float:
    """Projection-weighted CCA (Morcos et al. 2018), exactly as google/svcca's ``compute_pwcca`` defines it.

    With features-first matrices A (p × n) and B (q × n) and the side with fewer neurons (A on a tie):

    1. covariances from ``np.cov``; Σxx, Σyy scaled by their largest absolute entry, Σxy by the root of
       both; ``epsilon`` added to the diagonals; whitening by the square root of the pseudo-inverse;
       ``U S Vᵀ = svd(Σxx^-½ Σxy Σyy^-½)``; ρ = S (``min(p, q)`` values, descending).
    2. directions: ``D = Uᵀ (A − mean_A) + mean_A`` (the rotation Uᵀ is applied to the centred *raw*
       activations, not to the whitened ones, and each row gets the neuron mean of the same index back);
       for B's side, ``D = V (B − mean_B) + mean_B``.
    3. ``P = qr(Dᵀ)``: orthonormalised directions, in the order of ρ.
    4. weights ``α_i ∝ Σ_j |⟨P_i, a_j⟩|`` over the *uncentred* neurons a_j of that side, normalised to 1;
       PWCCA = Σ_i α_i ρ_i.

    Where the reference cannot run: its second branch (A has more neurons than B) indexes A with B's
    neuron mask and fails for p ≠ q; here the inputs are then swapped, so the value is the reference's
    ``compute_pwcca(B, A)`` and ``pwcca(x, y) == pwcca(y, x)``.  (Swapping matters: adding the means back
    in step 2 makes the result depend on the signs the SVD gives the directions, so the computation is
    done in the reference's order.)  Neurons with variance below ``epsilon`` are dropped as the
    reference does; negative eigenvalues from round-off are clipped to 0 before the square root.
    """
    x, y = _pair(x, y, orientation)
    if epsilon < 0:
        raise ConfigError("epsilon", f"must be >= 0, got {epsilon}")
    a, b = x.T, y.T                                        # features first, as the reference
    if b.shape[0] < a.shape[0]:  # the reference's working branch: the side with fewer neurons first
        a, b = b, a
    p = a.shape[0]
    cov = np.cov(a, b)
    sxx, sxy, syy = cov[:p, :p].copy(), cov[:p, p:].copy(), cov[p:, p:].copy()
    xmax, ymax = np.abs(sxx).max(), np.abs(syy).max()
    if xmax == 0.0 or ymax == 0.0:
        return 0.0
    sxx, syy, sxy = sxx / xmax, syy / ymax, sxy / np.sqrt(xmax * ymax)
    xi, yi = np.abs(np.diag(sxx)) >= epsilon, np.abs(np.diag(syy)) >= epsilon
    if not xi.any() or not yi.any():
        return 0.0
    sxx, syy, sxy = sxx[xi][:, xi], syy[yi][:, yi], sxy[xi][:, yi]
    sxx = sxx + epsilon * np.eye(sxx.shape[0])
    syy = syy + epsilon * np.eye(syy.shape[0])

    def invsqrt(m: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(np.linalg.pinv(m))
        return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T

    u, rho, vt = np.linalg.svd(invsqrt(sxx) @ sxy @ invsqrt(syy))
    rho = np.abs(rho)
    if xi.sum() <= yi.sum():
        side, idx, rot = a, xi, u.T
    else:
        side, idx, rot = b, yi, vt
    acts = side[idx]
    mean = acts.mean(axis=1, keepdims=True)
    dirns = rot @ (acts - mean) + mean
    q, _ = np.linalg.qr(dirns.T)
    weights = np.abs(q.T @ acts.T).sum(axis=1)
    if weights.sum() == 0:
        return 0.0
    weights = weights / weights.sum()
    return float(np.sum(weights * rho[: weights.size]))


def expected_random_cca(p: int, q: int, n: int, *, squared: bool = False) -> float:
    """Mean canonical correlation of two *independent* Gaussian representations (the chance level).

    X (n × p) and Y (n × q) with i.i.d. rows: after centring, the squared canonical correlations are the
    eigenvalues of a Jacobi (MANOVA) ensemble whose empirical distribution tends, for p/n' → c₁,
    q/n' → c₂ (n' = n − 1, p ≤ q, p + q < n'), to Wachter's law with density

        f(x) = sqrt((x − a)(b − x)) / (2π c₁ x (1 − x)),   a, b = (sqrt(c₂(1 − c₁)) ∓ sqrt(c₁(1 − c₂)))².

    Returns ∫ sqrt(x) f(x) dx (mean ρ), or ∫ x f(x) dx = q/n' when ``squared`` — the latter is exact at
    every finite size, since E tr(P_X P_Y) = pq/n' for independent uniformly oriented subspaces.
    The same value is the chance level of SVCCA with k kept directions (use p = q = k): the top-k
    subspace of a Gaussian matrix is uniformly oriented.
    """
    p, q = sorted((int(p), int(q)))
    n_eff = int(n) - 1
    if p < 1:
        raise ConfigError("p", f"must be >= 1, got {p}")
    if p + q >= n_eff:
        raise ConfigError("n", f"need p + q < n - 1 for a continuous Wachter law, got p={p}, q={q}, n={n}")
    c1, c2 = p / n_eff, q / n_eff
    if squared:
        return c2
    a = (np.sqrt(c2 * (1 - c1)) - np.sqrt(c1 * (1 - c2))) ** 2
    b = (np.sqrt(c2 * (1 - c1)) + np.sqrt(c1 * (1 - c2))) ** 2

    def integrand(theta: float) -> float:
        # x = a + (b − a) sin²θ removes the square-root singularities at both edges.
        s, c = np.sin(theta), np.cos(theta)
        xv = a + (b - a) * s * s
        return np.sqrt(xv) * (b - a) ** 2 * s * s * c * c / (xv * (1 - xv)) / (np.pi * c1)

    from scipy import integrate  # only here: importing scipy costs every `fedsim check` about half a second

    val, _ = integrate.quad(integrand, 0.0, np.pi / 2, limit=200)
    return float(val)


# ----------------------------------------------------------------------------- CKA family

def gram_linear(x: np.ndarray, *, orientation: str = "examples_first") -> np.ndarray:
    """Linear-kernel Gram matrix X Xᵀ (examples × examples)."""
    x = _as_matrix(x, orientation, "X")
    return x @ x.T


def gram_rbf(x: np.ndarray, threshold: float = 1.0, *, orientation: str = "examples_first") -> np.ndarray:
    """RBF Gram matrix exp(−‖x_i − x_j‖² / (2σ²)) with σ² = threshold² × median squared distance.

    The median is taken over all n² entries of the squared-distance matrix (zero diagonal included), the
    bandwidth rule of Kornblith et al.'s reference notebook, so golden values carry over.
    """
    if threshold <= 0:
        raise ConfigError("threshold", f"must be > 0, got {threshold}")
    x = _as_matrix(x, orientation, "X")
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    med = np.median(d2)
    if med == 0.0:
        raise ConfigError("X", "median squared distance is zero; RBF bandwidth undefined")
    return np.exp(-d2 / (2.0 * threshold**2 * med))


def center_gram(gram: np.ndarray, unbiased: bool = False) -> np.ndarray:
    """Centre a Gram matrix.

    Biased: H K H with H = I − 11ᵀ/n.  Unbiased: the U-centring of Székely & Rizzo (2014): with the
    diagonal of K zeroed, K̃_ij = K_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) for i ≠ j, 0 on the
    diagonal (r = row sums, s = total); ⟨K̃, L̃⟩/(n(n−3)) is the unbiased HSIC estimator.
    """
    k = np.array(gram, dtype=np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ConfigError("gram", f"must be square, got shape {k.shape}")
    n = k.shape[0]
    if not unbiased:
        rm = k.mean(axis=1, keepdims=True)
        cm = k.mean(axis=0, keepdims=True)
        return k - rm - cm + k.mean()
    if n < 4:
        raise ConfigError("gram", f"unbiased centring needs at least 4 examples, got {n}")
    np.fill_diagonal(k, 0.0)
    r = k.sum(axis=1)
    c = k.sum(axis=0)
    s = k.sum()
    out = k - r[:, None] / (n - 2) - c[None, :] / (n - 2) + s / ((n - 1) * (n - 2))
    np.fill_diagonal(out, 0.0)
    return out


def cka(gram_x: np.ndarray, gram_y: np.ndarray, debiased: bool = False) -> float:
    """CKA of two Gram matrices: ⟨K̃, L̃⟩_F / (‖K̃‖_F ‖L̃‖_F) after (un)biased centring."""
    kx = center_gram(gram_x, unbiased=debiased)
    ky = center_gram(gram_y, unbiased=debiased)
    num = float(np.sum(kx * ky))
    den = float(np.linalg.norm(kx) * np.linalg.norm(ky))
    return num / den if den > 0 else 0.0


def linear_cka(x: np.ndarray, y: np.ndarray, debiased: bool = False, *,
               orientation: str = "examples_first") -> float:
    """Linear CKA.  The biased form uses the feature-space identity ‖YᵀX‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F) on
    centred features (cheap when examples ≫ features); the debiased form goes through Gram matrices."""
    x, y = _pair(x, y, orientation)
    if debiased:
        return cka(x @ x.T, y @ y.T, debiased=True)
    xc = x - x.mean(axis=0)
    yc = y - y.mean(axis=0)
    num = np.linalg.norm(yc.T @ xc) ** 2
    den = np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc)
    return float(num / den) if den > 0 else 0.0


def rbf_cka(x: np.ndarray, y: np.ndarray, threshold: float = 1.0, debiased: bool = False, *,
            orientation: str = "examples_first") -> float:
    """CKA with RBF kernels (bandwidth rule of :func:`gram_rbf`)."""
    x, y = _pair(x, y, orientation)
    return cka(gram_rbf(x, threshold), gram_rbf(y, threshold), debiased=debiased)


# ----------------------------------------------------------------------------- layer-wise tables

SimilarityFn = Callable[[np.ndarray, np.ndarray], float]


def layer_similarity_matrix(acts_a: Mapping[str, np.ndarray], acts_b: Mapping[str, np.ndarray],
                            fn: SimilarityFn = linear_cka) -> pd.DataFrame:
    """Similarity of every layer of model A with every layer of model B (rows: A's layers, columns: B's).

    Activations are ``(examples, features)`` matrices on the same probe inputs; higher-rank arrays are
    flattened per example.
    """
    rows = {}
    for la, xa in acts_a.items():
        xa2 = flatten_activations(xa, "flatten")
        rows[la] = {lb: fn(xa2, flatten_activations(xb, "flatten")) for lb, xb in acts_b.items()}
    return pd.DataFrame.from_dict(rows, orient="index")[list(acts_b.keys())]


def max_pairwise_svcca(acts_per_client: Sequence[Mapping[str, np.ndarray]], *, keep: int | float = 4,
                       batch_size: int | None = None, conv: str = "pool") -> pd.Series:
    """EmbracingFL's diagnostic: per layer, the maximum SVCCA over all pairs of clients.

    As in EmbracingFL (App. 6.3): every client model sees the same validation inputs; per pair and layer,
    SVCCA keeps the top 4 singular directions of each activation matrix and averages the CCA
    coefficients; the validation set is processed in batches of ``batch_size`` examples (consecutive
    slices; a trailing partial batch with no more than ``keep`` examples is dropped) and the SVCCA values
    of the batches are averaged; the reported value is the maximum over pairs.  Conv maps are
    global-average-pooled by default (the paper does not say; see :func:`flatten_activations`).
    """
    if len(acts_per_client) < 2:
        raise ConfigError("acts_per_client", f"need at least 2 clients, got {len(acts_per_client)}")
    layers = list(acts_per_client[0].keys())
    for i, acts in enumerate(acts_per_client):
        if list(acts.keys()) != layers:
            raise ConfigError(f"acts_per_client[{i}]", f"layers {list(acts.keys())} differ from client 0's {layers}")
    out = {}
    for layer in layers:
        mats = [flatten_activations(acts[layer], conv) for acts in acts_per_client]
        n = mats[0].shape[0]
        bs = n if batch_size is None else int(batch_size)
        if bs < 2:
            raise ConfigError("batch_size", f"must be >= 2, got {batch_size}")
        slices = [slice(s, min(s + bs, n)) for s in range(0, n, bs)]
        min_rows = keep + 1 if isinstance(keep, (int, np.integer)) else 2
        slices = [s for s in slices if s.stop - s.start >= min_rows] or [slice(0, n)]
        best = -np.inf
        for a, b in itertools.combinations(range(len(mats)), 2):
            val = float(np.mean([svcca(mats[a][s], mats[b][s], keep=keep) for s in slices]))
            best = max(best, val)
        out[layer] = best
    return pd.Series(out, name="max_pairwise_svcca")
