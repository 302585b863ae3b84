"""EmbracingFL's SVCCA study (Fig. 1 and Fig. 3): how alike the clients' layers stay under partial sync.

m client models start from one initialisation and train on their own (non-IID) data with fedsim's local
SGD, ``sync_every`` steps at a time.  After every period a *scheme* averages part of the models across the
clients (with the one masked weighted average; unsynchronised entries stay local), and the layer-wise
maximum pairwise SVCCA (:func:`analysis.similarity.max_pairwise_svcca`, top 4 directions, conv maps
average-pooled) is measured on held-out inputs every client model sees.

Schemes: ``none`` (independent training, Fig. 1); ``second_half`` (the output-side half of the blocks,
EmbracingFL's layer-wise partial sync, Fig. 3a/b); ``first_half`` (the input-side half, InclusiveFL-like,
Fig. 3b); ``channels`` (the first half of the output channels of every layer, Fig. 3a's channel-wise
sync; the paper does not say which half).  "Half" of an odd number of blocks rounds the synced part down.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch

from analysis.estimators import probe_activations
from analysis.similarity import max_pairwise_svcca
from fedsim.messages import Update
from fedsim.learn.state import masked_weighted_average
from fedsim.algorithms.embracingfl import block_keys
from fedsim.errors import ConfigError
from fedsim.learn.models import BlockModel
from fedsim.learn.sgd import SGDConfig, local_sgd

__all__ = ["SCHEMES", "sync_masks", "svcca_study", "depth_spearman"]

SCHEMES = ("none", "second_half", "first_half", "channels")


def sync_masks(model: BlockModel, scheme: str) -> dict[str, torch.Tensor]:
    """0/1 mask per floating state entry: 1 where ``scheme`` synchronises it."""
    if scheme not in SCHEMES:
        raise ConfigError("scheme", f"unknown sync scheme {scheme!r} (allowed: {', '.join(SCHEMES)})")
    state = model.state_dict()
    n = model.num_blocks()
    half = n // 2
    chosen: set[str] = set()
    if scheme == "second_half":
        chosen = set(block_keys(model, n - half))
    elif scheme == "first_half":
        chosen = set(block_keys(model, 0, half))
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if not torch.is_floating_point(v):
            continue
        m = torch.zeros_like(v)
        if scheme == "channels":
            if v.dim() >= 1:
                m[: math.ceil(v.shape[0] / 2)] = 1.0
        elif k in chosen:
            m[...] = 1.0
        out[k] = m
    return out


def svcca_study(build: Callable[[], BlockModel], x: torch.Tensor, y: torch.Tensor, parts: Sequence[np.ndarray],
                probe_x: torch.Tensor, *, scheme: str = "none", iterations: int = 100, sync_every: int = 10,
                sgd: SGDConfig | None = None, seed: int = 0, task: str = "classification",
                measure_every: int = 1) -> pd.DataFrame:
    """Train ``len(parts)`` clients from one initialisation for ``iterations`` local steps, syncing per
    ``scheme`` every ``sync_every`` steps; returns rows (iteration, layer, depth, svcca) measured after
    every ``measure_every`` periods (and at iteration 0 and the end), SVCCA being the maximum over client
    pairs on ``probe_x``."""
    base = build()
    init = {k: v.detach().clone() for k, v in base.state_dict().items()}
    m = len(parts)
    if m < 2:
        raise ConfigError("parts", f"need at least 2 clients, got {m}")
    sgd = sgd or SGDConfig(lr=0.05, momentum=0.0, batch_size=32)
    period = SGDConfig(**{**sgd.__dict__, "local_steps": int(sync_every), "local_epochs": None})
    states = [{k: v.clone() for k, v in init.items()} for _ in range(m)]
    masks = sync_masks(base, scheme)
    gens = [torch.Generator().manual_seed(int(seed) * 100_003 + i) for i in range(m)]
    rows: list[dict] = []

    def measure(it: int) -> None:
        acts = []
        for st in states:
            base.load_state_dict(st)
            acts.append(probe_activations(base, probe_x, conv="pool"))
        s = max_pairwise_svcca(acts, keep=4)
        for depth, (layer, val) in enumerate(s.items()):
            rows.append({"iteration": it, "layer": layer, "depth": depth, "svcca": float(val), "scheme": scheme})

    measure(0)
    it, period_no = 0, 0
    while it < iterations:
        period_no += 1
        for i in range(m):
            base.load_state_dict(states[i])
            local_sgd(base, x, y, parts[i], period, gens[i], task=task)
            states[i] = {k: v.detach().clone() for k, v in base.state_dict().items()}
        it += sync_every
        if scheme != "none":
            ups = [Update(client=i, tensors=states[i], mask=masks) for i in range(m)]
            avg = masked_weighted_average(ups, states[0])
            for i in range(m):
                states[i] = {k: (torch.where(masks[k] > 0, avg[k], v) if k in masks else v) for k, v in states[i].items()}
        if period_no % max(1, int(measure_every)) == 0 or it >= iterations:
            measure(it)
    return pd.DataFrame(rows)


def depth_spearman(df: pd.DataFrame) -> float:
    """Spearman correlation of layer depth with SVCCA at the last measured iteration (Fig. 1 predicts < 0)."""
    from scipy.stats import spearmanr

    last = df[df["iteration"] == df["iteration"].max()]
    return float(spearmanr(last["depth"], last["svcca"]).statistic)


# ---------------------------------------------------------------------------------------------- theory

def _partition_index(model: torch.nn.Module, frozen: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks over the flat parameter vector (``flat_params`` order): y = blocks[:frozen], z = the rest."""
    ys = []
    for name, p in model.named_parameters():
        ys.append(np.full(p.numel(), int(name.split(".")[1]) < frozen))
    y = np.concatenate(ys) if ys else np.zeros(0, dtype=bool)
    return y, ~y


