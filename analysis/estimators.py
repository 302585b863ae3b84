"""Estimators of the constants convergence theorems are written in.

Everything works on flat parameter vectors and gradient callables, so the same estimator serves a
closed-form problem (:class:`fedsim.learn.quadratic.QuadraticProblem`) and a torch model
(:class:`TorchClients` adapts a model plus per-client data to the same interface):

* ``grad(i, w)`` — full-batch gradient of client i's objective F_i at w;
* ``full_grad(w)`` — gradient of the global objective F = (1/m) Σ_i F_i (uniform weights);
* ``stoch_grad(i, w, rng)`` — one stochastic gradient of F_i at w.

Client gradients at one point are passed around as an ``(m, d)`` array (one row per client).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
import torch

from analysis.layer_grads import LayerPlan, Unsupported, hooked_grads, layer_plan
from fedsim.errors import ConfigError


class GradientOracle(Protocol):
    n_clients: int

    def grad(self, i: int, w: np.ndarray) -> np.ndarray: ...

    def full_grad(self, w: np.ndarray) -> np.ndarray: ...

    def stoch_grad(self, i: int, w: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


def _as_grads(client_grads: np.ndarray) -> np.ndarray:
    g = np.asarray(client_grads, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] < 1:
        raise ConfigError("client_grads", f"expected an (m, d) array of client gradients, got shape {g.shape}")
    return g


def _weights(m: int, weights: Sequence[float] | None) -> np.ndarray:
    if weights is None:
        return np.full(m, 1.0 / m)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (m,) or np.any(w < 0) or w.sum() <= 0:
        raise ConfigError("weights", f"need {m} non-negative weights with a positive sum, got {weights!r}")
    return w / w.sum()


# ----------------------------------------------------------------------------- gradients at a point

def client_gradients(oracle: GradientOracle, w: np.ndarray, clients: Sequence[int] | None = None) -> np.ndarray:
    """Full-batch gradients ∇F_i(w) of the given clients (all by default), stacked as (m, d)."""
    ids = range(oracle.n_clients) if clients is None else clients
    return np.stack([np.asarray(oracle.grad(i, w), dtype=np.float64) for i in ids])


def global_gradient(client_grads: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """∇F = Σ_i p_i ∇F_i with uniform p_i = 1/m unless weights are given (the papers use 1/m)."""
    g = _as_grads(client_grads)
    return _weights(g.shape[0], weights) @ g


def local_dissimilarity(client_grads: np.ndarray, weights: Sequence[float] | None = None) -> float:
    """FedProx B-local dissimilarity B(w) = sqrt(E_k‖∇F_k(w)‖² / ‖∇f(w)‖²) (Li et al. 2020, Def. 3).

    B(w) ≥ 1 always (Jensen); it is 1 exactly when all clients agree.  Returns inf at a stationary
    point of f where some client gradient is non-zero.
    """
    g = _as_grads(client_grads)
    p = _weights(g.shape[0], weights)
    num = float(p @ np.sum(g * g, axis=1))
    den = float(np.sum((p @ g) ** 2))
    if den == 0.0:
        return 1.0 if num == 0.0 else float("inf")
    return float(np.sqrt(num / den))


def gradient_diversity(client_grads: np.ndarray) -> float:
    """Gradient diversity Σ_i‖g_i‖² / ‖Σ_i g_i‖² (Yin et al. 2018); 1/m when all gradients are equal."""
    g = _as_grads(client_grads)
    den = float(np.sum(g.sum(axis=0) ** 2))
    num = float(np.sum(g * g))
    return num / den if den > 0 else float("inf")


def dissimilarity(client_grads: np.ndarray, weights: Sequence[float] | None = None) -> dict[str, float]:
    """‖∇F_i − ∇F‖² over clients: ``max`` (Co-S²P δ², EmbracingFL σ̄², Yang et al. σ_G²) and ``mean``."""
    g = _as_grads(client_grads)
    dev = np.sum((g - global_gradient(g, weights)) ** 2, axis=1)
    return {"max": float(dev.max()), "mean": float(dev.mean())}


@dataclass(frozen=True)
class BGDFit:
    """(G, B) bounded gradient dissimilarity: (1/m) Σ‖∇f_i(w)‖² ≤ G² + B² ‖∇f(w)‖² at the probed points."""

    G2: float
    B: float
    method: str
    n_points: int

    @property
    def G(self) -> float:
        return float(np.sqrt(self.G2))


def fit_bgd(grad_sets: Sequence[np.ndarray], B: float | None = None, method: str = "envelope") -> BGDFit:
    """Fit the (G, B) assumption from client gradients at several points.

    For each point k: a_k = (1/m)Σ_i‖g_i‖², b_k = ‖ḡ‖².  With B given, G² = max_k (a_k − B² b_k): the
    smallest G² making the inequality hold at every probed point (an upper envelope).  With B = None,
    B² is the least-squares slope of a on b, clipped below at 1 (Jensen gives B ≥ 1); ``method="envelope"``
    then reports the envelope G² for that B (a bound at every probed point), ``method="lstsq"`` the
    least-squares intercept (a fit, not a guaranteed bound).  Points with large ‖∇f‖ pin B and points
    near the optimum pin G: probe both.
    """
    if len(grad_sets) < 1:
        raise ConfigError("grad_sets", "need gradients at one point at least")
    a = [float(np.mean(np.sum(_as_grads(g) ** 2, axis=1))) for g in grad_sets]
    b = [float(np.sum(global_gradient(g) ** 2)) for g in grad_sets]
    return fit_bgd_norms(a, b, B=B, method=method)


def fit_bgd_norms(client_sq_mean: Sequence[float], global_sq: Sequence[float], B: float | None = None,
                  method: str = "envelope") -> BGDFit:
    """:func:`fit_bgd` from the two numbers it uses per point: a_k = (1/m)Σ_i‖∇f_i‖², b_k = ‖∇f‖².

    Lets a run's probes fit (G, B) across many checkpoints without keeping every client gradient.
    """
    if method not in ("envelope", "lstsq"):
        raise ConfigError("method", f"unknown fit {method!r} (allowed: envelope, lstsq)")
    a = np.asarray(client_sq_mean, dtype=np.float64)
    b = np.asarray(global_sq, dtype=np.float64)
    if a.size < 1 or a.shape != b.shape:
        raise ConfigError("client_sq_mean", f"need one value per point for both inputs, got {a.size} and {b.size}")
    if B is not None:
        if B < 1:
            raise ConfigError("B", f"must be >= 1, got {B}")
        return BGDFit(float(max(np.max(a - B * B * b), 0.0)), float(B), "envelope", len(a))
    if len(a) < 2 or np.ptp(b) == 0:
        b2 = 1.0
        g2 = float(np.max(a - b))
    else:
        slope, intercept = np.polyfit(b, a, 1)
        b2 = max(float(slope), 1.0)
        if method == "lstsq":
            return BGDFit(max(float(intercept), 0.0), float(np.sqrt(b2)), "lstsq", len(a))
        g2 = float(np.max(a - b2 * b))
    return BGDFit(max(g2, 0.0), float(np.sqrt(b2)), method, len(a))


# ----------------------------------------------------------------------------- GAS

def gas_kappa_sq(g_buf: np.ndarray | Mapping[str, Any], g_pop: np.ndarray | Mapping[str, Any],
                 reduction: str = "sum") -> float:
    """GAS server-side dissimilarity D = ‖g_buf − g_pop‖² (the κ₁² proxy, gas.md §4.5).

    ``g_buf``: gradient of the server loss on the buffered (+ generated) activations; ``g_pop``: on the
    population.  Flat vectors, or dicts of per-tensor gradients.  ``reduction="sum"`` is the squared norm
    over all parameters; ``"mean_tensor"`` averages the per-tensor squared norms, as the paper's code does
    (figure parity only).
    """
    if reduction not in ("sum", "mean_tensor"):
        raise ConfigError("reduction", f"unknown reduction {reduction!r} (allowed: sum, mean_tensor)")
    if isinstance(g_buf, Mapping):
        if not isinstance(g_pop, Mapping) or set(g_buf) != set(g_pop):
            raise ConfigError("g_pop", "must hold the same parameter tensors as g_buf")
        parts = [float(np.sum((np.asarray(_np(g_buf[k])) - np.asarray(_np(g_pop[k]))) ** 2)) for k in g_buf]
    else:
        parts = [float(np.sum((np.asarray(g_buf, dtype=np.float64) - np.asarray(g_pop, dtype=np.float64)) ** 2))]
    return float(np.mean(parts)) if reduction == "mean_tensor" else float(np.sum(parts))


def gas_lemma1_rho(batch_size: int, q_s: int, b_hat: int) -> float:
    """GAS Lemma 1 factor ρ = ((B·Q_s)² + B̂²)/(B·Q_s + B̂)² ≤ 1 (1/2 at best, when B̂ = B·Q_s)."""
    real = batch_size * q_s
    return float((real**2 + b_hat**2) / (real + b_hat) ** 2)


# ----------------------------------------------------------------------------- noise and curvature

def stochastic_variance(oracle: GradientOracle, w: np.ndarray, clients: Sequence[int] | None = None, *,
                        n_samples: int = 100, rng: np.random.Generator) -> pd.Series:
    """σ_i² = mean_j ‖g_ij − ∇F_i(w)‖² over ``n_samples`` stochastic gradients per client (unbiased for
    E‖g − ∇F_i‖² since the full gradient is exact).  Use ``.max()`` for the uniform bound σ² of the
    assumptions and ``.mean()`` for the average."""
    ids = list(range(oracle.n_clients) if clients is None else clients)
    if n_samples < 1:
        raise ConfigError("n_samples", f"must be >= 1, got {n_samples}")
    out = {}
    for i in ids:
        g = np.asarray(oracle.grad(i, w), dtype=np.float64)
        dev = [float(np.sum((np.asarray(oracle.stoch_grad(i, w, rng)) - g) ** 2)) for _ in range(n_samples)]
        out[i] = float(np.mean(dev))
    return pd.Series(out, name="sigma2")


def smoothness_secant(points: Sequence[np.ndarray], grads: Sequence[np.ndarray], pairs: str = "consecutive") -> float:
    """L̂ = max ‖∇f(x) − ∇f(y)‖ / ‖x − y‖ over consecutive (or all) pairs of iterates.

    A lower bound on the smoothness constant; along a converging trajectory the differences align with
    the flattest directions, so pair distant checkpoints or use :func:`hessian_top_eigenvalue` for L.
    """
    if pairs not in ("consecutive", "all"):
        raise ConfigError("pairs", f"unknown pairing {pairs!r} (allowed: consecutive, all)")
    if len(points) != len(grads) or len(points) < 2:
        raise ConfigError("points", "need at least two points, each with its gradient")
    idx = zip(range(len(points) - 1), range(1, len(points))) if pairs == "consecutive" \
        else itertools.combinations(range(len(points)), 2)
    best = 0.0
    for a, b in idx:
        dx = np.linalg.norm(np.asarray(points[a]) - np.asarray(points[b]))
        if dx > 0:
            best = max(best, float(np.linalg.norm(np.asarray(grads[a]) - np.asarray(grads[b])) / dx))
    return best


def fd_hvp(grad_fn: Callable[[np.ndarray], np.ndarray], w: np.ndarray, eps: float = 1e-4) -> Callable[[np.ndarray], np.ndarray]:
    """Hessian-vector product by central differences of the gradient (exact for quadratics)."""
    w = np.asarray(w, dtype=np.float64)

    def hvp(v: np.ndarray) -> np.ndarray:
        return (np.asarray(grad_fn(w + eps * v)) - np.asarray(grad_fn(w - eps * v))) / (2 * eps)

    return hvp


def hessian_top_eigenvalue(hvp: Callable[[np.ndarray], np.ndarray], dim: int, *, iters: int = 200,
                           tol: float = 1e-9, rng: np.random.Generator) -> float:
    """Largest-magnitude Hessian eigenvalue by power iteration on Hessian-vector products (≈ L)."""
    v = rng.standard_normal(dim)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        hv = np.asarray(hvp(v), dtype=np.float64)
        new = float(v @ hv)
        nrm = np.linalg.norm(hv)
        if nrm == 0:
            return 0.0
        v = hv / nrm
        if abs(new - lam) <= tol * max(1.0, abs(new)):
            return abs(new)
        lam = new
    return abs(lam)


def max_sq_norm(grads: np.ndarray | Sequence[np.ndarray]) -> float:
    """max_j ‖g_j‖²: the running bound G (Co-S²P Assumption 4) or V₁ (Fed-RAA) over observed gradients."""
    return float(max(float(np.sum(np.asarray(g, dtype=np.float64) ** 2)) for g in grads))


# ----------------------------------------------------------------------------- torch adapters

def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().double().numpy()
    return np.asarray(t, dtype=np.float64)


def flat_params(model: torch.nn.Module) -> np.ndarray:
    """Trainable parameters as one float64 vector (in ``model.parameters()`` order)."""
    return np.concatenate([_np(p).ravel() for p in model.parameters() if p.requires_grad])


def set_flat_params(model: torch.nn.Module, w: np.ndarray) -> None:
    """Write a flat vector back into the trainable parameters."""
    w = np.asarray(w, dtype=np.float64)
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad:
                continue
            n = p.numel()
            p.copy_(torch.from_numpy(w[off:off + n].copy()).reshape(p.shape).to(p.dtype))
            off += n
    if off != w.size:
        raise ConfigError("w", f"has {w.size} entries but the model has {off} trainable parameters")


LossFn = Callable[..., torch.Tensor]


def torch_grad(model: torch.nn.Module, loss_fn: LossFn, batch: Sequence[torch.Tensor]) -> np.ndarray:
    """Flat gradient of ``loss_fn(model, *batch)`` with respect to the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = loss_fn(model, *batch)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return np.concatenate([(_np(g) if g is not None else np.zeros(p.numel())).ravel() for g, p in zip(grads, params)])


