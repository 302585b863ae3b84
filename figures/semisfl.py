"""SemiSFL (Xu et al.): accuracy against time and traffic, the Dirichlet sweep, adaptive K_s, R_h, the
projection-head ablation and the communication crossover, at a scale that runs on two CPU cores.

    python -m figures.semisfl --out DIR [--quick] [--seeds 0 1 2 3 4] [--stability-seeds 5 6 7 8 9]

Every figure is written as a PNG next to the CSV of exactly what it plots; tables are CSV and Markdown.
The runs (trace, metrics, summary) are kept under ``DIR/runs``.

Scale (documented, not the paper's): sklearn digits (1,797 8x8 images) with 100 labeled on the server
and the rest unlabeled on N = 10 clients (the code's per-client Dirichlet), N_h = 5 per round, the
fedsim CNN cut after its two conv blocks (d = 128 features), B = 16, K_u = 5, K_s from 20, queue 256,
κ = 0.2, τ = 0.8 (0.95 leaves almost every digit masked in so few rounds), a 64-32 MLP head, windows of
2 rounds and R_h over 5 of them, 24 rounds instead of 1,000 (``--quick``: 12), constant learning rate.
Sized to keep the recipe near a quarter of an hour on two shared cores (a round is ≈ 0.5 s of simulated time
and a few wall seconds): 24 rounds, and the Dirichlet sweep at Dir(1.0), Dir(0.1), Dir(0.05) (IID only with
``--quick``), the settings the claims read.
Weak view = crop (digits are not flip-invariant), strong view = RandAugment-like (n = 2, m = 10) +
Cutout.  Links: the ``semisfl-edge``
channel preset (0.8–8 Mbps up, 10–20 Mbps down, redrawn per transmission); three Jetson profiles.

* ``time_traffic``: test accuracy (teacher; SemiFL: the global model) against simulated time and against
  total traffic under Dir(0.1): SemiSFL, FedSwitch-SL, SemiSFL without adaptation, the full-model FL
  baselines SemiFL, FedSwitch and FedMatch (simplified, see ``fedsim.algorithms.semifl``), and Supervised-only
  against time; ``time_traffic_to_target.csv``: time and MB to 80 % accuracy.
* ``dirichlet``: final accuracy under IID and Dir(1.0, 0.1, 0.05) for SemiSFL and FedSwitch-SL
  (Tables III/IV style), Supervised-only as the reference.
* ``adaptive_ks``: adaptive (paper and code versions) vs fixed K_s = 20 with 50 labels, Supervised-only
  on the same 50 labels as the reference; the K_s trace.
* ``r_h``: R_h over rounds for fixed K_s = 20 and K_s = 5 (Fig. 3b).
* ``head``: projection head none / linear / MLP under Dir(0.1) (Table V).
* ``claims.md``: the paper's claims judged per seed by ``figures.claims.RULES`` (the main runs evaluated every
  ``EVAL_S`` = 0.1 s of simulated time, the same for every method), and the choices that matter:
  FedSwitch-SL's server view (weak, or strong: its own runs), the K_s controller (the paper's or the authors'
  code) and the evaluation clock (0.1 s, or every rounds/12 rounds re-read from it).
* ``crossover``: traffic per round of SFL (features × K_u + 3 bottoms) vs FL (2 full models) for the
  code's SVHN CNN, CIFAR AlexNet and STL-10 VGG13-BN, from parameter counts of those architectures
  alone (no training), against K_u.
"""
from __future__ import annotations

import argparse
import functools
import math
import copy
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from fedsim.sim.trace import load_trace  # noqa: E402
from figures.claims import (Choice, Claim, Judgement, acc_resolution, add_seed_arguments, censor,  # noqa: E402
                            chance_gate, claim, claims_of, clock_ok, commit_hash, default_seeds, judge, judge_acc,
                            ratio_resolution, render_claims, seeds_args, verdicts_of)
from figures.common import Job, on_version_clock, run_jobs, save, test_size  # noqa: E402

BASE: dict[str, Any] = {
    "name": "semisfl-figure",
    "seed": 0,
    "data": {"name": "digits", "num_clients": 10,
             "partition": {"method": "dirichlet_client", "alpha": 0.1, "min_size": 16}},
    "model": {"name": "cnn"},
    "train": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "batch_size": 16, "local_steps": 5},
    "devices": {"mix": [{"profile": "jetson-nano"}, {"profile": "jetson-xavier-nx-8gb"},
                        {"profile": "jetson-agx-orin-32gb"}], "jitter": 0.1},
    "channel": {"preset": "semisfl-edge"},
    "network": {"latency_s": 0.0},
    "stop": {"max_versions": 60},
    "eval": {"every_versions": 5},
    "output": {"figures": False, "flush_every": 2048},
}
ALGO: dict[str, Any] = {"cut": 2, "clients_per_round": 5, "labeled": 100, "k_s": 20, "tau": 0.8, "queue_size": 256,
                        "weak": "crop", "strong": "randaugment", "window": 2, "periods": 5}