def _lemma2_bound(eta: float, tau: float, L: float, sigma2: float, sigma_bar2: float, grad2: float) -> float:
    """Lemma 2's right-hand side for one partition (per-client average); inf when A = 2η²L²τ(τ−1) ≥ 1."""
    A = 2 * eta**2 * L**2 * tau * (tau - 1)
    if A >= 1 or L <= 0:
        return math.inf
    return float(eta**2 * tau * (tau - 1) / (1 - A) * sigma2 + 2 * tau * A / ((1 - A) * L**2) * (sigma_bar2 + grad2))


def partition_probes(run_dir: str, *, sigma_samples: int = 8, progress: bool = False) -> tuple[pd.DataFrame, dict]:
    """EmbracingFL's §4.9 quantities at every checkpoint of a run, split into y (blocks frozen by the
    weakest client type present, trained by the strong clients only) and z (trained by everyone).

    Per checkpoint: ‖∇_y F‖², ‖∇_z F‖² (F = the unweighted mean of the clients' full-batch losses, as in
    the paper); σ_k² (max over clients of the mean squared deviation of a minibatch gradient of
    ``train.batch_size``); σ̄_k² (max over clients of ‖∇_k F_i − ∇_k F‖²); the strong-subset deviation
    ‖∇_y F_s − ∇_y F‖² with F_s the strong clients' mean; the model discrepancy of Lemma 2 measured by
    re-running τ plain-SGD steps (the theorem's local update, no momentum) of step η from the checkpoint on
    every client (y over the strong clients, z over all).  L_k is the largest secant
    ‖∇_k F(x) − ∇_k F(x')‖ / ‖x − x'‖ between consecutive checkpoints (a lower bound on the true L_k).
    Returns the table and the summary (keys of :mod:`analysis.theory.embracingfl`).
    """
    from pathlib import Path

    from analysis.probes import Prober, ProbeSettings, _load_state, _threads, checkpoints
    from fedsim.build import build_global_model, prepare_data
    from fedsim import load_scenario
    from fedsim.sim.trace import load_trace

    run = Path(run_dir)
    scenario = load_scenario(run / "scenario.yaml")
    trace = load_trace(run / "trace.jsonl")
    info = trace[trace["kind"] == "client_types"]
    if info.empty:
        raise ConfigError("run_dir", f"{str(run)!r} has no client_types event (not an EmbracingFL run)")
    info = info.iloc[0]
    types = list(info["types"])
    present = [t for t in ("weak", "moderate") if t in types]
    frozen = int(info["frozen_blocks"][present[0]]) if present else 0
    strong = [i for i, t in enumerate(types) if t == "strong"]
    asg = trace[trace["kind"] == "assignment"]
    per_round = asg.groupby("round")["client_type"].agg(list) if len(asg) else pd.Series(dtype=object)
    s_round = float(np.mean([sum(t == "strong" for t in r) for r in per_round])) if len(per_round) else float(len(strong))
    m_round = float(np.mean([len(r) for r in per_round])) if len(per_round) else float(len(types))
    prepared = prepare_data(scenario)
    model = build_global_model(scenario, prepared.data)
    prober = Prober(scenario, prepared.data, prepared.parts, model, ProbeSettings(hessian_samples=0))
    clients = prober.clients
    y_idx, z_idx = _partition_index(prober.model, frozen)
    eta, tau = float(scenario.train.lr), float(scenario.train.local_steps or 1)
    plain = SGDConfig(lr=eta, momentum=0.0, batch_size=scenario.train.batch_size, local_steps=int(tau), local_epochs=None)
    items = list(checkpoints(run).items())
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="EmbracingFL partition probes", unit="ckpt", dynamic_ncols=True)
    rows, prev = [], None
    with _threads(1):   # tiny models: one thread is fastest and leaves the other cores alone
        for v, path in items:
            rows.append(_partition_row(prober, clients, strong, frozen, y_idx, z_idx, plain, tau, sigma_samples,
                                       int(v), _load_state(path), prev))
            prev = rows[-1].pop("_point")
    df = pd.DataFrame(rows)
    L_y = float(np.nanmax(df["L_y_secant"])) if df["L_y_secant"].notna().any() else float("nan")
    L_z = float(np.nanmax(df["L_z_secant"])) if df["L_z_secant"].notna().any() else float("nan")
    for k, L in (("y", L_y), ("z", L_z)):
        df[f"lemma2_bound_{k}"] = [_lemma2_bound(eta, tau, L, r[f"sigma_{k}2"], r[f"sigma_bar_{k}2"], r[f"grad_{k}_sq"])
                                   for _, r in df.iterrows()]
    summary = {
        "frozen_blocks_y": frozen, "s": s_round, "m": m_round, "eta": eta, "tau": tau,
        "L_y": L_y, "L_z": L_z,
        "sigma_y2": float(df["sigma_y2"].max()), "sigma_z2": float(df["sigma_z2"].max()),
        "sigma_bar_y2": float(df["sigma_bar_y2"].max()), "sigma_bar_z2": float(df["sigma_bar_z2"].max()),
        "strong_subset_dev": float(df["strong_subset_dev"].mean()),
        "avg_grad_y_sq": float(df["grad_y_sq"].mean()), "avg_grad_z_sq": float(df["grad_z_sq"].mean()),
    }
    return df, summary