def torch_hvp(model: torch.nn.Module, loss_fn: LossFn, batch: Sequence[torch.Tensor]) -> Callable[[np.ndarray], np.ndarray]:
    """Exact Hessian-vector products of ``loss_fn(model, *batch)`` at the model's current parameters."""
    params = [p for p in model.parameters() if p.requires_grad]

    def hvp(v: np.ndarray) -> np.ndarray:
        loss = loss_fn(model, *batch)
        grads = torch.autograd.grad(loss, params, create_graph=True)
        vs, off = [], 0
        for p in params:
            vs.append(torch.from_numpy(np.asarray(v[off:off + p.numel()], dtype=np.float64)).reshape(p.shape)
                      .to(device=p.device, dtype=p.dtype))
            off += p.numel()
        dot = sum(torch.sum(g * u) for g, u in zip(grads, vs))
        hv = torch.autograd.grad(dot, params)
        return np.concatenate([_np(h).ravel() for h in hv])

    return hvp


class _Bound:
    """A model called with given parameters (``torch.func.functional_call``), for a loss written as
    ``loss_fn(model, *tensors)``."""

    def __init__(self, model: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
        self.model, self.params = model, params

    def __call__(self, *args: Any) -> Any:
        return torch.func.functional_call(self.model, dict(self.params), args)


@dataclass(frozen=True)
class SampleStats:
    """Full-data quantities of one client from its per-sample gradients g_j (j = 1..n).

    ``grad`` = (1/n) Σ g_j (= ∇F_i, the full-batch gradient), ``loss`` = F_i, ``sq_mean`` = (1/n) Σ ‖g_j‖²,
    so the per-sample gradient variance is ``sq_mean − ‖grad‖²``."""

    grad: np.ndarray
    loss: float
    sq_mean: float
    n: int

    def minibatch_variance(self, batch_size: int) -> float:
        """E‖g_B − ∇F_i‖² of a minibatch of ``batch_size`` samples drawn uniformly *with* replacement:
        exactly (1/B)·(1/n) Σ_j ‖g_j − ∇F_i‖² (B independent draws from the client's samples)."""
        return max(self.sq_mean - float(self.grad @ self.grad), 0.0) / int(batch_size)


def per_sample_stats(model: torch.nn.Module, loss_fn: LossFn, data: Sequence[torch.Tensor],
                     chunk: int | None = None) -> SampleStats:
    """:class:`SampleStats` of one dataset in one pass of per-sample gradients (layer hooks, or ``torch.func``
    ``vmap`` of ``grad``: :func:`per_sample_pass`), ``chunk`` samples at a time (default: about 2^24 gradient
    entries held)."""
    return per_sample_stats_many(model, loss_fn, [data], chunk=chunk)[0]


#: Per-sample gradient entries held at once by :func:`per_sample_stats_many` (float32: 64 MB), unless a
#: chunk is given.  Larger chunks mean fewer vectorised calls: 2^22 took about 1.4x as long on a small ViT.
PER_SAMPLE_BUDGET = 1 << 24


def per_sample_stats_many(model: torch.nn.Module, loss_fn: LossFn, datasets: Sequence[Sequence[torch.Tensor]],
                          chunk: int | None = None) -> list[SampleStats]:
    """:class:`SampleStats` of several datasets (one per client) from one stream of vectorised per-sample
    gradients over their concatenation, ``chunk`` samples per call whatever the client boundaries (so a
    small client costs no call of its own); each sample's gradient is added, in float64, to its own
    dataset's sums.  Equal to :func:`per_sample_stats` of each dataset up to the order of the sums."""
    return per_sample_pass(model, loss_fn, datasets, chunk=chunk)[0]


#: Most per-sample gradient entries :func:`per_sample_pass` keeps for the caller (float32: 64 MB).
KEEP_BUDGET = 1 << 24


def per_sample_pass(model: torch.nn.Module, loss_fn: LossFn, datasets: Sequence[Sequence[torch.Tensor]],
                    chunk: int | None = None, keep: Sequence[int] | None = None, *, hooks: bool = True
                    ) -> tuple[list[SampleStats], torch.Tensor | None]:
    """:func:`per_sample_stats_many`, also returning the per-sample gradients of the samples at positions
    ``keep`` of the datasets' concatenation, as a float32 ``(len(keep), d)`` tensor in ``keep``'s order
    (None without ``keep``), so another estimate can reuse them without a second pass.  At most
    :data:`KEEP_BUDGET` entries are kept: beyond it, an evenly spaced selection of ``keep``.

    The per-sample gradients come from layer hooks (:mod:`analysis.layer_grads`: one batched forward and
    backward per chunk) where every trainable parameter sits in a supported layer and ``loss_fn`` has a
    ``per_sample`` form, else (or with ``hooks=False``) from ``torch.func.vmap`` of ``grad``; both are exact."""
    if not datasets or any(int(d[0].shape[0]) < 1 for d in datasets):
        raise ConfigError("datasets", "need at least one non-empty dataset")
    names = [k for k, p in model.named_parameters() if p.requires_grad]
    d = sum(p.numel() for p in model.parameters() if p.requires_grad)
    sizes = [int(data[0].shape[0]) for data in datasets]
    n, m = sum(sizes), len(datasets)
    step = int(chunk) if chunk else max(1, min(n, PER_SAMPLE_BUDGET // max(d, 1)))
    joined = tuple(torch.cat([data[j] for data in datasets]) if m > 1 else datasets[0][j]
                   for j in range(len(datasets[0])))
    device = joined[0].device
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    kept = keep_at = None
    if keep is not None and len(keep):
        keep_at = np.asarray(keep, dtype=np.int64)
        if keep_at.min() < 0 or keep_at.max() >= n:
            raise ConfigError("keep", f"positions must lie in [0, {n}), got {int(keep_at.min())}..{int(keep_at.max())}")
        most = max(1, KEEP_BUDGET // max(d, 1))
        if len(keep_at) > most:
            keep_at = keep_at[np.linspace(0, len(keep_at) - 1, most).round().astype(np.int64)]
        kept = torch.empty(len(keep_at), d, dtype=torch.float32, device=device)

    plan = layer_plan(model, loss_fn) if hooks else None
    if plan is not None:
        try:
            total, sq, loss_sum = _pass(model, loss_fn, names, joined, step, bounds, m, d, kept, keep_at, plan)
        except Unsupported:  # e.g. a tied weight: the vmap path is exact for any model
            plan = None
    if plan is None:
        total, sq, loss_sum = _pass(model, loss_fn, names, joined, step, bounds, m, d, kept, keep_at, None)
    total_np, sq_np, loss_np = total.cpu().numpy(), sq.cpu().numpy(), loss_sum.cpu().numpy()
    stats = [SampleStats(total_np[i] / sizes[i], float(loss_np[i]) / sizes[i], float(sq_np[i]) / sizes[i], sizes[i])
             for i in range(m)]
    return stats, kept


def _pass(model: torch.nn.Module, loss_fn: LossFn, names: Sequence[str], joined: Sequence[torch.Tensor], step: int,
          bounds: np.ndarray, m: int, d: int, kept: torch.Tensor | None, keep_at: np.ndarray | None,
          plan: LayerPlan | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunked loop of :func:`per_sample_pass`: per-sample gradients ``step`` samples at a time (by
    layer hooks with ``plan``, else by ``vmap``), added in float64 to their dataset's sums; fills ``kept``.
    Returns the per-dataset gradient sums (m, d), squared-norm sums (m,) and loss sums (m,)."""
    device = joined[0].device
    n = int(joined[0].shape[0])
    if plan is None:
        params = {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}

        def one(p: Mapping[str, torch.Tensor], *sample: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            loss = loss_fn(_Bound(model, p), *(t.unsqueeze(0) for t in sample))
            return loss, loss.detach()

        per_sample = torch.func.vmap(torch.func.grad(one, has_aux=True), in_dims=(None, *[0] * len(joined)))
    total = torch.zeros(m, d, dtype=torch.float64, device=device)
    sq = torch.zeros(m, dtype=torch.float64, device=device)
    loss_sum = torch.zeros(m, dtype=torch.float64, device=device)
    for lo in range(0, n, step):
        part = tuple(t[lo:lo + step] for t in joined)
        hi = lo + part[0].shape[0]
        # the datasets this chunk touches, as (dataset, first row, end row) within the chunk
        segs = [(i, max(lo, int(bounds[i])) - lo, min(hi, int(bounds[i + 1])) - lo)
                for i in range(m) if bounds[i] < hi and bounds[i + 1] > lo]
        grads, losses = per_sample(params, *part) if plan is None else hooked_grads(plan, model, part)
        if kept is not None and keep_at is not None:
            sel = np.flatnonzero((keep_at >= lo) & (keep_at < hi))
            if len(sel):
                dest = torch.as_tensor(sel, device=device)
                take = torch.as_tensor(keep_at[sel] - lo, device=device)
                kept[dest] = torch.cat([grads[k][take].reshape(len(take), -1).float() for k in names], dim=1)
        off = 0
        for k in names:  # per tensor, summed in float64 (σ² is a difference of two close sums), no copy
            gk = grads[k].reshape(part[0].shape[0], -1)
            width = gk.shape[1]
            for i, a, b in segs:
                total[i, off:off + width] += gk[a:b].sum(dim=0, dtype=torch.float64)
                sq[i] += torch.linalg.vector_norm(gk[a:b], dtype=torch.float64) ** 2
            off += width
        losses = losses.double().reshape(-1)
        for i, a, b in segs:
            loss_sum[i] += losses[a:b].sum()
    return total, sq, loss_sum


def fisher_top_direction(rows: torch.Tensor, *, rng: np.random.Generator, iters: int = 10,
                         tol: float = 1e-2) -> np.ndarray:
    """Top eigenvector of the empirical Fisher (1/r) Σ_j g_j g_jᵀ of per-sample gradients ``rows`` (r, d), by
    Lanczos on products Gᵀ(G v) (two matrix-vector products each, no model pass).

    Why: near a network's iterates the loss Hessian's top eigenvector lies close to this direction (the
    Gauss–Newton part dominates the curvature), so Lanczos on the Hessian started here needs fewer
    Hessian-vector products for the same residual bound (about 2 fewer on cos2p's ViT).  Only the start
    changes: the Hessian estimate and its stated error do not depend on it."""
    g = rows.detach()
    r = max(int(g.shape[0]), 1)

    def fisher(v: np.ndarray) -> np.ndarray:
        u = torch.from_numpy(v).to(device=g.device, dtype=g.dtype)
        return (g.T @ (g @ u)).double().cpu().numpy() / r

    mean = g.sum(dim=0).double().cpu().numpy()  # a start only: float32 is enough, and no float64 copy of g
    _, _, vec = lanczos_top_eigenvalue(fisher, int(g.shape[1]), iters=min(iters, int(g.shape[1])), tol=tol, rng=rng,
                                       start=mean if np.linalg.norm(mean) > 0 else None)
    return vec


def lanczos_top_eigenvalue(hvp: Callable[[np.ndarray], np.ndarray], dim: int, *, iters: int = 30,
                           tol: float = 1e-4, rng: np.random.Generator,
                           start: np.ndarray | None = None, history: list[tuple[float, float]] | None = None
                           ) -> tuple[float, float, np.ndarray]:
    """Largest-magnitude eigenvalue of a symmetric operator by Lanczos (full reorthogonalisation) on
    Hessian-vector products; returns (|θ|, bound) with θ the Ritz value of largest magnitude.

    Error: a Ritz pair (θ, y) has residual ‖H y − θ y‖ = β_k |s_k| (β_k the last off-diagonal, s_k the
    last entry of the Ritz vector in the Krylov basis), and some eigenvalue of H lies within that
    residual of θ (Bauer–Fike for symmetric H): ``bound``.  Stops once the bound is below
    ``tol·|θ|`` or after ``iters`` products.  A Krylov space of k vectors contains the power iteration's
    k-th iterate, so |θ| converges at least as fast as power iteration from the same start.

    ``start``: the first Krylov vector (e.g. the top Ritz vector of a nearby operator, the previous
    checkpoint's Hessian); a random one from ``rng`` is mixed in at 1e-6 so no eigen-direction is
    missed.  Also returns the top Ritz vector, to start the next call from.  ``history``: a list that gets
    (|θ|, bound) after every product, to see how the bound fell."""
    v = rng.standard_normal(dim)
    v /= np.linalg.norm(v)
    if start is not None and start.shape == (dim,) and np.linalg.norm(start) > 0:
        v = start / np.linalg.norm(start) + 1e-6 * v
        v /= np.linalg.norm(v)
    basis = [v]
    alphas: list[float] = []
    betas: list[float] = []
    theta, bound = 0.0, float("inf")
    for k in range(iters):
        w = np.asarray(hvp(basis[-1]), dtype=np.float64)
        a = float(basis[-1] @ w)
        alphas.append(a)
        q = np.stack(basis)
        w = w - q.T @ (q @ w)  # full reorthogonalisation (twice is enough)
        w = w - q.T @ (q @ w)
        b = float(np.linalg.norm(w))
        tri = np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1)
        vals, vecs = np.linalg.eigh(tri)
        j = int(np.argmax(np.abs(vals)))
        theta, bound = float(vals[j]), abs(b * float(vecs[-1, j]))
        if history is not None:
            history.append((abs(theta), bound))
        if bound <= tol * max(abs(theta), 1e-12) or b <= 1e-12 * max(abs(theta), 1.0) or k == dim - 1:
            break
        betas.append(b)
        basis.append(w / b)
    ritz = np.stack(basis[: len(vecs)]).T @ vecs[:, j]
    return abs(theta), bound, ritz


def torch_hvp_reusing(model: torch.nn.Module, loss_fn: LossFn, batch: Sequence[torch.Tensor]
                      ) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`torch_hvp` with the gradient's graph built once and kept: each product is one more
    backward pass (no new forward and first backward per product)."""
    params = [p for p in model.parameters() if p.requires_grad]
    loss = loss_fn(model, *batch)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    flat_grad = torch.cat([g.reshape(-1) for g in grads])

    def hvp(v: np.ndarray) -> np.ndarray:
        u = torch.from_numpy(np.asarray(v, dtype=np.float64)).to(device=flat_grad.device, dtype=flat_grad.dtype)
        hv = torch.autograd.grad(flat_grad @ u, params, retain_graph=True)
        return np.concatenate([_np(h).ravel() for h in hv])

    return hvp


class TorchClients:
    """A torch model plus per-client data, exposed as a :class:`GradientOracle` over flat vectors.

    ``datasets[i]`` is a tuple of tensors (e.g. ``(x, y)``) holding client i's training data;
    ``loss_fn(model, *tensors)`` returns the mean loss.  Full-batch gradients are computed in chunks of
    ``chunk`` examples (weighted by chunk size, so they equal the full-data mean-loss gradient);
    stochastic gradients use ``batch_size`` examples drawn uniformly with replacement.
    """

    def __init__(self, model: torch.nn.Module, datasets: Sequence[Sequence[torch.Tensor]], loss_fn: LossFn, *,
                 batch_size: int = 32, chunk: int = 4096) -> None:
        if not datasets:
            raise ConfigError("datasets", "need at least one client dataset")
        self.model, self.datasets, self.loss_fn = model, [tuple(d) for d in datasets], loss_fn
        self.batch_size, self.chunk = int(batch_size), int(chunk)
        self.n_clients = len(self.datasets)

    def _at(self, w: np.ndarray) -> None:
        """Put the model at w (skipped when it is there already: writing the parameters costs as much as
        a small gradient)."""
        held = flat_params(self.model)
        if held.shape == np.shape(w) and np.array_equal(held, w):
            return
        set_flat_params(self.model, w)

    def grad(self, i: int, w: np.ndarray) -> np.ndarray:
        self._at(w)
        data = self.datasets[i]
        n = data[0].shape[0]
        total = None
        for s in range(0, n, self.chunk):
            part = tuple(t[s:s + self.chunk] for t in data)
            g = torch_grad(self.model, self.loss_fn, part) * (part[0].shape[0] / n)
            total = g if total is None else total + g
        assert total is not None
        return total

    def full_grad(self, w: np.ndarray) -> np.ndarray:
        return np.mean([self.grad(i, w) for i in range(self.n_clients)], axis=0)

    def sample_stats(self, i: int, w: np.ndarray) -> SampleStats:
        """Client i's full-batch gradient, loss and mean squared per-sample gradient norm at w, in one
        vectorised pass (:func:`per_sample_stats`)."""
        self._at(w)
        return per_sample_stats(self.model, self.loss_fn, self.datasets[i])

    def sample_stats_all(self, w: np.ndarray) -> list[SampleStats]:
        """:meth:`sample_stats` of every client, from one stream of vectorised passes over all their data
        (:func:`per_sample_stats_many`)."""
        return self.sample_pass(w)[0]

    def sample_pass(self, w: np.ndarray, keep: Sequence[int] | None = None
                    ) -> tuple[list[SampleStats], torch.Tensor | None]:
        """:meth:`sample_stats_all`, plus the per-sample gradients at positions ``keep`` of the clients'
        concatenated data (:func:`per_sample_pass`)."""
        self._at(w)
        return per_sample_pass(self.model, self.loss_fn, self.datasets, keep=keep)

    def stoch_grad(self, i: int, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        self._at(w)
        data = self.datasets[i]
        idx = torch.from_numpy(rng.integers(0, data[0].shape[0], size=self.batch_size)).to(data[0].device)
        return torch_grad(self.model, self.loss_fn, tuple(t[idx] for t in data))

    def hvp(self, w: np.ndarray, i: int | None = None) -> Callable[[np.ndarray], np.ndarray]:
        """HVP of F_i (or of F = mean_i F_i when ``i`` is None) at w."""
        self._at(w)
        ids = range(self.n_clients) if i is None else [i]
        fns = [torch_hvp(self.model, self.loss_fn, self.datasets[j]) for j in ids]
        return lambda v: np.mean([f(v) for f in fns], axis=0)

    def per_sample_sq_norms(self, i: int, w: np.ndarray, max_samples: int | None = None) -> np.ndarray:
        """‖∇ℓ(w; x_j)‖² for each sample of client i (SemiSFL's G², Fed-RAA's V₁ are their max)."""
        self._at(w)
        data = self.datasets[i]
        n = data[0].shape[0] if max_samples is None else min(max_samples, data[0].shape[0])
        return np.array([float(np.sum(torch_grad(self.model, self.loss_fn, tuple(t[j:j + 1] for t in data)) ** 2))
                         for j in range(n)])


def probe_activations(model: torch.nn.Module, inputs: torch.Tensor, *,
                      modules: Mapping[str, torch.nn.Module] | None = None, conv: str = "keep") -> dict[str, np.ndarray]:
    """Outputs of each block on a fixed probe batch, captured with forward hooks.

    By default the modules are ``model.blocks`` (any ModuleList of blocks), named ``block0``, ``block1``…;
    pass ``modules`` to choose others.  Returns ``(examples, …)`` float64 arrays (``conv="keep"``) or, with
    ``conv`` in {pool, positions, flatten}, ``(examples, features)`` matrices (see
    :func:`analysis.similarity.flatten_activations`).  Runs in eval mode without gradients and restores
    the model's training flag.
    """
    from analysis.similarity import flatten_activations

    if modules is None:
        blocks = getattr(model, "blocks", None)
        if not isinstance(blocks, torch.nn.ModuleList):
            raise ConfigError("model", "has no `.blocks` ModuleList; pass `modules` explicitly")
        modules = {f"block{i}": b for i, b in enumerate(blocks)}
    captured: dict[str, np.ndarray] = {}
    hooks = []
    for name, mod in modules.items():
        def hook(_m: torch.nn.Module, _inp: Any, out: Any, name: str = name) -> None:
            t = out[0] if isinstance(out, (tuple, list)) else out
            captured[name] = _np(t)
        hooks.append(mod.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(inputs)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if conv == "keep":
        return {k: captured[k] for k in modules}
    return {k: flatten_activations(captured[k], conv) for k in modules}