LABELS = {"semisfl": "SemiSFL", "fedswitch-sl": "FedSwitch-SL", "semisfl-fixed": "SemiSFL w/o adaptation",
          "fedswitch-sl-strong": "FedSwitch-SL (strong server view)",
          "semifl": "SemiFL", "fedswitch": "FedSwitch", "fedmatch": "FedMatch", "supervised-only": "Supervised-only"}
FL_KEYS = ("clients_per_round", "labeled", "k_s", "tau", "weak", "strong")
#: the evaluation clock of the main runs (virtual s), the same for every method: no coarser than 5% of the
#: smallest time to target compared (each time-to-target row checks it)
EVAL_S = 0.1
PARTS = {"iid": {"method": "iid"}, **{f"dir{a}": {"method": "dirichlet_client", "alpha": a, "min_size": 16}
                                      for a in (1.0, 0.1, 0.05)}}


def algorithm(method: str, **extra: Any) -> dict[str, Any]:
    """The algorithm mapping of one method (``semisfl-fixed`` = SemiSFL with adapt: none)."""
    if method == "fedswitch-sl-strong":  # the choices table's other reading of FedSwitch-SL
        return {"name": "fedswitch-sl", **ALGO, "server_view": "strong", **extra}
    if method == "semisfl-fixed":
        return {"name": "semisfl", **ALGO, "adapt": "none", **extra}
    if method == "supervised-only":  # the server alone: no client phase
        return {"name": method, **ALGO, "clients_per_round": 0, **extra}
    if method in ("semifl", "fedswitch", "fedmatch"):  # full-model FL: no cut, head, queue or controller
        return {"name": method, **{k: ALGO[k] for k in FL_KEYS}, **extra}
    return {"name": method, **ALGO, **extra}