def _partition_row(prober: Any, clients: Any, strong: list[int], frozen: int, y_idx: np.ndarray, z_idx: np.ndarray,
                   plain: SGDConfig, tau: float, sigma_samples: int, v: int, state: Any, prev: Any) -> dict:
    """One checkpoint's row of :func:`partition_probes` (plus ``_point`` = (w, ∇F(w)) for the next secant)."""
    from analysis.estimators import flat_params, global_gradient

    prober.model.load_state_dict(state)
    w = flat_params(prober.model)
    grads = np.stack([clients.grad(i, w) for i in range(clients.n_clients)])
    g = global_gradient(grads)
    rng = np.random.default_rng(1000 + v)
    sig_y, sig_z = [], []
    for i in range(clients.n_clients):
        dev = [clients.stoch_grad(i, w, rng) - grads[i] for _ in range(sigma_samples)]
        sig_y.append(float(np.mean([d[y_idx] @ d[y_idx] for d in dev])))
        sig_z.append(float(np.mean([d[z_idx] @ d[z_idx] for d in dev])))
    dev_all = grads - g
    gs = grads[strong].mean(axis=0) if strong else np.full_like(g, np.nan)
    disc_y, disc_z = [], []
    for i in range(clients.n_clients):
        prober.model.load_state_dict(state)
        xs, ys_ = clients.datasets[i]
        gen = torch.Generator().manual_seed(7919 * v + i)
        tot_y = tot_z = 0.0
        # a partial client trains z only (its y stays frozen), as in the run
        params = None if (i in strong or frozen == 0) else [p for b in prober.model.blocks[frozen:] for p in b.parameters()]
        one = SGDConfig(**{**plain.__dict__, "local_steps": 1})
        for _ in range(int(tau) - 1):   # Σ_{j=0}^{τ-1} ‖x_{t,j} − x_t‖²: the point after j steps, j < τ
            local_sgd(prober.model, xs, ys_, np.arange(len(xs)), one, gen, params=params)
            d = flat_params(prober.model) - w
            tot_y += float(d[y_idx] @ d[y_idx])
            tot_z += float(d[z_idx] @ d[z_idx])
        if i in strong:
            disc_y.append(tot_y)
        disc_z.append(tot_z)
    row = {
        "version": int(v), "grad_y_sq": float(g[y_idx] @ g[y_idx]), "grad_z_sq": float(g[z_idx] @ g[z_idx]),
        "sigma_y2": float(np.max(sig_y)), "sigma_z2": float(np.max(sig_z)),
        "sigma_bar_y2": float(np.max(np.sum(dev_all[:, y_idx] ** 2, axis=1))),
        "sigma_bar_z2": float(np.max(np.sum(dev_all[:, z_idx] ** 2, axis=1))),
        "strong_subset_dev": float(np.sum((gs[y_idx] - g[y_idx]) ** 2)),
        "discrepancy_y": float(np.mean(disc_y)) if disc_y else float("nan"),
        "discrepancy_z": float(np.mean(disc_z)),
        "L_y_secant": float("nan"), "L_z_secant": float("nan"),
    }
    if prev is not None:
        dx = float(np.linalg.norm(w - prev[0]))
        if dx > 0:
            row["L_y_secant"] = float(np.linalg.norm(g[y_idx] - prev[1][y_idx]) / dx)
            row["L_z_secant"] = float(np.linalg.norm(g[z_idx] - prev[1][z_idx]) / dx)
    row["_point"] = (w, g)
    return row


