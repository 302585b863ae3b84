"""Probes that need the model: the constants of the convergence theorems, measured on a run's global model.

At one global model w (a checkpoint, or the live model during a simulation) a probe measures

* ``loss`` F(w) and ``grad_norm_sq`` ‖∇F(w)‖², with F = (1/m) Σ_i F_i the uniform average of the clients'
  mean training losses (the objective of the papers' analyses, with the task's loss from
  ``fedsim.learn.sgd.loss_for``), computed full-batch;
* from the clients' full-batch gradients: ``client_grad_sq_mean`` (1/m)Σ‖∇F_i‖², the FedProx B-local
  dissimilarity ``B_local``, ``grad_diversity``, and ``zeta2_mean`` / ``zeta2_max`` = mean / max over
  clients of ‖∇F_i − ∇F‖²;
* ``sigma2_mean`` / ``sigma2_max``: per client, E‖g − ∇F_i‖² of a stochastic gradient at the run's batch
  size B, samples uniform *with* replacement (the run's without-replacement batches have slightly
  smaller variance, so this errs high).  Computed exactly, not sampled: B independent draws average
  the client's per-sample gradients g_j, so E‖g − ∇F_i‖² = (1/B)·(1/n_i)Σ_j‖g_j − ∇F_i‖², from one
  vectorised pass of per-sample gradients over every client's data that also gives ∇F_i and F_i
  (:func:`analysis.estimators.per_sample_stats_many`).  ``method="sampled"`` keeps the earlier Monte-Carlo
  mean over ``sigma_samples`` drawn minibatches (relative standard error about sqrt(2/sigma_samples));
* ``L_hessian``: the top Hessian eigenvalue of F on a probe subset (``hessian_samples`` spread equally
  over clients), by Lanczos on exact Hessian-vector products whose gradient graph is built once
  (:func:`analysis.estimators.lanczos_top_eigenvalue`); ``L_hessian_err`` is its stated error: an
  eigenvalue of the subset's Hessian lies within it of the estimate (the Ritz pair's residual norm).
  Lanczos starts from the top eigenvector of the empirical Fisher of the subset's per-sample gradients
  (kept from the σ² pass, :func:`analysis.estimators.fisher_top_direction`) and stops once the bound is
  at most ``hessian_tol`` (default 1e-2; ``fedsim check --exact-probes``: 1e-6) of the estimate.
  ``method="sampled"`` keeps the earlier power iteration (no error stated).  ``L_secant``:
  ‖∇F(w) − ∇F(w')‖ / ‖w − w'‖ against the previously probed model w';
* per-block activations of the model on a fixed probe batch of test inputs (for SVCCA between versions).

Gradients are taken in eval mode (the deterministic objective).  Every random choice (client subsets,
σ² draws, power-iteration start, probe batch) comes from a named stream of the run's seed keyed by the
version, so probing the live model during a run (``eval.probe_every``, :class:`LiveProbes`) and probing
the saved checkpoint afterwards (:func:`probe_run`) give the same numbers.

:func:`summarise_probes` turns the table into the constants of ``analysis.theory.local_sgd`` and writes
them to ``measured.json``, which ``analysis.report.check_run`` reads.
"""
from __future__ import annotations

import pickle

import copy
import json
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from analysis.estimators import (
    TorchClients,
    client_gradients,
    dissimilarity,
    fit_bgd_norms,
    flat_params,
    global_gradient,
    gradient_diversity,
    hessian_top_eigenvalue,
    fisher_top_direction,
    lanczos_top_eigenvalue,
    local_dissimilarity,
    probe_activations,
    torch_hvp,
    torch_hvp_reusing,
)
from analysis.similarity import svcca
from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams

PROBE_COLUMNS = ("version", "loss", "grad_norm_sq", "client_grad_sq_mean", "B_local", "grad_diversity",
                 "zeta2_mean", "zeta2_max", "sigma2_mean", "sigma2_max", "L_hessian", "L_hessian_err", "L_secant")


@dataclass(frozen=True)
class ProbeSettings:
    """How much work one probe does (defaults keep a probe of a small model well under a second)."""

    max_samples_per_client: int | None = None   # full-batch gradients on a random subset of this size
    sigma_samples: int = 16                     # stochastic gradients per client for σ²
    hessian_samples: int = 256                  # probe subset for the top Hessian eigenvalue
    hessian_iters: int = 30                     # most Hessian-vector products per probe
    hessian_tol: float = 1e-2                   # Lanczos stops once its residual bound is below this share of L
    hessian_start: str = "fisher"               # Lanczos' first vector: "fisher", "previous" (last probe's) or "random"
    activation_samples: int = 128               # fixed probe batch of test inputs
    chunk: int = 4096                           # examples per forward pass in full-batch gradients
    method: str = "exact"                       # "exact": per-sample σ², Lanczos; "sampled": the earlier estimators

    def __post_init__(self) -> None:
        if self.method not in ("exact", "sampled"):
            raise ConfigError("method", f"unknown probe method {self.method!r} (allowed: exact, sampled)")
        if self.hessian_start not in HESSIAN_STARTS:
            raise ConfigError("hessian_start", f"unknown start {self.hessian_start!r} (allowed: {', '.join(HESSIAN_STARTS)})")
        if not (self.hessian_tol >= 0):
            raise ConfigError("hessian_tol", f"must be >= 0, got {self.hessian_tol}")


HESSIAN_STARTS = ("fisher", "previous", "random")

#: What ``fedsim check --exact-probes`` measures with: Lanczos run until its residual bound is below 1e-6 of
#: the eigenvalue (or the Krylov space is exhausted, or 200 products), instead of the default 1e-2.
EXACT_PROBES = ProbeSettings(hessian_tol=1e-6, hessian_iters=200)


def cross_entropy_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The training loss of fedsim's classifiers (mean cross-entropy), in the estimators' signature."""
    return F.cross_entropy(model(x), y)


def _cross_entropy_per_sample(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The losses of :func:`cross_entropy_loss`, one per sample (their mean is it): what lets the per-sample
    pass take each sample's gradient from one batched backward (:mod:`analysis.layer_grads`)."""
    return F.cross_entropy(model(x), y, reduction="none")


