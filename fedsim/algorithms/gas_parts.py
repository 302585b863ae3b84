"""Per-label Gaussian model of split-layer activations (GAS, "generative activations").

GAS keeps one Gaussian ``N(mu_y, Sigma_y)`` per label over the flattened activations the server has
received, updated with an increasing time weight ``s(n)`` so that recent activations (produced by a
more trained client model) count more. Before each server step it samples synthetic activations for
labels that are under-represented in the activation buffer, which shrinks the straggler bias of the
server-side gradient (Lemma 1, see :func:`lemma1_shrink_factor`).

Two update paths are offered and agree exactly when the regulariser is zero:

* :meth:`LabelGaussians.update_one` applies the paper's recursions (11)-(12) to one activation;
* :meth:`LabelGaussians.update_batch` computes per-label weighted batch statistics and merges them
  into the running ones (the form the authors' code runs once per full buffer), optionally adding
  ``reg * I`` at every merge.

Memory note: full covariance costs ``num_classes * dim**2`` numbers; a 4096-dim activation needs
about 1.3 GB in float64. Use ``covariance="diag"`` or a narrower split layer for large activations.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from fedsim.errors import ConfigError, DivergenceError

WeightFn = Callable[[float], float]

_JITTER_START = 1e-6
_JITTER_FACTOR = 10.0
_JITTER_TRIES = 100


# ---------------------------------------------------------------------------------------------------
# time weights s(n)
# ---------------------------------------------------------------------------------------------------

def _exp(x):  # works on floats, numpy arrays and torch tensors alike
    if isinstance(x, torch.Tensor):
        return torch.exp(x)
    if isinstance(x, np.ndarray):
        return np.exp(x)
    return math.exp(x)


_WEIGHT_PARAMS = {
    "linear": (),
    "constant": (),
    "polynomial": ("a", "b"),
    "exponential": ("a", "b"),
}


def weight_fn(name: str, **params: float) -> WeightFn:
    """The activation time weight ``s(n)`` of GAS (paper §"Dynamic distribution update").

    * ``linear``: ``s(n) = n`` (the paper's experiments);
    * ``polynomial(a, b)``: ``s(n) = a * n**b`` (the FedAsync-style weight);
    * ``exponential(a, b)``: ``s(n) = a * exp(b * n)``;
    * ``constant``: ``s(n) = 1`` (unweighted running statistics; an ablation, not in the paper).

    ``n`` is the training progress at which the activation was produced; start it at 1, since the
    updates need ``s(n) > 0`` (``linear`` gives 0 at ``n = 0``). The returned function also
    accepts numpy arrays and torch tensors. Only ratios of weights matter, but ``exponential`` can
    overflow for large ``b * n``; the Gaussian updates reject non-finite weights.
    """
    if name not in _WEIGHT_PARAMS:
        raise ConfigError("gaussian.weight", f"unknown weight function {name!r} (allowed: {', '.join(_WEIGHT_PARAMS)})")
    allowed = _WEIGHT_PARAMS[name]
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise ConfigError(
            "gaussian.weight", f"{name} takes parameters ({', '.join(allowed) or 'none'}), got unexpected {extra}"
        )
    if name == "linear":
        return lambda n: n * 1.0
    if name == "constant":
        return lambda n: n * 0.0 + 1.0
    a = float(params.get("a", 1.0))
    b = float(params.get("b", 1.0))
    if not a > 0:
        raise ConfigError("gaussian.weight.a", f"must be > 0, got {a}")
    if not b >= 0:
        raise ConfigError("gaussian.weight.b", f"must be >= 0 so that s(n) does not decrease, got {b}")
    if name == "polynomial":
        return lambda n: a * n**b
    return lambda n: a * _exp(b * n)


# ---------------------------------------------------------------------------------------------------
# per-label Gaussians
# ---------------------------------------------------------------------------------------------------

class Generation(NamedTuple):
    """Synthetic activations for one server update.

    ``deficit[y] = max(0, target - n_y)`` is the per-label "degree of bias" of the real buffer; it is
    reported even while generation is still inactive (``labels`` empty) so that the bias is visible
    from the first update on.
    """

    activations: torch.Tensor  # (n_generated, dim)
    labels: torch.Tensor  # (n_generated,) int64
    deficit: torch.Tensor  # (num_classes,) int64

    @property
    def n_generated(self) -> int:
        return int(self.labels.numel())


class LabelGaussians:
    """Running weighted mean and covariance of flattened activations, one Gaussian per label.

    ``covariance="full"`` keeps ``Sigma_y``; ``"diag"`` keeps only its diagonal and gives exactly the
    diagonal of the full estimate. ``reg`` is added to the covariance (or variances) at every
    :meth:`update_batch` merge, as the authors' code does with ``1e-5 * I``; eq. (12) of the paper has
    no such term, so pass ``reg=0`` for the paper's estimator. Note that this term accumulates: after
    ``k`` equally weighted merges the covariance carries about ``reg * k / 2`` extra variance (about
    ``reg * k / 3`` with linearly growing weights), i.e. ~0.1 after 20,000 merges at ``reg = 1e-5``.
    Statistics are kept in ``dtype`` (float64 by default, so that long runs do not drift) on ``device``
    (the run's ``train.device``; the CPU by default), where activations and labels are moved as they
    arrive; samples are drawn from the (CPU) generator, so they are the same numbers on every device.
    """

    def __init__(
        self,
        num_classes: int,
        dim: int,
        *,
        covariance: str = "full",
        reg: float = 1e-5,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
            raise ConfigError("gaussian.num_classes", f"must be a positive integer, got {num_classes!r}")
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ConfigError("gaussian.dim", f"must be a positive integer, got {dim!r}")
        if covariance not in ("full", "diag"):
            raise ConfigError("gaussian.covariance", f"unknown mode {covariance!r} (allowed: full, diag)")
        if not (reg >= 0 and math.isfinite(reg)):
            raise ConfigError("gaussian.reg", f"must be a finite number >= 0, got {reg!r}")
        self.num_classes = int(num_classes)
        self.dim = int(dim)
        self.covariance = covariance
        self.reg = float(reg)
        self.dtype = dtype
        self.device = dev = torch.device("cpu" if device is None else device)
        self.means = torch.zeros(self.num_classes, self.dim, dtype=dtype, device=dev)
        self.weight_sums = torch.zeros(self.num_classes, dtype=torch.float64, device=dev)
        self.counts = torch.zeros(self.num_classes, dtype=torch.int64, device=dev)
        # full: one (dim, dim) matrix per label, allocated when the label is first seen
        self._cov: list[torch.Tensor | None] = [None] * self.num_classes
        self._version = [0] * self.num_classes
        self._chol: dict[int, tuple[int, torch.Tensor]] = {}
        self.last_jitter = [0.0] * self.num_classes

    # -- accessors ------------------------------------------------------------------------------------
    @property
    def all_labels_seen(self) -> bool:
        return bool((self.counts > 0).all())

    def mean(self, label: int) -> torch.Tensor:
        return self.means[self._check_label(label)].clone()

    def cov(self, label: int) -> torch.Tensor:
        """``Sigma_y`` as a (dim, dim) matrix in full mode, or the variance vector (dim,) in diag mode."""
        y = self._check_label(label)
        c = self._cov[y]
        if c is None:
            shape = (self.dim, self.dim) if self.covariance == "full" else (self.dim,)
            return torch.zeros(shape, dtype=self.dtype, device=self.device)
        return c.clone()

    # -- updates --------------------------------------------------------------------------------------
    def update_one(self, a: torch.Tensor, y: int, w: float) -> None:
        """Eqs. (11)-(12) for one activation ``a`` of label ``y`` with weight ``w = s(n(a))`` (no reg)."""
        y = self._check_label(y)
        w = self._check_weight(w)
        a = self._flat(a).reshape(-1)
        s_old = float(self.weight_sums[y])
        s_new = s_old + w
        d = s_old / s_new
        mu_old = self.means[y]
        mu = d * mu_old + (w / s_new) * a
        dm = mu - mu_old
        da = mu - a
        c_old = self._cov_or_zero(y)
        if self.covariance == "full":
            c = d * (c_old + torch.outer(dm, dm)) + (w / s_new) * torch.outer(da, da)
        else:
            c = d * (c_old + dm * dm) + (w / s_new) * da * da
        self._store(y, mu, c, s_new, 1)

    def update_batch(self, A: torch.Tensor, Y: torch.Tensor | Sequence[int], weights: torch.Tensor | float) -> None:
        """Merge a batch into the running statistics, label by label.

        For each label present, the weighted batch mean and (biased, weight-normalised) covariance are
        merged with ``d = W_old / W``:
        ``mu = d mu_old + (1-d) mu_new`` and
        ``Sigma = d (Sigma_old + (mu-mu_old)(mu-mu_old)^T) + (1-d)(Sigma_new + (mu-mu_new)(mu-mu_new)^T) + reg I``.
        A label seen for the first time takes the batch statistics as they are (no ``reg``), as in the
        authors' code. With ``reg = 0`` this equals applying :meth:`update_one` row by row.
        """
        X = self._flat(A)
        labels = self._labels(Y, X.shape[0])
        if isinstance(weights, torch.Tensor) and weights.dim() > 0:
            w = weights.detach().to(device=self.device, dtype=torch.float64).reshape(-1)
            if w.numel() != X.shape[0]:
                raise ConfigError("gaussian.weights", f"need one weight per row ({X.shape[0]}), got {w.numel()}")
        else:
            w = torch.full((X.shape[0],), self._check_weight(float(weights)), dtype=torch.float64, device=self.device)
        if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
            raise ConfigError("gaussian.weights", "every weight s(n) must be finite and > 0")
        for y in torch.unique(labels).tolist():
            rows = labels == y
            xy = X[rows]
            wy = w[rows].to(self.dtype)
            w_new = float(wy.sum())
            mu_new = (wy[:, None] * xy).sum(0) / w_new
            xc = xy - mu_new
            if self.covariance == "full":
                c_new = (xc * wy[:, None]).T @ xc / w_new
            else:
                c_new = (wy[:, None] * xc * xc).sum(0) / w_new
            n_rows = int(rows.sum())
            if self.counts[y] == 0:
                self._store(y, mu_new, c_new, w_new, n_rows)
                continue
            w_old = float(self.weight_sums[y])
            w_tot = w_old + w_new
            d = w_old / w_tot
            mu_old = self.means[y]
            mu = d * mu_old + (1.0 - d) * mu_new
            d_old = mu - mu_old
            d_new = mu - mu_new
            c_old = self._cov_or_zero(y)
            if self.covariance == "full":
                c = d * (c_old + torch.outer(d_old, d_old)) + (1.0 - d) * (c_new + torch.outer(d_new, d_new))
                if self.reg:
                    c = c + self.reg * torch.eye(self.dim, dtype=self.dtype, device=self.device)
            else:
                c = d * (c_old + d_old * d_old) + (1.0 - d) * (c_new + d_new * d_new) + self.reg
            self._store(y, mu, c, w_tot, n_rows)

    # -- sampling -------------------------------------------------------------------------------------
    def sample(self, label: int, n: int, generator: torch.Generator) -> torch.Tensor:
        """Draw ``n`` activations from ``N(mu_y, Sigma_y)`` as rows of an (n, dim) tensor.

        Full mode uses ``mu + L z`` with ``L`` the Cholesky factor. When ``Sigma_y`` is not positive
        definite, ``eps * I`` is added with ``eps = 1e-6, 1e-5, ...`` (each try starts again from
        ``Sigma_y``, not from the previous jittered matrix) for up to 100 tries, as the authors' code
        does; the jitter used is kept in ``last_jitter[label]``. Diag mode draws each coordinate
        independently with standard deviation ``sqrt(max(var, 0))``.
        """
        y = self._check_label(label)
        if self.counts[y] == 0:
            raise ConfigError("gaussian.sample", f"label {y} has no statistics yet (no activation of it was seen)")
        n = int(n)
        if n < 0:
            raise ConfigError("gaussian.sample", f"number of samples must be >= 0, got {n}")
        z = torch.randn(n, self.dim, generator=generator, dtype=self.dtype).to(self.device)
        mu = self.means[y]
        if self.covariance == "diag":
            return mu + z * self._cov_or_zero(y).clamp_min(0.0).sqrt()
        return mu + z @ self._cholesky(y).T

    def generate_for_buffer(
        self, labels_in_buffer: torch.Tensor | Sequence[int], per_label_target: int, generator: torch.Generator
    ) -> Generation:
        """The GAS top-up rule: each label is filled up to ``per_label_target`` rows (the code uses B).

        ``deficit[y] = max(0, target - n_y)`` with ``n_y`` the real rows of label ``y`` in the buffer;
        labels with a surplus keep it. Nothing is generated until every label has been seen at least
        once (the code trains on the real buffer alone until then). Rows come out grouped by label in
        increasing label order, which keeps the draw sequence reproducible. Activations are returned in
        the statistics' ``dtype``; cast them to the model's dtype before concatenating.
        """
        target = int(per_label_target)
        if target < 0:
            raise ConfigError("gaussian.per_label_target", f"must be >= 0, got {per_label_target!r}")
        labels = self._labels(labels_in_buffer, None)
        n_y = torch.bincount(labels, minlength=self.num_classes)
        deficit = (target - n_y).clamp_min(0)
        if not self.all_labels_seen:
            return Generation(
                torch.empty(0, self.dim, dtype=self.dtype, device=self.device),
                torch.empty(0, dtype=torch.int64, device=self.device), deficit
            )
        acts, labs = [], []
        for y in range(self.num_classes):
            k = int(deficit[y])
            if k > 0:
                acts.append(self.sample(y, k, generator))
                labs.append(torch.full((k,), y, dtype=torch.int64, device=self.device))
        if not acts:
            return Generation(torch.empty(0, self.dim, dtype=self.dtype, device=self.device),
                              torch.empty(0, dtype=torch.int64, device=self.device), deficit)
        return Generation(torch.cat(acts), torch.cat(labs), deficit)

    # -- internals ------------------------------------------------------------------------------------
    def _check_label(self, y) -> int:
        y = int(y)
        if not 0 <= y < self.num_classes:
            raise ConfigError("gaussian.label", f"label {y} out of range (allowed: 0..{self.num_classes - 1})")
        return y

    @staticmethod
    def _check_weight(w) -> float:
        w = float(w)
        if not (math.isfinite(w) and w > 0):
            raise ConfigError("gaussian.weight", f"weight s(n) must be finite and > 0, got {w}")
        return w

    def _flat(self, A: torch.Tensor) -> torch.Tensor:
        A = torch.as_tensor(A, device=self.device).detach()
        if A.dim() == 1:
            A = A[None]
        X = A.reshape(A.shape[0], -1).to(self.dtype)
        if X.shape[1] != self.dim:
            raise ConfigError("gaussian.dim", f"activation has {X.shape[1]} features per row, expected {self.dim}")
        return X

    def _labels(self, Y, n: int | None) -> torch.Tensor:
        labels = torch.as_tensor(Y, dtype=torch.int64, device=self.device).reshape(-1)
        if n is not None and labels.numel() != n:
            raise ConfigError("gaussian.labels", f"need one label per row ({n}), got {labels.numel()}")
        if labels.numel() and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise ConfigError("gaussian.labels", f"labels must lie in 0..{self.num_classes - 1}")
        return labels

    def _cov_or_zero(self, y: int) -> torch.Tensor:
        c = self._cov[y]
        if c is not None:
            return c
        shape = (self.dim, self.dim) if self.covariance == "full" else (self.dim,)
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def _store(self, y: int, mu: torch.Tensor, c: torch.Tensor, weight_sum: float, n_rows: int) -> None:
        self.means[y] = mu
        self._cov[y] = c
        self.weight_sums[y] = weight_sum
        self.counts[y] += n_rows
        self._version[y] += 1

    def _cholesky(self, y: int) -> torch.Tensor:
        cached = self._chol.get(y)
        if cached is not None and cached[0] == self._version[y]:
            return cached[1]
        sigma = self._cov_or_zero(y)
        L, info = torch.linalg.cholesky_ex(sigma)
        eps = 0.0
        if int(info) != 0:
            eye = torch.eye(self.dim, dtype=self.dtype, device=self.device)
            eps = _JITTER_START
            for _ in range(_JITTER_TRIES):
                L, info = torch.linalg.cholesky_ex(sigma + eps * eye)
                if int(info) == 0:
                    break
                eps *= _JITTER_FACTOR
            else:
                raise DivergenceError(
                    f"gaussian: covariance of label {y} is not positive definite even with jitter "
                    f"{eps / _JITTER_FACTOR:.0e} (non-finite activations?)"
                )
        self.last_jitter[y] = eps
        self._chol[y] = (self._version[y], L)
        return L


# ---------------------------------------------------------------------------------------------------
# Lemma 1
# ---------------------------------------------------------------------------------------------------

def lemma1_shrink_factor(n_real: int, n_generated: int, dissimilarity_ratio: float = 1.0) -> float:
    """Predicted factor by which generated activations shrink the server-gradient dissimilarity.

    The server step uses the gradient of the concatenated batch, ``alpha g1 + (1-alpha) g2`` with
    ``alpha = n_real / (n_real + n_generated)`` (``n_real = B Q_s``, ``n_generated = B_hat``),
    ``g1`` the real-buffer gradient and ``g2`` the generated-rows gradient. If ``g2`` is independent
    of ``g1`` and unbiased for the population gradient ``g`` (the Gaussians match the population),
    the cross term vanishes (paper eq. 22) and exactly

        E||mix - g||^2 = (alpha^2 + (1-alpha)^2 r) E||g1 - g||^2,   r = E||g2 - g||^2 / E||g1 - g||^2.

    The paper assumes ``r <= 1`` (eq. 23), so ``r = 1`` (the default) gives its bound
    ``rho = ((B Q_s)^2 + B_hat^2) / (B Q_s + B_hat)^2`` (eq. 24), which is never below 1/2. Pass the
    measured ``r`` to get the sharper prediction. The factor says nothing when ``g2`` is biased, as it
    is under the top-up rule (generated rows carry the labels the buffer lacks); there the real
    reduction is usually stronger than ``rho`` because the union, not ``g2``, is label-balanced.
    """
    if int(n_real) != n_real or n_real < 1:
        raise ConfigError("lemma1.n_real", f"must be a positive integer, got {n_real!r}")
    if int(n_generated) != n_generated or n_generated < 0:
        raise ConfigError("lemma1.n_generated", f"must be an integer >= 0, got {n_generated!r}")
    if not (dissimilarity_ratio >= 0 and math.isfinite(dissimilarity_ratio)):
        raise ConfigError("lemma1.dissimilarity_ratio", f"must be finite and >= 0, got {dissimilarity_ratio!r}")
    alpha = n_real / (n_real + n_generated)
    return alpha**2 + (1.0 - alpha) ** 2 * float(dissimilarity_ratio)