def ensure_partition_probes(run_dir: str, *, progress: bool = False) -> tuple[pd.DataFrame, dict]:
    """``partition_probes`` once per run: cached in ``embracingfl_probes.csv``; the summary is merged
    into ``measured.json`` (overriding the generic probe's ``eta``, ``m``: here η is the local step size
    and m the clients per round of the theorem)."""
    import json
    from pathlib import Path

    run = Path(run_dir)
    csv = run / "embracingfl_probes.csv"
    path = run / "measured.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    if csv.exists() and "embracingfl" in old:
        return pd.read_csv(csv), dict(old["embracingfl"])
    df, summary = partition_probes(str(run), progress=progress)
    df.to_csv(csv, index=False)
    path.write_text(json.dumps({**old, **summary, "embracingfl": summary}, indent=2), encoding="utf-8")
    return df, summary


def partition_rows(df: pd.DataFrame, summary: dict) -> list:
    """The y/z rows of ``fedsim check`` (measured, bound or expectation, holds, note)."""
    from analysis.theory.base import Check, le

    k = int(summary["frozen_blocks_y"])
    y, z = f"y (blocks 0..{k - 1}, strong only)", f"z (blocks {k}.., everyone)"
    rows = [
        Check(f"{y}: mean ||grad_y F||^2", summary["avg_grad_y_sq"], None, None, f"{len(df)} checkpoints"),
        Check(f"{z}: mean ||grad_z F||^2", summary["avg_grad_z_sq"], None, None, f"{len(df)} checkpoints"),
        Check(f"{y}: sigma_y^2", summary["sigma_y2"], None, None, "max over clients and checkpoints"),
        Check(f"{z}: sigma_z^2", summary["sigma_z2"], None, None, "max over clients and checkpoints"),
        Check(f"{y}: sigma_bar_y^2", summary["sigma_bar_y2"], None, None, "max_i ||grad_y F_i - grad_y F||^2"),
        Check(f"{z}: sigma_bar_z^2", summary["sigma_bar_z2"], None, None, "max_i ||grad_z F_i - grad_z F||^2"),
        Check(f"{y}: L_y (secant)", summary["L_y"], None, None, "largest secant between checkpoints"),
        Check(f"{z}: L_z (secant)", summary["L_z"], None, None, "largest secant between checkpoints"),
        Check("strong clients per round s / clients per round m", summary["s"], summary["m"], None,
              "s (measured) against m (bound column)"),
    ]
    for part in ("y", "z"):
        d = df[[f"discrepancy_{part}", f"lemma2_bound_{part}"]].dropna()
        if d.empty:
            continue
        ratio = d[f"discrepancy_{part}"] / d[f"lemma2_bound_{part}"]
        worst = d.loc[ratio.idxmax()]
        rows.append(le(f"Lemma 2: model discrepancy {part} (worst checkpoint)", float(worst[f"discrepancy_{part}"]),
                       float(worst[f"lemma2_bound_{part}"]),
                       f"{int((ratio <= 1).sum())}/{len(d)} checkpoints within; plain SGD of step eta re-run from each"))
    return rows