def job(key: tuple, algo: dict[str, Any], seed: int, *, part: str = "dir0.1", rounds: int = 60) -> Job:
    m = copy.deepcopy(BASE)
    m["seed"] = seed
    m["algorithm"] = algo
    m["data"]["partition"] = copy.deepcopy(PARTS[part])
    m["stop"] = {"max_versions": rounds}
    # the main runs (time to target, the final accuracies) on a virtual-time clock, the same for every method;
    # the others read rounds (K_s, R_h traces) and their final accuracy
    m["eval"] = ({"every_versions": None, "every_s": EVAL_S} if key[0] == "main"
                 else {"every_versions": max(1, rounds // 12)})
    return Job(key, m)


def _final(results: dict, key: tuple) -> float:
    return 100.0 * float(results[key]["summary"]["final_accuracy"])


# ------------------------------------------------------------------------------------------------ recipes

MAIN = ("semisfl", "fedswitch-sl", "semisfl-fixed", "semifl", "fedswitch", "fedmatch", "fedswitch-sl-strong",
        "supervised-only")


def time_traffic_jobs(seeds: Sequence[int], rounds: int) -> list[Job]:
    return [job(("main", "dir0.1", a, s), algorithm(a), s, rounds=rounds) for s in seeds for a in MAIN]


def time_traffic(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for a in MAIN:
        for s in seeds:
            for _, r in results["main", "dir0.1", a, s]["metrics"].iterrows():
                rows.append({"method": LABELS[a], "seed": s, "round": int(r["version"]), "time_s": float(r["t"]),
                             "traffic_mb": (float(r["bytes_up"]) + float(r["bytes_down"])) / 1e6,
                             "accuracy": float(r["accuracy"])})
    table = pd.DataFrame(rows)
    table.to_csv(out / "time_traffic.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method, g in table.groupby("method", sort=False):
        m = g.groupby("round")[["time_s", "traffic_mb", "accuracy"]].mean()
        axes[0].plot(m["time_s"], m["accuracy"], label=method)
        if method != LABELS["supervised-only"]:
            axes[1].plot(m["traffic_mb"], m["accuracy"], label=method)
    axes[0].set(xlabel="simulated time (s)", ylabel="test accuracy (teacher)", title="(a) accuracy vs time, Dir(0.1)")
    axes[1].set(xlabel="traffic, up + down (MB)", ylabel="test accuracy (teacher)", title="(b) accuracy vs traffic")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    save(fig, out / "time_traffic.png")
    return table


def target_table(results: dict, seeds: Sequence[int], target: float, out: Path) -> pd.DataFrame:
    """Time-to-target and MB-to-target (first evaluation at or above ``target``), mean over seeds reaching it."""
    rows = []
    for a in MAIN[:-1]:
        t, mb, hit = [], [], 0
        for s in seeds:
            m = results["main", "dir0.1", a, s]["metrics"]
            ok = m[m["accuracy"] >= target]
            if len(ok):
                hit += 1
                t.append(float(ok["t"].iloc[0]))
                mb.append((float(ok["bytes_up"].iloc[0]) + float(ok["bytes_down"].iloc[0])) / 1e6)
        rows.append({"method": LABELS[a], "target": target, "seeds_reaching": hit, "seeds": len(seeds),
                     "time_to_target_s": float(np.mean(t)) if t else float("nan"),
                     "mb_to_target": float(np.mean(mb)) if mb else float("nan")})
    df = pd.DataFrame(rows)
    df.to_csv(out / "time_traffic_to_target.csv", index=False)
    return df


def dirichlet_jobs(seeds: Sequence[int], rounds: int, parts: Sequence[str]) -> list[Job]:
    return [job(("main", p, a, s), algorithm(a), s, part=p, rounds=rounds)
            for s in seeds for p in parts for a in ("semisfl", "fedswitch-sl")] + \
           [job(("main", "dir0.1", "supervised-only", s), algorithm("supervised-only"), s, rounds=rounds) for s in seeds]


def dirichlet(results: dict, seeds: Sequence[int], parts: Sequence[str], out: Path) -> pd.DataFrame:
    recs = []
    for p in parts:
        for a in ("semisfl", "fedswitch-sl"):
            accs = [_final(results, ("main", p, a, s)) for s in seeds]
            recs.append({"partition": p, "method": LABELS[a], "mean": float(np.mean(accs)), "std": float(np.std(accs)),
                         "values": " ".join(f"{v:.2f}" for v in accs)})
    if ("main", "dir0.1", "fedswitch-sl-strong", seeds[0]) in results:
        accs = [_final(results, ("main", "dir0.1", "fedswitch-sl-strong", s)) for s in seeds]
        recs.append({"partition": "dir0.1", "method": LABELS["fedswitch-sl-strong"], "mean": float(np.mean(accs)),
                     "std": float(np.std(accs)), "values": " ".join(f"{v:.2f}" for v in accs)})
    sup = [_final(results, ("main", "dir0.1", "supervised-only", s)) for s in seeds]
    recs.append({"partition": "server only", "method": LABELS["supervised-only"], "mean": float(np.mean(sup)),
                 "std": float(np.std(sup)), "values": " ".join(f"{v:.2f}" for v in sup)})
    df = pd.DataFrame(recs)
    df.to_csv(out / "dirichlet.csv", index=False)
    md = ["| Method | " + " | ".join(parts) + " |", "|" + "---|" * (len(parts) + 1)]
    for a in ("semisfl", "fedswitch-sl"):
        cells = [f"{r['mean']:.1f}±{r['std']:.1f}" for _, r in df[df["method"] == LABELS[a]].iterrows()]
        md.append(f"| {LABELS[a]} | " + " | ".join(cells) + " |")
    md.append(f"| {LABELS['supervised-only']} | " + " | ".join([f"{np.mean(sup):.1f}±{np.std(sup):.1f}"] * len(parts)) + " |")
    (out / "dirichlet.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = np.arange(len(parts))
    for i, a in enumerate(("semisfl", "fedswitch-sl")):
        g = df[df["method"] == LABELS[a]]
        ax.bar(xs + (i - 0.5) * 0.38, g["mean"], 0.38, yerr=g["std"], label=LABELS[a], capsize=3)
    ax.axhline(np.mean(sup), color="grey", ls="--", label=LABELS["supervised-only"])
    ax.set_xticks(xs, list(parts))
    ax.set(ylabel="final test accuracy (%)", title="non-IID level (per-client Dirichlet)")
    ax.set_ylim(max(0, df["mean"].min() - 15), 100)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    save(fig, out / "dirichlet.png")
    return df


KS_VARIANTS = {"adaptive (paper)": ("semisfl", {"adapt": "paper"}), "adaptive (code)": ("semisfl", {"adapt": "code"}),
               "fixed K_s = 20": ("semisfl", {"adapt": "none"}), "Supervised-only": ("supervised-only", {})}


def adaptive_jobs(seeds: Sequence[int], rounds: int, labeled: int) -> list[Job]:
    return [job(("ks", v, s), algorithm(method, labeled=labeled, **extra), s, rounds=rounds)
            for s in seeds for v, (method, extra) in KS_VARIANTS.items()]


def adaptive(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for v in KS_VARIANTS:
        for s in seeds:
            res = results["ks", v, s]
            acc = res["metrics"].set_index("version")["accuracy"]
            for _, r in res["rounds"].iterrows():
                rnd = int(r["round"])
                rows.append({"variant": v, "seed": s, "round": rnd, "k_s": int(r["k_s"]),
                             "accuracy": float(acc.get(rnd, np.nan))})
    table = pd.DataFrame(rows)
    table.to_csv(out / "adaptive_ks.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for v, g in table.groupby("variant", sort=False):
        m = g.groupby("round")[["accuracy", "k_s"]].mean()
        a = m["accuracy"].dropna()
        axes[0].plot(a.index, a.values, marker="o", ms=3, label=v)
        axes[1].step(m.index, m["k_s"], where="post", label=v)
    axes[0].set(xlabel="round", ylabel="test accuracy (teacher)", title="(a) accuracy, 50 labels")
    axes[1].set(xlabel="round", ylabel="K_s (mean over seeds)", title="(b) K_s trace")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    save(fig, out / "adaptive_ks.png")
    return table


def _rh_key(k: int, s: int) -> tuple:
    """Fixed K_s = 20 is the main comparison's 'SemiSFL w/o adaptation' run; K_s = 5 is its own."""
    return ("main", "dir0.1", "semisfl-fixed", s) if k == ALGO["k_s"] else ("rh", k, s)


def r_h_jobs(seeds: Sequence[int], rounds: int) -> list[Job]:
    return [job(_rh_key(k, s), algorithm("semisfl-fixed", k_s=k), s, rounds=rounds) for s in seeds for k in (20, 5)]


def r_h(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for k in (20, 5):
        for s in seeds:
            for _, r in results[_rh_key(k, s)]["rounds"].iterrows():
                rows.append({"k_s": k, "seed": s, "round": int(r["round"]), "r_h": float(r["r_h"]),
                             "f_s": float(r["f_s"]), "f_u": float(r["f_u"])})
    table = pd.DataFrame(rows)
    table.to_csv(out / "r_h.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, g in table.groupby("k_s", sort=False):
        m = g.groupby("round")["r_h"].mean().dropna()
        ax.plot(m.index, m.values, label=f"K_s = {k} (fixed)")
    ax.set(xlabel="round", ylabel="R_h (share of windows where f_u fell faster)", title="R_h over rounds")
    ax.grid(alpha=0.3)
    ax.legend()
    save(fig, out / "r_h.png")
    return table


HEADS = ("none", "linear", "mlp")


def head_jobs(seeds: Sequence[int], rounds: int, parts: Sequence[str]) -> list[Job]:
    out = []
    for s in seeds:
        for p in parts:
            for h in HEADS:
                key = ("main", p, "semisfl", s) if h == "mlp" else ("head", p, h, s)
                out.append(job(key, algorithm("semisfl", head=h), s, part=p, rounds=rounds))
    return out


def head(results: dict, seeds: Sequence[int], parts: Sequence[str], out: Path) -> pd.DataFrame:
    recs = []
    for p in parts:
        for h in HEADS:
            key = (lambda s: ("main", p, "semisfl", s)) if h == "mlp" else (lambda s: ("head", p, h, s))
            accs = [_final(results, key(s)) for s in seeds]
            recs.append({"partition": p, "head": h, "mean": float(np.mean(accs)), "std": float(np.std(accs)),
                         "values": " ".join(f"{v:.2f}" for v in accs)})
    df = pd.DataFrame(recs)
    df.to_csv(out / "head.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = np.arange(len(parts))
    for i, h in enumerate(HEADS):
        g = df[df["head"] == h]
        ax.bar(xs + (i - 1) * 0.27, g["mean"], 0.27, yerr=g["std"], label=h, capsize=3)
    ax.set_xticks(xs, list(parts))
    ax.set(ylabel="final test accuracy (%)", title="projection head ablation")
    ax.set_ylim(max(0, df["mean"].min() - 15), 100)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    save(fig, out / "head.png")
    return df


# ------------------------------------------------------------------------------------------------ cost model

def code_models() -> dict[str, tuple[nn.Module, nn.Module, tuple[int, ...]]]:
    """(bottom, top, input shape) of the SemiSFL code's SVHN CNN, CIFAR-10 AlexNet and STL-10 VGG13-BN."""
    cnn_b = nn.Sequential(nn.Conv2d(3, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(), nn.MaxPool2d(2))
    cnn_t = nn.Sequential(nn.Flatten(), nn.Linear(1600, 512), nn.ReLU(), nn.Linear(512, 10))
    alex_b = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    alex_t = nn.Sequential(nn.Flatten(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(),
                           nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    layers: list[nn.Module] = []
    cin = 3
    for i, (c, n) in enumerate(((64, 2), (128, 2), (256, 2), (512, 2), (512, 2))):
        for _ in range(n):
            layers += [nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            cin = c
        layers.append(nn.MaxPool2d(2, padding=1 if i == 3 else 0))
    vgg_b = nn.Sequential(*layers)
    vgg_t = nn.Sequential(nn.Flatten(), nn.Linear(4608, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                          nn.Dropout(), nn.Linear(4096, 10))
    return {"CNN (SVHN)": (cnn_b, cnn_t, (3, 32, 32)), "AlexNet (CIFAR-10)": (alex_b, alex_t, (3, 32, 32)),
            "VGG13-BN (STL-10)": (vgg_b, vgg_t, (3, 96, 96))}


def model_sizes() -> pd.DataFrame:
    """Bottom/top parameter counts and the cut-layer width of each code model (fp32 bytes = 4 × params).
    Counted once per process (building the code models, AlexNet's 33M parameters among them, is most of
    the cost): a copy of the table each call."""
    return _model_sizes().copy()


@functools.lru_cache(maxsize=1)
def _model_sizes() -> pd.DataFrame:
    rows = []
    for name, (b, t, shape) in code_models().items():
        with torch.no_grad():
            d = int(b.eval()(torch.zeros(1, *shape)).numel())
        rows.append({"model": name, "bottom_params": sum(p.numel() for p in b.parameters()),
                     "top_params": sum(p.numel() for p in t.parameters()), "d_feat": d})
    return pd.DataFrame(rows)


def round_traffic(bottom: int, top: int, d: int, k_u: int, batch: int, n_h: int) -> tuple[float, float]:
    """Bytes per round for n_h clients: (SFL, FL).  SFL: 2|w_c| down + |w_c| up + K_u·(2·B·d up + B·d down)·4;
    FL: the full model down and up (2|w|)."""
    sfl = n_h * (3 * 4 * bottom + k_u * 3 * batch * d * 4)
    fl = n_h * 2 * 4 * (bottom + top)
    return float(sfl), float(fl)


def crossover(out: Path, batch: int = 64, n_h: int = 10) -> pd.DataFrame:
    sizes = model_sizes()
    rows = []
    for _, r in sizes.iterrows():
        for k_u in (1, 2, 5, 10, 20, 50, 100):
            sfl, fl = round_traffic(int(r["bottom_params"]), int(r["top_params"]), int(r["d_feat"]), k_u, batch, n_h)
            rows.append({"model": r["model"], "bottom_params": int(r["bottom_params"]), "top_params": int(r["top_params"]),
                         "d_feat": int(r["d_feat"]), "k_u": k_u, "batch": batch, "clients": n_h,
                         "sfl_gb_per_round": sfl / 1e9, "fl_gb_per_round": fl / 1e9, "sfl_over_fl": sfl / fl})
    df = pd.DataFrame(rows)
    df.to_csv(out / "crossover.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, g in df.groupby("model", sort=False):
        ax.plot(g["k_u"], g["sfl_over_fl"], marker="o", label=name)
    ax.axhline(1.0, color="grey", ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="K_u (split iterations per round)", ylabel="SFL traffic / FL traffic per round",
           title=f"communication crossover (B = {batch}, cost model only)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    save(fig, out / "crossover.png")
    return df


# ------------------------------------------------------------------------------------------------ entry point

def _finals_by(table: pd.DataFrame, col: str, value: str) -> np.ndarray:
    """Per seed (in seed order): the accuracy (in %) at the last evaluated round of ``col == value``."""
    g = table[table[col] == value].dropna(subset=["accuracy"]).sort_values("round").groupby("seed").tail(1)
    return 100.0 * g.sort_values("seed")["accuracy"].to_numpy(float)


def _values(df: pd.DataFrame, **where: Any) -> np.ndarray:
    """The per-seed ``values`` of the one row of a table matching ``where``."""
    sel = df
    for k, v in where.items():
        sel = sel[sel[k] == v]
    return np.array([float(x) for x in str(sel["values"].iloc[0]).split()])


#: chance accuracy on digits' 10 classes (%): accuracy rows are judged only clearly above it
CHANCE = 10.0


def _diff_of_gaps(effect: Sequence[float], accs: tuple, n: int, paper: float | None = None) -> Judgement:
    """A difference of two accuracy gaps (a1 − b1) − (a2 − b2) per seed: its test-set resolution is the four
    accuracies' binomial errors together, and every one of them must be clearly above chance."""
    a1, b1, a2, b2 = ([float(x) for x in v] for v in accs)
    res = [math.hypot(r1, r2) for r1, r2 in zip(acc_resolution(a1, b1, n), acc_resolution(a2, b2, n))]
    gate = chance_gate([float(np.mean(v)) for v in (a1, b1, a2, b2) if len(v)], CHANCE, n)
    return judge(list(effect), paper, resolution=res, res_name=f"test-set sampling of four accuracies, n = {n}",
                 unit=" pts", na=gate)


def claims(t: dict[str, Any], seeds: Sequence[int], *, fss: str = LABELS["fedswitch-sl"],
           controller: str = "adaptive (paper)", eval_s: float | None = None) -> list[Claim]:
    """The paper's claims against this recipe's tables (``make_all``'s dict, with ``test_n``, ``eval_s`` and
    ``budget``); every cell and verdict by :data:`figures.claims.RULES`, one row per part.  ``fss``: the
    FedSwitch-SL run of the Dir(0.1) comparisons, ``controller``: the adaptive K_s variant (the choices table
    swaps in the alternative readings)."""
    out = []
    n = int(t["test_n"])
    acc = lambda a, b, paper=None: judge_acc(a, b, paper, n_test=n, chance=CHANCE)  # noqa: E731
    eval_s = t["eval_s"] if eval_s is None else eval_s
    cx = t["crossover"]
    at = cx[cx["k_u"] == 50].set_index("model")["sfl_over_fl"]
    for model, more in (("CNN (SVHN)", True), ("AlexNet (CIFAR-10)", False), ("VGG13-BN (STL-10)", False)):
        r = float(at[model])
        out.append(claim(f"Communication cost model (code's models, B = 64, K_u = 50): SFL traffic per round "
                         f"{'above' if more else 'below'} FL's, {model}; effect {'r − 1' if more else '1 − r'} of r = SFL/FL",
                         "SFL costs more" if more else "SFL costs less",
                         judge([r - 1 if more else 1 - r], exact=True, digits=2)))
    tt = t["time_traffic"]
    mb = tt.sort_values("round").groupby(["method", "seed"]).tail(1).set_index(["method", "seed"])["traffic_mb"]
    out.append(claim("Measured traffic follows it for a tiny model: SemiSFL's whole-run traffic above SemiFL's",
                     "SVHN: SFL costs more than FL", judge([float(mb[LABELS["semisfl"], s] - mb[LABELS["semifl"], s])
                                                           for s in seeds], unit=" MB")))
    ks = t["adaptive_ks"]
    dr = t["dirichlet"]
    a50, s50 = _finals_by(ks, "variant", controller), _finals_by(ks, "variant", "Supervised-only")
    a100, s100 = _values(dr, partition="dir0.1", method=LABELS["semisfl"]), _values(dr, method=LABELS["supervised-only"])
    g50, g100 = a50 - s50, a100 - s100
    out.append(claim("Semi-supervised SemiSFL beats Supervised-only, 50 labels", "CIFAR-10: 88.6 vs 75.1 (+13.5)",
                     acc(a50, s50, 13.5)))
    out.append(claim("Semi-supervised SemiSFL beats Supervised-only, 100 labels", "CIFAR-10: 88.6 vs 75.1 (+13.5)",
                     acc(a100, s100, 13.5)))
    out.append(claim("... by more with fewer labels (gain at 50 − gain at 100)", "more with fewer labels",
                     _diff_of_gaps(g50 - g100, (a50, s50, a100, s100), n)))
    out.append(claim("Adaptive K_s beats fixed K_s = 20 with few labels (50)", "+10.8 points, 250 labels (Fig. 11)",
                     acc(a50, _finals_by(ks, "variant", "fixed K_s = 20"), 10.8)))
    a = ks[ks["variant"] == controller].sort_values("round")
    drop = (a.groupby("seed")["k_s"].first() - a.groupby("seed")["k_s"].last()).sort_index()
    out.append(claim("K_s decays with few labels (first − last K_s per seed)", "mostly below 30 from 100 (Fig. 11b)",
                     judge(drop.to_numpy(float), digits=0)))
    rh = t["r_h"].dropna(subset=["r_h"])
    if len(rh):
        r0 = int(rh["round"].min())
        at0 = rh[rh["round"] == r0].pivot_table(index="seed", columns="k_s", values="r_h").sort_index()
        j = judge((at0.get(20, np.nan) - at0.get(5, np.nan)).to_numpy(float), digits=2)
        out.append(claim(f"R_h rises sooner with a larger K_s (R_h at round {r0}, K_s = 20 − K_s = 5)",
                         "Fig. 3b: K_s = 100 above K_s = 20 early", j))
    else:
        out.append(Claim("R_h rises sooner with a larger K_s", "Fig. 3b", "no full span of indicators within the run", "n/a"))
    parts = [p for p in ("iid", "dir1.0", "dir0.1", "dir0.05") if ((dr["partition"] == p) & (dr["method"] == LABELS["semisfl"])).any()]
    paper_gap = {"dir1.0": 1.5, "dir0.05": 5.1}
    gaps, pairs = {}, {}
    for p in parts:
        other = fss if p == "dir0.1" else LABELS["fedswitch-sl"]
        pairs[p] = (_values(dr, partition=p, method=LABELS["semisfl"]), _values(dr, partition=p, method=other))
        gaps[p] = pairs[p][0] - pairs[p][1]
        out.append(claim(f"SemiSFL above FedSwitch-SL, {p}", f"+{paper_gap[p]:g} points (Table IV)" if p in paper_gap
                         else "above (Table IV)", acc(*pairs[p], paper_gap.get(p))))
    if "dir1.0" in gaps and "dir0.05" in gaps:
        # the paper's claim is that SemiSFL's *advantage* grows: a seed points its way only when the gap grew and
        # SemiSFL is ahead at Dir 0.05 (a deficit that shrinks is not an advantage that grows)
        growth = np.minimum(gaps["dir0.05"] - gaps["dir1.0"], gaps["dir0.05"])
        out.append(claim("... more as skew rises (gap at Dir 0.05 − gap at Dir 1.0, counted only where SemiSFL is "
                         "ahead at Dir 0.05)", "+3.6 points",
                         _diff_of_gaps(growth, (*pairs["dir0.05"], *pairs["dir1.0"]), n, 3.6)))
        out.append(claim("SemiSFL's accuracy falls as skew rises (Dir 1.0 − Dir 0.05)", "87.9 → 82.3 (5.6 points)",
                         acc(_values(dr, partition="dir1.0", method=LABELS["semisfl"]),
                             _values(dr, partition="dir0.05", method=LABELS["semisfl"]), 5.6)))
    me = _finals_by(tt, "method", LABELS["semisfl"])
    for m, paper in (("semifl", 83.8 - 78.9), ("fedswitch", 83.8 - 79.4), ("fedmatch", 83.8 - 79.7)):
        out.append(claim(f"SemiSFL above {LABELS[m]} (Dir 0.1)", f"83.8 vs {83.8 - paper:.1f} (+{paper:.1f})",
                         acc(me, _finals_by(tt, "method", LABELS[m]), paper)))
    target = float(t["target"])
    budget = float(t["budget"])

    def times(method: str) -> tuple[list[float], list[bool]]:
        g = tt[tt["method"] == method]
        return censor([float(g[(g["seed"] == s) & (g["accuracy"] >= target)]["time_s"].min()) for s in seeds],
                      float(g["time_s"].max()) if len(g) else budget)

    mine, n_me = times(LABELS["semisfl"])
    for m, paper in ((fss, 113.6 / 86.5), (LABELS["semifl"], None), (LABELS["fedswitch"], None),
                     (LABELS["fedmatch"], None)):
        other, n_o = times(m)
        text = f"SemiSFL reaches {100 * target:.0f}% before {m}" + ("" if paper is None else " (factor)")
        ptext = "CIFAR-10, 80%: 86.5 vs 113.6 min (1.31×)" if paper else "86.5 vs 279.9–702.4 min"
        if all(n_me) and all(n_o):
            out.append(Claim(text, ptext, f"neither reaches {100 * target:.0f}%", "n/a"))
        elif not clock_ok(eval_s, mine + other):
            out.append(Claim(text, ptext, f"evaluation clock {eval_s:g} s coarser than 5% of the smallest time "
                             f"({min(mine + other):.2f} s)", "n/a"))
        else:
            # the other method never reaching the target bounds the effect from below (in the claim's favour)
            cen = [("both" if x and y else "high" if x else "low" if y else False) for x, y in zip(n_me, n_o)]
            j = (judge([b / a for a, b in zip(mine, other)], paper, ratio=True, digits=2,
                       resolution=ratio_resolution(mine, other, eval_s), res_name=f"both clocks, tick {eval_s:g} s",
                       censored=cen) if paper
                 else judge([b - a for a, b in zip(mine, other)], resolution=eval_s,
                            res_name=f"one tick of the {eval_s:g} s clock", unit=" s", censored=cen))
            out.append(claim(text, ptext, Judgement(j.verdict, j.cell + "; SemiSFL " + " / ".join(
                (">" if c else "") + f"{x:.1f}" for x, c in zip(mine, n_me)) + " s")))
    hd = t["head"]
    hv = {h: _values(hd, head=h) for h in HEADS}
    out.append(claim("Projection head: linear above none (Dir 0.1)", "82.9 vs 82.8 (+0.1, Table V)",
                     acc(hv["linear"], hv["none"], 0.1)))
    out.append(claim("Projection head: MLP above linear (Dir 0.1)", "83.8 vs 82.9 (+0.9, Table V)",
                     acc(hv["mlp"], hv["linear"], 0.9)))
    return out


def choices(t: dict[str, Any], seeds: Sequence[int], used: list[Claim]) -> list[Choice]:
    """FedSwitch-SL's server view, the K_s controller and the evaluation clock, each with the verdicts of the
    rows it moves (the alternatives are runs of their own, or the same runs re-read)."""
    strong = claims(t, seeds, fss=LABELS["fedswitch-sl"] + " (strong server view)")
    code = claims(t, seeds, controller="adaptive (code)")
    coarse_tt = pd.concat([on_version_clock(g.rename(columns={"time_s": "t", "round": "updates"}), t["version_clock"])
                           .rename(columns={"t": "time_s", "updates": "round"})
                           for _, g in t["time_traffic"].groupby(["method", "seed"], sort=False)], ignore_index=True)
    # the round clock's resolution is its longest interval between two evaluations (and the 5% check on it)
    gaps = [float(np.diff(g["time_s"].sort_values().to_numpy(float)).max())
            for _, g in coarse_tt.groupby(["method", "seed"]) if len(g) > 1]
    coarse_tick = max(gaps) if gaps else math.inf
    coarse = claims({**t, "time_traffic": coarse_tt}, seeds, eval_s=coarse_tick)
    vs_fss = ("SemiSFL above FedSwitch-SL, dir0.1", "before FedSwitch-SL")
    ks_rows = ("Adaptive K_s", "K_s decays", "Semi-supervised SemiSFL beats Supervised-only, 50", "... by more")
    return [Choice("FedSwitch-SL's server view of the labeled data", "weak",
                   "the paper credits strong-augmentation supervised training to SemiSFL alone",
                   {"weak": verdicts_of(used, vs_fss), "strong": verdicts_of(strong, vs_fss)}),
            Choice("the K_s controller", "the paper's (Eqs. 9-10)", "the paper's text; the authors' code differs",
                   {"paper": verdicts_of(used, ks_rows), "authors' code": verdicts_of(code, ks_rows)}),
            Choice("evaluation clock", f"every {t['eval_s']:g} s of virtual time, every method",
                   "no coarser than 5% of the smallest time compared (checked per row)",
                   {"virtual-time clock": verdicts_of(used, ("SemiSFL reaches",)),
                    f"every {t['version_clock']} rounds (emulated from the fine clock; tick up to {coarse_tick:.1f} s)":
                        verdicts_of(coarse, ("SemiSFL reaches",))})]


def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             progress: bool = True, rounds: int | None = None,
             stability_seeds: Sequence[int] | None = None) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables, their CSVs and ``claims.md`` into ``out``
    (``rounds``: rounds per run, default 12 quick, 24 full; ``stability_seeds``: the recipe again on them
    under ``out/stability``, every claims row checked against it)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds, stability_seeds = default_seeds(quick, seeds, stability_seeds)
    stab = None
    if stability_seeds:
        stab = claims_of(make_all(out / "stability", quick=quick, seeds=stability_seeds, progress=progress,
                                  rounds=rounds, stability_seeds=[])["claims"])
    rounds = rounds if rounds is not None else (12 if quick else 24)
    head_parts = ("dir0.1",)
    dir_parts = ("iid", "dir0.1") if quick else ("dir1.0", "dir0.1", "dir0.05")
    jobs = (time_traffic_jobs(seeds, rounds) + dirichlet_jobs(seeds, rounds, dir_parts)
            + adaptive_jobs(seeds, rounds, 50) + r_h_jobs(seeds, rounds) + head_jobs(seeds, rounds, head_parts))
    # a finished run of the identical scenario is reused, so an interrupted recipe resumes
    results = run_jobs(jobs, out, label="SemiSFL", progress=progress, resume=True)
    for res in results.values():
        res["rounds"] = load_trace(res["dir"], kinds=("semisfl_round",))
    tables = {"time_traffic": time_traffic(results, seeds, out),
              "to_target": target_table(results, seeds, 0.8, out),
              "dirichlet": dirichlet(results, seeds, dir_parts, out),
              "adaptive_ks": adaptive(results, seeds, out), "r_h": r_h(results, seeds, out),
              "head": head(results, seeds, head_parts, out), "crossover": crossover(out)}
    command = "python -m figures.semisfl" + (" --quick" if quick else "") + seeds_args(seeds, stability_seeds)
    tables.update(test_n=test_size(job(("n",), algorithm("semisfl"), seeds[0]).mapping), eval_s=EVAL_S, target=0.8,
                  budget=float(tables["time_traffic"]["time_s"].max()), version_clock=max(1, rounds // 12))
    rows = claims(tables, seeds)
    (out / "claims.md").write_text(render_claims(rows, command=command, seeds=seeds, commit=commit_hash(),
                                                 choices=choices(tables, seeds, rows), stability=stab,
                                                 stability_seeds=stability_seeds), encoding="utf-8")
    tables["claims"] = pd.DataFrame([c.__dict__ for c in rows])
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.semisfl", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="two seeds, 12 rounds, fewer settings")
    add_seed_arguments(p)
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds, stability_seeds=args.stability_seeds)
    print(f"SemiSFL figures and tables written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