cross_entropy_loss.per_sample = _cross_entropy_per_sample  # type: ignore[attr-defined]


def model_loss(task: str) -> Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training loss of ``task`` (:func:`fedsim.learn.sgd.loss_for`) in the estimators' signature
    ``loss(model, x, y)``, so probes measure the objective the run trained on."""
    from fedsim.learn.sgd import loss_for

    if task == "classification":
        return cross_entropy_loss
    fn = loss_for(task)

    def loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return fn(model(x), y)

    return loss


def client_loss(clients: TorchClients, i: int) -> float:
    """F_i at the model's current parameters: mean loss over client i's data (chunked, no gradients)."""
    data = clients.datasets[i]
    n = data[0].shape[0]
    total = 0.0
    with torch.no_grad():
        for s in range(0, n, clients.chunk):
            part = tuple(t[s:s + clients.chunk] for t in data)
            total += float(clients.loss_fn(clients.model, *part)) * part[0].shape[0]
    return total / n


def probe_point(clients: TorchClients, w: np.ndarray, *, sigma_samples: int, sigma_rng: np.random.Generator,
                hessian_batch: Sequence[torch.Tensor] | None, hessian_rng: np.random.Generator,
                hessian_iters: int = 30, hessian_tol: float = 1e-2,
                previous: tuple[np.ndarray, np.ndarray] | None = None,
                method: str = "exact", hessian_state: dict[str, Any] | None = None,
                hessian_rows: Sequence[int] | None = None, hessian_start: str = "fisher"
                ) -> tuple[dict[str, float], np.ndarray]:
    """The probe quantities at flat parameters ``w`` (see the module docstring); returns (row, ∇F(w)).

    ``previous`` is (w', ∇F(w')) of the previously probed point, for ``L_secant`` (nan without one);
    ``hessian_batch=None`` skips the Hessian (``L_hessian`` nan) and ``sigma_samples=0`` σ².
    ``method="exact"`` (default): σ² exactly from per-sample gradients and the Hessian by Lanczos, stopped
    once its residual bound (``L_hessian_err``) is at most ``hessian_tol`` of the estimate or after
    ``hessian_iters`` products; ``"sampled"``: σ² as the mean over ``sigma_samples`` drawn minibatches
    (reusing the full-batch client gradients) and the Hessian by power iteration, as earlier versions
    measured them.

    Lanczos' first vector (``hessian_start``; it changes how soon the bound is met, never what the bound
    says): ``"fisher"``, the top eigenvector of the empirical Fisher of the per-sample gradients of the
    Hessian batch, which the σ² pass computes anyway (``hessian_rows``: the batch's positions in the
    clients' concatenated data; without them, or with ``sigma_samples=0``, the previous start is used);
    ``"previous"``, the last probe's top eigenvector, kept in ``hessian_state`` (a dict kept between the
    probes of one run); ``"random"``.
    """
    if method not in ("exact", "sampled"):
        raise ConfigError("method", f"unknown probe method {method!r} (allowed: exact, sampled)")
    if hessian_start not in HESSIAN_STARTS:
        raise ConfigError("hessian_start", f"unknown start {hessian_start!r} (allowed: {', '.join(HESSIAN_STARTS)})")
    exact = method == "exact" and isinstance(clients, TorchClients)
    rows = None
    if exact and sigma_samples > 0:
        keep = hessian_rows if hessian_batch is not None and hessian_start == "fisher" else None
        stats, rows = clients.sample_pass(w, keep=keep)
        grads = np.stack([st.grad for st in stats])
        losses = [st.loss for st in stats]
        sig = [st.minibatch_variance(clients.batch_size) for st in stats]
    else:
        grads = client_gradients(clients, w)
        losses = [client_loss(clients, i) for i in range(clients.n_clients)]
        sig = []
        for i in range(clients.n_clients):
            dev = [float(np.sum((clients.stoch_grad(i, w, sigma_rng) - grads[i]) ** 2)) for _ in range(sigma_samples)]
            sig.append(float(np.mean(dev)) if dev else float("nan"))
    g = global_gradient(grads)
    diss = dissimilarity(grads)
    L_h = L_err = float("nan")
    if hessian_batch is not None:
        clients._at(w)
        if exact:
            state = hessian_state if hessian_state is not None else {}
            if hessian_start == "fisher" and rows is not None:
                start = fisher_top_direction(rows, rng=hessian_rng)
            elif hessian_start == "random":
                start = None
            else:  # "previous", or "fisher" without per-sample gradients of the batch
                start = state.get("direction")
            hvp = torch_hvp_reusing(clients.model, clients.loss_fn, hessian_batch)
            L_h, L_err, state["direction"] = lanczos_top_eigenvalue(
                hvp, w.size, iters=hessian_iters, tol=hessian_tol, rng=hessian_rng, start=start)
        else:
            hvp = torch_hvp(clients.model, clients.loss_fn, hessian_batch)
            L_h = hessian_top_eigenvalue(hvp, w.size, iters=hessian_iters, tol=hessian_tol, rng=hessian_rng)
    L_s = secant(w, g, previous)
    row = {
        "loss": float(np.mean(losses)),
        "grad_norm_sq": float(g @ g),
        "client_grad_sq_mean": float(np.mean(np.sum(grads * grads, axis=1))),
        "B_local": local_dissimilarity(grads),
        "grad_diversity": gradient_diversity(grads),
        "zeta2_mean": diss["mean"],
        "zeta2_max": diss["max"],
        "sigma2_mean": float(np.mean(sig)),
        "sigma2_max": float(np.max(sig)),
        "L_hessian": L_h,
        "L_hessian_err": L_err,
        "L_secant": L_s,
    }
    return row, g


def secant(w: np.ndarray, g: np.ndarray, previous: tuple[np.ndarray, np.ndarray] | None) -> float:
    """``L_secant``: ‖∇F(w) − ∇F(w')‖ / ‖w − w'‖ against the previous probe's ``(w', ∇F(w'))`` (nan without
    one, or where w = w')."""
    if previous is None:
        return float("nan")
    dx = float(np.linalg.norm(w - previous[0]))
    return float(np.linalg.norm(g - previous[1]) / dx) if dx > 0 else float("nan")


class Prober:
    """Probes one run's global models: built once from the run's data, partition and model skeleton."""

    def __init__(self, scenario: Any, data: Any, parts: Sequence[np.ndarray], model: torch.nn.Module,
                 settings: ProbeSettings | None = None) -> None:
        self.settings = s = settings or ProbeSettings()
        self.streams = Streams(scenario.seed)
        self.model = copy.deepcopy(model)
        self.model.eval()
        x, y = data.train.x, data.train.y
        datasets, hess_idx, hess_rows = [], [], []
        per_client = max(1, math.ceil(s.hessian_samples / max(1, len(parts))))
        offset = 0
        for i, idx in enumerate(parts):
            idx = np.asarray(idx, dtype=np.int64)
            if s.max_samples_per_client is not None and len(idx) > s.max_samples_per_client:
                idx = np.sort(self.streams.numpy("probe", "client", i).choice(idx, s.max_samples_per_client, replace=False))
            if len(idx) == 0:
                raise ConfigError("partition", f"client {i} has no samples to probe")
            t = torch.as_tensor(idx, device=x.device)  # the run's device (train.device), like the data
            datasets.append((x[t], y[t]))
            take = min(per_client, len(idx))
            chosen = np.sort(self.streams.numpy("probe", "hessian_subset", i).choice(idx, take, replace=False))
            hess_idx.append(chosen)
            # where the chosen samples sit in the clients' concatenated data (idx may hold repeats: first one)
            order = np.argsort(idx, kind="stable")
            hess_rows.append(offset + order[np.searchsorted(idx[order], chosen)])
            offset += len(idx)
        loss = model_loss(getattr(data.train, "task", "classification"))
        self.clients = TorchClients(self.model, datasets, loss, batch_size=scenario.train.batch_size,
                                    chunk=s.chunk)
        h = torch.as_tensor(np.concatenate(hess_idx), device=x.device)
        self.hessian_batch = (x[h], y[h]) if s.hessian_samples > 0 else None
        self.hessian_rows = np.concatenate(hess_rows)  # the Hessian batch's rows in the per-sample pass
        test_x = data.test.x if len(data.test) else x
        n_act = min(s.activation_samples, len(test_x))
        a_idx = np.sort(self.streams.numpy("probe", "activations").choice(len(test_x), n_act, replace=False))
        self.probe_inputs = test_x[torch.as_tensor(a_idx, device=test_x.device)]
        self._previous: tuple[np.ndarray, np.ndarray] | None = None
        self._hessian: dict[str, Any] = {}  # the last probe's top Hessian eigenvector (Lanczos' next start)

    def activations(self, state: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """Per-block activations (conv maps average-pooled) on the probe batch; {} for a model without blocks."""
        self.model.load_state_dict(state)
        if not isinstance(getattr(self.model, "blocks", None), torch.nn.ModuleList):
            return {}
        with _threads(1):
            return probe_activations(self.model, self.probe_inputs, conv="pool")

    def probe(self, state: Mapping[str, torch.Tensor], version: int) -> dict[str, float]:
        """The probe row of global state ``state`` at model version ``version``.

        Probe the versions of a run in increasing order: ``L_secant`` refers to the previous call, and the
        Hessian's Lanczos starts from the previous call's top eigenvector.
        """
        s = self.settings
        self.model.load_state_dict(state)
        w = flat_params(self.model)
        with _threads(1):
            row, g = probe_point(self.clients, w, sigma_samples=s.sigma_samples,
                                 sigma_rng=self.streams.numpy("probe", "sigma2", version),
                                 hessian_batch=self.hessian_batch,
                                 hessian_rng=self.streams.numpy("probe", "hessian", version),
                                 hessian_iters=s.hessian_iters, hessian_tol=s.hessian_tol, previous=self._previous,
                                 method=s.method, hessian_state=self._hessian, hessian_rows=self.hessian_rows,
                                 hessian_start=s.hessian_start)
        self._previous = (w, g)
        return {"version": int(version), **row}


@contextmanager
def _threads(n: int) -> Iterator[None]:
    """One intra-op thread while probing, so reductions (and so the numbers) do not depend on the host.

    numpy's BLAS (Lanczos' reorthogonalisation) is held to ``n`` threads too: on a loaded machine, BLAS
    threads waiting on each other cost more than the small products they split.  Inside an enclosing
    ``_threads(n)`` with the same ``n`` it does nothing (setting the BLAS limit looks up every loaded
    library, a few milliseconds each time)."""
    if _PINNED and _PINNED[-1] == n and torch.get_num_threads() == n:
        yield
        return
    _PINNED.append(n)
    try:
        with _threads_set(n):
            yield
    finally:
        _PINNED.pop()


#: The thread counts of the enclosing :func:`_threads` blocks, innermost last.
_PINNED: list[int] = []


@contextmanager
def _threads_set(n: int) -> Iterator[None]:
    """:func:`_threads`' work: torch's intra-op threads and numpy's BLAS threads set to ``n``, then back."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits  # scikit-learn's dependency, so always installed with fedsim
    except ImportError:  # pragma: no cover - only without scikit-learn
        limits = None
    else:
        limits = threadpool_limits(limits=n, user_api="blas")
    try:
        yield
    finally:
        torch.set_num_threads(old)
        if limits is not None:
            limits.restore_original_limits()


class LiveProbes:
    """A version hook of :class:`fedsim.context.Context`: probes the live global model at version 0, every
    ``every`` versions and at the final version (``eval.probe_every``).  Costs no virtual time."""

    def __init__(self, ctx: Any, every: int, settings: ProbeSettings | None = None) -> None:
        self.every = int(every)
        self.prober = Prober(ctx.scenario, ctx.data, ctx.parts, ctx.training.worker, settings)
        self.rows: list[dict[str, float]] = []

    def __call__(self, ctx: Any, final: bool) -> None:
        v = ctx.version
        if (v % self.every == 0 or final) and not any(r["version"] == v for r in self.rows):
            self.rows.append({**self.prober.probe(ctx.global_state, v), "t": float(ctx.env.now)})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=[*PROBE_COLUMNS, "t"])

    def write(self, path: str | Path) -> None:
        self.frame().to_csv(path, index=False)

    def finish(self, run_dir: str | Path) -> None:
        """End of the run: the probes go to ``probes_live.csv`` in the run folder."""
        self.write(Path(run_dir) / "probes_live.csv")


# ----------------------------------------------------------------------------- a finished run

def checkpoints(run_dir: str | Path) -> dict[int, Path]:
    """The run's saved global states by version (``checkpoints/v{version:06d}.pt``)."""
    out = {}
    for p in sorted(Path(run_dir).glob("checkpoints/v*.pt")):
        try:
            out[int(p.stem[1:])] = p
        except ValueError:
            continue
    return dict(sorted(out.items()))


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    """A saved global state: a regular file of at most ``LIMIT_CHECKPOINT``, read with ``weights_only`` (a
    pickle asking for anything but tensors never runs).  Anything else is one ConfigError naming the file,
    never torch's own advice (which suggests turning the safety off)."""
    from fedsim.errors import ConfigError
    from fedsim.inputfiles import LIMIT_CHECKPOINT, check_input_file, shown_path

    check_input_file(path, "run_dir", "checkpoint", LIMIT_CHECKPOINT)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # an UnpicklingError for a pickle payload, a RuntimeError for a cut file, ...
        why = ("it asks to run code or build objects other than tensors, which a checkpoint never needs"
               if isinstance(exc, pickle.UnpicklingError) else f"{type(exc).__name__}, not a saved state")
        raise ConfigError("run_dir", f"checkpoint {shown_path(path)} was not loaded: {why} (allowed: a state "
                          "dict of tensors as fedsim saves it)") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError("run_dir", f"checkpoint {shown_path(path)} holds a {type(state).__name__}, not a state "
                          "dict of tensors (allowed: a state dict as fedsim saves it)")
    return state


def _local_steps(scenario: Any, parts: Sequence[np.ndarray] | None) -> tuple[float, str]:
    """K of the theorem: ``train.local_steps``, else the largest step count of any client's local epochs."""
    from fedsim.learn.sgd import SGDConfig, num_steps

    t = scenario.train
    if t.local_steps is not None:
        return float(t.local_steps), "train.local_steps"
    cfg = SGDConfig(lr=t.lr, batch_size=t.batch_size, local_steps=None, local_epochs=t.local_epochs)
    return float(max(num_steps(len(p), cfg) for p in parts)), "max over clients of the steps of train.local_epochs"


def _clients_per_version(run_dir: Path, scenario: Any) -> tuple[float, str]:
    """m of the theorem: the fewest updates any aggregation averaged (from the trace), else the algorithm's
    clients_per_round / buffer_size, else 1."""
    from fedsim.sim.trace import iter_blocks, trace_path

    trace_file = trace_path(run_dir)
    if trace_file.exists():  # streamed: only the aggregate records' counts are read
        fewest = min((float(np.nanmin(n)) for b in iter_blocks(trace_file, kinds=("aggregate",), fields=("n_updates",))
                      if len(n := b.num("n_updates")) and not np.isnan(n).all()), default=None)
        if fewest is not None:
            return fewest, "fewest updates averaged into one version (trace)"
    params = scenario.algorithms[0].params if scenario.algorithms else None
    for key in ("clients_per_round", "buffer_size"):
        if params is not None and getattr(params, key, None) is not None:
            return float(getattr(params, key)), f"algorithm.{key}"
    return 1.0, "one update per version"


def summarise_probes(df: pd.DataFrame, scenario: Any, *, K: float | None = None, m: float | None = None,
                     notes: Mapping[str, str] | None = None, settings: ProbeSettings | None = None) -> dict[str, Any]:
    """The constants of ``analysis.theory.local_sgd`` (and the (G, B) assumption) from a probe table.

    Choices (each recorded under ``notes``):

    * ``T`` = the last probed version; ``avg_grad_norm_sq`` = mean of ‖∇F‖² over the probed versions
      before T (all versions when probed every version, otherwise a systematic sample of them);
    * ``L`` = the largest of ``L_hessian`` and ``L_secant`` over the probes; ``L_err`` its stated error: the
      Lanczos residual bound of the probe that gave it when it is a Hessian eigenvalue (0 for a secant,
      which is computed, not estimated; None when the Hessian was estimated without a bound);
    * ``sigma2`` = max over probes of ``sigma2_max`` and ``zeta2`` = max of ``zeta2_max`` (the theorems
      assume uniform bounds over clients and iterates; a run sees them only along its iterates);
    * ``G2``, ``G``, ``B`` from :func:`analysis.estimators.fit_bgd_norms` (envelope fit) over the probes;
    * ``F0_minus_Fstar`` = F(w_0) − min_t F(w_t) over the probes: a lower bound on F(w_0) − f*, so the
      bound evaluated with it is smaller (harder to satisfy) than with the true gap.
    """
    if df.empty:
        raise ConfigError("probes", "no probe rows to summarise")
    df = df.sort_values("version")
    T = int(df["version"].max())
    before = df[df["version"] < T]
    if before.empty:
        before = df
    fit = fit_bgd_norms(df["client_grad_sq_mean"].to_numpy(), df["grad_norm_sq"].to_numpy())
    curv = df[["L_hessian", "L_secant"]].to_numpy(float)
    L = float(curv[np.isfinite(curv)].max()) if np.isfinite(curv).any() else None
    L_err: float | None = None
    if L is not None:
        h = df["L_hessian"].to_numpy(float)
        if np.isfinite(h).any() and float(np.nanmax(h)) >= L:
            err = df["L_hessian_err"].to_numpy(float)[int(np.nanargmax(h))] if "L_hessian_err" in df else float("nan")
            L_err = float(err) if np.isfinite(err) else None
        else:
            L_err = 0.0
    F0 = float(df["loss"].iloc[0])
    algo = scenario.algorithms[0].params if scenario.algorithms else None
    out: dict[str, Any] = {
        "L": L,
        "L_err": L_err,
        "L_hessian": float(df["L_hessian"].max()),
        "L_hessian_err": float(df["L_hessian_err"].max()) if "L_hessian_err" in df and df["L_hessian_err"].notna().any()
        else None,
        "L_secant": float(df["L_secant"].max()) if df["L_secant"].notna().any() else None,
        "sigma2": float(df["sigma2_max"].max()),
        "sigma2_mean": float(df["sigma2_mean"].mean()),
        "zeta2": float(df["zeta2_max"].max()),
        "zeta2_mean": float(df["zeta2_mean"].max()),
        "G2": fit.G2, "G": fit.G, "B": fit.B,
        "B_local_max": float(df["B_local"].replace(np.inf, np.nan).max()),
        "avg_grad_norm_sq": float(before["grad_norm_sq"].mean()),
        "F0": F0,
        # ||grad F(w_0)||^2: the left side of a run that applies no update ("uninformative" compares with it)
        "start_grad_norm_sq": float(df["grad_norm_sq"].iloc[0]) if int(df["version"].iloc[0]) == 0 else None,
        "F_min": float(df["loss"].min()),
        "F0_minus_Fstar": F0 - float(df["loss"].min()),
        "eta_l": float(scenario.train.lr),
        "eta": float(getattr(algo, "server_lr", 1.0) or 1.0),
        "K": K if K is not None else (float(scenario.train.local_steps) if scenario.train.local_steps else None),
        "m": m,
        "T": T,
        "probe_versions": [int(v) for v in df["version"]],
        # ||grad F||^2 at each probed version (Theorem B's left side is their minimum over t < T)
        "grad_norm_sq_by_version": {str(int(v)): float(x) for v, x in zip(df["version"], df["grad_norm_sq"])},
        "notes": {
            "avg_grad_norm_sq": f"mean of ||grad F||^2 over {len(before)} probed versions < T",
            "F0_minus_Fstar": "F(w_0) - min observed F: a lower bound on F(w_0) - f*",
            "L": "max of the top Hessian eigenvalue on a probe subset and the secant between probed versions"
                 + _hessian_error_note(df),
            "sigma2": "max over clients and probes of E||g - grad F_i||^2, minibatch of train.batch_size drawn "
                      "with replacement" + (" (exact, from per-sample gradients)" if "L_hessian_err" in df
                                            and df["L_hessian_err"].notna().any() else " (sampled minibatches)"),
            "zeta2": "max over clients and probes of ||grad F_i - grad F||^2 (along the run's iterates only)",
            **dict(notes or {}),
        },
    }
    if settings is not None:
        out["probe_settings"] = asdict(settings)
    return out


def probe_row_note(measured: Mapping[str, Any], key: str) -> str:
    """The estimator and stated error of a probed constant, for its row of the check table ("" for a
    quantity computed exactly: F, ‖∇F‖², ζ², B-local and the (G, B) fit come from full-batch gradients).

    ``L``: "± err" with the Lanczos residual bound (some eigenvalue of the probe subset's Hessian lies
    within it of the estimate) and the tolerance the probes stopped at; ``sigma2``: exact from per-sample
    gradients, or, for the Monte-Carlo estimator, its relative standard error sqrt(2/N)."""
    probe = measured.get("probe_settings") or {}
    if key == "L":
        err = measured.get("L_err")
        if err is None:
            hess = measured.get("L_hessian")
            return "" if hess is None or not math.isfinite(float(hess)) else \
                "top Hessian eigenvalue by power iteration on a probe subset (no error bound)"
        if err == 0:
            return "from the secant between probed versions (computed, no estimation error)"
        rel = err / abs(float(measured["L"])) if measured.get("L") else float("nan")
        tol = probe.get("hessian_tol")
        return (f"± {err:.3g} ({rel:.2%}): Lanczos residual bound; an eigenvalue of the probe subset's Hessian lies "
                f"within it of this estimate of the top one" + (f" (stopped once below {tol:g} of L)" if tol else ""))
    if key == "sigma2":
        if probe.get("method") == "sampled":
            n = int(probe.get("sigma_samples") or 0)
            return (f"Monte-Carlo mean over {n} minibatches per client: relative s.e. about {math.sqrt(2 / n):.0%}"
                    if n else "")
        return "exact, from every sample's gradient (no sampling error)"
    return ""


def _hessian_error_note(df: pd.DataFrame) -> str:
    """The Hessian estimate's stated error, for the check's notes: the largest Lanczos residual bound
    relative to its estimate over the probes (an eigenvalue lies within it), when measured."""
    if "L_hessian_err" not in df or not df["L_hessian_err"].notna().any():
        return ""
    rel = (df["L_hessian_err"] / df["L_hessian"].abs()).replace(np.inf, np.nan)
    return (f"; top eigenvalue by Lanczos, an eigenvalue within {float(df['L_hessian_err'].max()):.3g} "
            f"(at most {float(rel.max()):.2%} of the estimate) of each probe's value")


def _svcca_or_nan(a: np.ndarray, b: np.ndarray) -> float:
    try:
        return svcca(a, b)
    except ConfigError:   # a layer with zero variance on the probe batch (e.g. all-dead ReLUs)
        return float("nan")


def _probe_setup(run: Path, settings: ProbeSettings) -> tuple[Any, Prober, dict[str, np.ndarray], Any]:
    """The scenario, a :class:`Prober` rebuilt from the run's own inputs (``fedsim.build.prepare_data`` and
    ``build_global_model`` of ``scenario.yaml``), the final model's activations and the prepared data."""
    from fedsim.build import build_global_model, prepare_data
    from fedsim import load_scenario

    scenario = load_scenario(run / "scenario.yaml")
    prepared = prepare_data(scenario)
    model = build_global_model(scenario, prepared.data)
    prober = Prober(scenario, prepared.data, prepared.parts, model, settings)
    final_path = run / "final_model.pt"
    final_state = _load_state(final_path if final_path.exists() else list(checkpoints(run).values())[-1])
    return scenario, prober, prober.activations(final_state), prepared


def _probe_one(prober: Prober, final_acts: Mapping[str, np.ndarray], run: Path, version: int, path: Path,
               store_activations: bool) -> dict[str, float]:
    """One checkpoint's probe row, with SVCCA of each block against the final model's activations."""
    state = _load_state(path)
    row = prober.probe(state, version)
    acts = prober.activations(state)
    for layer, a in acts.items():
        row[f"svcca_final_{layer}"] = _svcca_or_nan(a, final_acts[layer])
    if store_activations:
        (run / "probes").mkdir(exist_ok=True)
        np.savez(run / "probes" / f"activations_v{version:06d}.npz", **acts)
    return row


def ordered(settings: ProbeSettings) -> bool:
    """Whether a probe depends on the one before it beyond ``L_secant``: Lanczos started from the previous
    probe's eigenvector (``hessian_start="previous"``, or ``"fisher"`` without the σ² pass's gradients).
    Such settings probe the checkpoints one after another, in one process."""
    if settings.method != "exact" or settings.hessian_samples <= 0:
        return False
    return settings.hessian_start == "previous" or (settings.hessian_start == "fisher" and settings.sigma_samples <= 0)


#: With ``jobs=None``, at most one process per this many checkpoints (rounded up): a worker first imports
#: torch and rebuilds the run's data and model, so with two checkpoints this process is done with the
#: second before a worker could start it (``cos2p``'s three checkpoints, whole ``fedsim check``, four
#: alternating pairs: 15.9–18.9 s in one process, 13.8–15.7 s in two).
CHECKPOINTS_PER_JOB = 2


def probe_jobs(jobs: int | None, checkpoints_count: int, settings: ProbeSettings) -> int:
    """How many processes probe ``checkpoints_count`` checkpoints: ``jobs`` if given (at most one per
    checkpoint), else one per usable core (as many as torch would use, so ``OMP_NUM_THREADS`` holds) but at
    most one per :data:`CHECKPOINTS_PER_JOB` checkpoints, rounded up; always 1 for :func:`ordered` settings."""
    if jobs is not None:
        from fedsim.sim.executor import check_jobs_count

        check_jobs_count(jobs, "jobs")
    if ordered(settings) or checkpoints_count <= 1:
        return 1
    if jobs is not None:
        return min(jobs, checkpoints_count)
    from fedsim.sim.executor import usable_cores

    return max(1, min(usable_cores(), torch.get_num_threads(), -(-checkpoints_count // CHECKPOINTS_PER_JOB)))


#: A probe worker's own prober and final activations, built once per process by :func:`_worker_start`.
_WORKER: dict[str, Any] = {}


def _worker_start(run: str, settings: ProbeSettings) -> None:
    """Initialise a probe worker process: one intra-op thread, the run's prober and final activations
    (Ctrl-C is ignored here from the start, :func:`fedsim.sim.executor.spawn_pool`: the parent stops it).
    Everything here runs on one thread, numpy's BLAS included, as the parent's share of the work does."""
    _WORKER["threads"] = _threads(1)
    _WORKER["threads"].__enter__()
    _, prober, final_acts, _ = _probe_setup(Path(run), settings)
    _WORKER.update(prober=prober, final_acts=final_acts)


def _worker_probe(run: str, version: int, path: str, store_activations: bool
                  ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """One checkpoint's row in a worker, with its (w, ∇F(w)) for the caller's ``L_secant``."""
    prober: Prober = _WORKER["prober"]
    prober._previous = None  # this worker's last checkpoint is not necessarily the run's previous one
    row = _probe_one(prober, _WORKER["final_acts"], Path(run), version, Path(path), store_activations)
    assert prober._previous is not None
    w, g = prober._previous
    return row, w, g


def _probe_parallel(run: Path, items: list[tuple[int, Path]], setup: Callable[[], tuple[Prober, Mapping[str, np.ndarray]]],
                    settings: ProbeSettings, jobs: int, store_activations: bool, bar: Any) -> list[dict[str, float]]:
    """Probe ``items`` in this process and ``jobs - 1`` spawned workers, each taking the next checkpoint when
    free; ``L_secant`` is then taken in version order, so the rows equal a one-process probe's.  The
    workers start first, so that their start-up overlaps this process's ``setup`` (its prober and the
    final model's activations)."""
    import queue
    import threading

    from fedsim.sim.executor import spawn_pool

    todo = list(reversed(items))  # popped from the end: in version order
    lock = threading.Lock()
    done: "queue.Queue[tuple[int, Any]]" = queue.Queue()
    found: dict[int, tuple[dict[str, float], np.ndarray, np.ndarray]] = {}

    def take() -> tuple[int, Path] | None:
        with lock:
            return todo.pop() if todo else None

    futures: list[Any] = []
    pool, ready = spawn_pool(jobs - 1, _worker_start, (str(run), settings))

    def feed() -> None:
        item = take()
        if item is None:
            return
        try:
            future = pool.submit(_worker_probe, str(run), item[0], str(item[1]), store_activations)
            futures.append(future)
        except RuntimeError:  # the pool is broken or shutting down: this process takes the checkpoint back
            with lock:
                todo.append(item)
            return

        def finished(f: Any, v: int = item[0]) -> None:
            done.put((v, f))
            if not f.cancelled() and f.exception() is None:
                feed()

        future.add_done_callback(finished)

    def collect(wait_s: float) -> None:
        """Take the workers' finished rows, waiting up to ``wait_s`` for the first."""
        while True:
            try:
                v, f = done.get(timeout=wait_s) if wait_s > 0 else done.get_nowait()
            except queue.Empty:
                return
            found[v] = f.result()  # a worker's error is raised here
            if bar is not None:
                bar.update(1)
            wait_s = 0.0

    def started(f: Any) -> None:
        if not f.cancelled() and f.exception() is None:
            feed()

    try:
        for f in ready:  # a worker is given a checkpoint once it has started
            f.add_done_callback(started)
        prober, final_acts = setup()
        while len(found) < len(items):
            item = take()
            if item is None:  # every checkpoint is taken: wait for the workers' (or one handed back)
                collect(0.2)
                continue
            prober._previous = None
            row = _probe_one(prober, final_acts, run, item[0], item[1], store_activations)
            assert prober._previous is not None
            found[item[0]] = (row, *prober._previous)
            if bar is not None:
                bar.update(1)
            collect(0.0)
    finally:
        # Done, or an error, Ctrl-C or SIGTERM here: no worker holds anything to keep (a finished run has
        # every row; a stopped one keeps none), so a worker still starting or probing is stopped now.
        with lock:
            todo.clear()
        for f in list(futures):
            f.cancel()
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            if proc.is_alive():
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
    rows, previous = [], None
    for v, _ in items:  # on one thread, as in the probe itself (numpy's norms: the same sums)
        row, w, g = found[v]
        row["L_secant"] = secant(w, g, previous)
        previous = (w, g)
        rows.append(row)
    return rows


def probe_run(run_dir: str | Path, *, versions: Sequence[int] | None = None,
              max_samples_per_client: int | None = None, settings: ProbeSettings | None = None,
              progress: bool = False, store_activations: bool = False, jobs: int | None = 1) -> pd.DataFrame:
    """Probe every saved checkpoint of a run (or ``versions`` of them); one row per checkpoint.

    Rebuilds data, partition and model skeleton from ``scenario.yaml`` with ``fedsim.build.prepare_data``
    and ``build_global_model`` (the run's own inputs), then adds ``svcca_final_<block>``: SVCCA (99% of
    the variance kept) of each block's activations against the final model's.  Writes ``probes.csv``,
    merges :func:`summarise_probes` into ``measured.json`` (keys it does not produce are kept) and, with
    ``store_activations``, ``probes/activations_v{version:06d}.npz``.

    ``jobs``: processes probing the checkpoints side by side (:func:`probe_jobs`; None: one per usable core
    where there are enough checkpoints, what ``fedsim check`` does).  Each probe runs on one intra-op thread
    whatever ``jobs`` is, and its random choices are keyed by version, so the table is the same for any
    ``jobs``.  The workers are spawned processes: a script that asks for more than one calls this under
    ``if __name__ == "__main__":``, as for any spawned process, since each worker imports the script.
    """
    run = Path(run_dir)
    found = checkpoints(run)
    if not found:
        raise ConfigError("run_dir", f"no checkpoints in {str(run)!r} (run with output.checkpoints=N)")
    if versions is not None:
        lost = [v for v in versions if v not in found]
        if lost:
            raise ConfigError("versions", f"no checkpoint for version(s) {lost} (saved: {list(found)})")
        found = {v: found[v] for v in sorted(set(versions))}
    settings = settings or ProbeSettings()
    if max_samples_per_client is not None:
        settings = replace(settings, max_samples_per_client=max_samples_per_client)
    n_jobs = probe_jobs(jobs, len(found), settings)
    built: dict[str, Any] = {}

    def setup() -> tuple[Prober, Mapping[str, np.ndarray]]:
        built["scenario"], prober, final_acts, built["prepared"] = _probe_setup(run, settings)
        return prober, final_acts

    items = list(found.items())
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(items), desc="probing checkpoints", unit="ckpt", dynamic_ncols=True)
    # One thread (torch and numpy's BLAS) throughout, whatever ``jobs`` is, as the run itself computed
    # (``fedsim.runner``): the data are rebuilt and SVCCA's SVDs taken with the same bits in any process,
    # and processes side by side do not each start a thread per core and wait on each other.
    try:
        with _threads(1):
            if n_jobs > 1:
                rows = _probe_parallel(run, items, setup, settings, n_jobs, store_activations, bar)
            else:
                prober, final_acts = setup()
                rows = []
                for v, path in items:
                    rows.append(_probe_one(prober, final_acts, run, v, path, store_activations))
                    if bar is not None:
                        bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    df = pd.DataFrame(rows)
    df.to_csv(run / "probes.csv", index=False)
    scenario, prepared = built["scenario"], built["prepared"]
    K, k_note = _local_steps(scenario, prepared.parts)
    m, m_note = _clients_per_version(run, scenario)
    measured = summarise_probes(df, scenario, K=K, m=m, notes={"K": k_note, "m": m_note}, settings=settings)
    from analysis.constants import as_json, certified_constants

    # the constants the run's own data certify (a linear model's smoothness, F*, ...): analysis.constants
    measured["certified"] = as_json(certified_constants(scenario, prepared))
    path = run / "measured.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, **measured}, indent=2), encoding="utf-8")
    return df


def ensure_probes(run_dir: str | Path, *, progress: bool = False,
                  settings: ProbeSettings | None = None, jobs: int | None = 1) -> pd.DataFrame | None:
    """The run's probe table, measuring it first when needed (what ``fedsim check`` does).

    ``probes.csv`` if present (and, when ``settings`` are given, measured with them, as ``measured.json``
    records; otherwise the checkpoints are probed again); else, with checkpoints, :func:`probe_run` with
    ``settings`` (default :class:`ProbeSettings`; ``fedsim check --exact-probes`` passes
    :data:`EXACT_PROBES`) in ``jobs`` processes; else ``probes_live.csv`` (its summary merged into ``measured.json``); else None.
    """
    run = Path(run_dir)
    if (run / "probes.csv").exists() and (settings is None or not checkpoints(run) or _probed_with(run) == asdict(settings)):
        return pd.read_csv(run / "probes.csv")
    if checkpoints(run):
        return probe_run(run, progress=progress, settings=settings, jobs=jobs)
    live = run / "probes_live.csv"
    if live.exists() and (run / "scenario.yaml").exists():
        from fedsim import load_scenario

        df = pd.read_csv(live)
        if df.empty:
            return None
        scenario = load_scenario(run / "scenario.yaml")
        parts = None
        if scenario.train.local_steps is None:
            from fedsim.build import prepare_data

            parts = prepare_data(scenario).parts
        K, k_note = _local_steps(scenario, parts or [])
        m, m_note = _clients_per_version(run, scenario)
        measured = summarise_probes(df, scenario, K=K, m=m, notes={"K": k_note, "m": m_note, "source": "probes_live.csv"})
        if str(scenario.model.name) in ("linear", "logreg") or parts is not None:
            from analysis.constants import as_json, certified_constants
            from fedsim.build import prepare_data

            measured["certified"] = as_json(certified_constants(scenario, prepare_data(scenario)))
        path = run / "measured.json"
        old = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**old, **measured}, indent=2), encoding="utf-8")
        return df
    return None


def _probed_with(run: Path) -> dict[str, Any] | None:
    """The probe settings ``measured.json`` records for the run's ``probes.csv`` (None if unrecorded)."""
    path = run / "measured.json"
    try:
        return json.loads(path.read_text()).get("probe_settings") if path.exists() else None
    except (OSError, ValueError):
        return None


def bound_curve(df: pd.DataFrame, measured: Mapping[str, Any]) -> pd.DataFrame:
    """Measured running average (1/t) Σ_{s<t} ‖∇F(w_s)‖² (over probed versions) against the local-SGD
    bound of Yang, Fang & Liu evaluated with the run's constants at T = t, for every probed t > 0."""
    from analysis.theory import local_sgd

    df = df.sort_values("version")
    rows = []
    need = ("eta_l", "K", "m", "L", "sigma2", "zeta2", "F0_minus_Fstar")
    ok = all(measured.get(k) is not None for k in need)
    for t in df["version"]:
        if t <= 0:
            continue
        before = df[df["version"] < t]
        rhs = float("nan")
        if ok:
            rhs = local_sgd.bound(eta_l=float(measured["eta_l"]), K=float(measured["K"]), m=float(measured["m"]),
                                  T=float(t), L=float(measured["L"]), sigma2=float(measured["sigma2"]),
                                  zeta2=float(measured["zeta2"]), F0_minus_Fstar=float(measured["F0_minus_Fstar"]),
                                  eta=float(measured.get("eta", 1.0) or 1.0))
        rows.append({"T": int(t), "avg_grad_norm_sq": float(before["grad_norm_sq"].mean()), "bound": rhs})
    return pd.DataFrame(rows, columns=["T", "avg_grad_norm_sq", "bound"])


def probe_figures(df: pd.DataFrame, measured: Mapping[str, Any], out: str | Path) -> list[str]:
    """Figures of a probe table into ``out``: dissimilarity over versions, ‖∇F‖² against the local-SGD
    bound, SVCCA of each block against the final model.  Returns the file names written."""
    from fedsim.output.report import new_figure, save_figure  # plain Figure objects: no pyplot, nothing left held

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    df = df.sort_values("version")
    written = []

    fig, ax = new_figure(figsize=(4.8, 3.2))
    ax.plot(df["version"], df["zeta2_mean"], marker=".", label=r"$\zeta^2$ mean$_i$")
    ax.plot(df["version"], df["zeta2_max"], marker=".", label=r"$\zeta^2$ max$_i$")
    ax.set(xlabel="model version", ylabel=r"$\|\nabla F_i - \nabla F\|^2$", title="Client gradient dissimilarity")
    ax2 = ax.twinx()
    ax2.plot(df["version"], df["B_local"], color="tab:red", linestyle="--", marker=".", label="B-local")
    ax2.set_ylabel("B-local dissimilarity", color="tab:red")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8)
    save_figure(fig, out / "dissimilarity_over_versions.png", dpi=110)
    written.append("dissimilarity_over_versions.png")

    curve = bound_curve(df, measured)
    fig, ax = new_figure(figsize=(4.8, 3.2))
    ax.plot(df["version"], df["grad_norm_sq"], marker=".", linestyle=":", color="tab:gray", label=r"$\|\nabla F(w_t)\|^2$")
    if len(curve):
        ax.plot(curve["T"], curve["avg_grad_norm_sq"], marker=".", label="running average (measured)")
        finite = np.isfinite(curve["bound"])
        if finite.any():
            ax.plot(curve["T"][finite], curve["bound"][finite], label="local-SGD bound (Yang et al. Thm 1)")
        else:
            ax.text(0.5, 0.9, "bound not finite (step-size condition fails)", transform=ax.transAxes,
                    ha="center", fontsize=8)
    if (df["grad_norm_sq"] > 0).all():
        ax.set_yscale("log")
    ax.set(xlabel="model version T", ylabel="squared gradient norm", title="Gradient norm vs bound")
    ax.legend(fontsize=7)
    save_figure(fig, out / "grad_norm_vs_bound.png", dpi=110)
    written.append("grad_norm_vs_bound.png")

    cols = [c for c in df.columns if c.startswith("svcca_final_")]
    if cols:
        layers = [c[len("svcca_final_"):] for c in cols]
        versions = list(df["version"])
        final = max(versions)
        show = sorted({versions[0], *(v for v in versions[-2:-1] if v != final), versions[len(versions) // 2]} - {final}) \
            or [versions[0]]
        fig, ax = new_figure(figsize=(4.8, 3.2))
        for v in show:
            vals = df.loc[df["version"] == v, cols].iloc[0].to_numpy(float)
            ax.plot(range(len(layers)), vals, marker="o", label=f"version {v}")
        ax.set_xticks(range(len(layers)), layers, rotation=30, fontsize=8)
        ax.set(xlabel="block", ylabel="SVCCA with final model", ylim=(0, 1.05), title=f"SVCCA by layer vs version {final}")
        ax.legend(fontsize=8)
        save_figure(fig, out / "svcca_by_layer.png", dpi=110)
        written.append("svcca_by_layer.png")
    return written