def late_gradient_norms(run_dir: str, last: int = 3) -> dict[str, float]:
    """‖∇F‖², ‖∇_y F‖² and ‖∇_z F‖² (F the unweighted mean of the clients' full-batch losses) averaged over
    the last ``last`` checkpoints of an EmbracingFL run, plus the mean training loss there: the error floor
    of Theorem 1 / Remark 2 as the run approaches it."""
    from pathlib import Path

    from analysis.estimators import flat_params, global_gradient
    from analysis.probes import Prober, ProbeSettings, _load_state, checkpoints, client_loss
    from fedsim.build import build_global_model, prepare_data
    from fedsim import load_scenario
    from fedsim.sim.trace import load_trace

    run = Path(run_dir)
    scenario = load_scenario(run / "scenario.yaml")
    info = load_trace(run / "trace.jsonl").query("kind == 'client_types'").iloc[0]
    present = [t for t in ("weak", "moderate") if t in list(info["types"])]
    frozen = int(info["frozen_blocks"][present[0]]) if present else int(info["frozen_blocks"].get("weak", 0))
    prepared = prepare_data(scenario)
    model = build_global_model(scenario, prepared.data)
    prober = Prober(scenario, prepared.data, prepared.parts, model, ProbeSettings(hessian_samples=0))
    y_idx, z_idx = _partition_index(prober.model, frozen)
    vals = []
    for _, path in list(checkpoints(run).items())[-last:]:
        prober.model.load_state_dict(_load_state(path))
        w = flat_params(prober.model)
        grads = np.stack([prober.clients.grad(i, w) for i in range(prober.clients.n_clients)])
        g = global_gradient(grads)
        loss = float(np.mean([client_loss(prober.clients, i) for i in range(prober.clients.n_clients)]))
        vals.append((float(g @ g), float(g[y_idx] @ g[y_idx]), float(g[z_idx] @ g[z_idx]), loss))
    a = np.mean(vals, axis=0)
    return {"grad_sq": float(a[0]), "grad_y_sq": float(a[1]), "grad_z_sq": float(a[2]), "train_loss": float(a[3])}
