"""SemiSFL (Xu et al.): accuracy against time and traffic, the Dirichlet sweep, adaptive K_s, R_h, the
projection-head ablation and the communication crossover, at a scale that runs on two CPU cores.

    python -m figures.semisfl --out DIR [--quick] [--seeds 0 1 2]

Every figure is written as a PNG next to the CSV of exactly what it plots; tables are CSV and Markdown.
The runs (trace, metrics, summary) are kept under ``DIR/runs``.

Scale (documented, not the paper's): sklearn digits (1,797 8x8 images) with 100 labeled on the server
and the rest unlabeled on N = 10 clients (the code's per-client Dirichlet), N_h = 5 per round, the
fedsim CNN cut after its two conv blocks (d = 128 features), B = 16, K_u = 5, K_s from 20, queue 256,
κ = 0.2, τ = 0.8 (0.95 leaves almost every digit masked in so few rounds), a 64-32 MLP head, windows of
2 rounds and R_h over 5 of them, 40 rounds instead of 1,000 (``--quick``: 12), constant learning rate.
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
* ``crossover``: traffic per round of SFL (features × K_u + 3 bottoms) vs FL (2 full models) for the
  code's SVHN CNN, CIFAR AlexNet and STL-10 VGG13-BN, from parameter counts of those architectures
  alone (no training), against K_u.
"""
from __future__ import annotations

import argparse
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
from figures.claims import Claim, commit_hash, fmt, monotone, render_claims, verdict  # noqa: E402
from figures.common import Job, run_jobs, save  # noqa: E402

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
          "semifl": "SemiFL", "fedswitch": "FedSwitch", "fedmatch": "FedMatch", "supervised-only": "Supervised-only"}
FL_KEYS = ("clients_per_round", "labeled", "k_s", "tau", "weak", "strong")
PARTS = {"iid": {"method": "iid"}, **{f"dir{a}": {"method": "dirichlet_client", "alpha": a, "min_size": 16}
                                      for a in (1.0, 0.1, 0.05)}}


def algorithm(method: str, **extra: Any) -> dict[str, Any]:
    """The algorithm mapping of one method (``semisfl-fixed`` = SemiSFL with adapt: none)."""
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
    m["eval"]["every_versions"] = max(1, rounds // 12)
    return Job(key, m)


def _final(results: dict, key: tuple) -> float:
    return 100.0 * float(results[key]["summary"]["final_accuracy"])


# ------------------------------------------------------------------------------------------------ recipes

MAIN = ("semisfl", "fedswitch-sl", "semisfl-fixed", "semifl", "fedswitch", "fedmatch", "supervised-only")


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
    """Bottom/top parameter counts and the cut-layer width of each code model (fp32 bytes = 4 × params)."""
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

def _final_by(table: pd.DataFrame, col: str) -> pd.Series:
    """Per ``col`` value: the seed mean of the accuracy (in %) at each seed's last evaluated round."""
    last = table.dropna(subset=["accuracy"]).sort_values("round").groupby([col, "seed"]).tail(1)
    return 100.0 * last.groupby(col, sort=False)["accuracy"].mean()


def claims(t: dict[str, pd.DataFrame], seeds: Sequence[int]) -> list[Claim]:
    """The paper's claims against this recipe's tables (``make_all``'s dict); every cell and verdict is
    computed here from those numbers."""
    out = []
    cx = t["crossover"]
    at = cx[cx["k_u"] == 50].set_index("model")["sfl_over_fl"]
    cnn, alex, vgg = (float(at[m]) for m in ("CNN (SVHN)", "AlexNet (CIFAR-10)", "VGG13-BN (STL-10)"))
    out.append(Claim("Communication crossover from the cost model (code's models, B = 64, K_u = 50): SFL traffic "
                     "per round over FL's", "SVHN CNN: SFL costs more; AlexNet / VGG: SFL costs less",
                     f"CNN {cnn:.2f}×, AlexNet {alex:.2f}×, VGG13-BN {vgg:.2f}×",
                     verdict(cnn > 1 and alex < 1 and vgg < 1, partly=cnn > 1 or alex < 1 or vgg < 1)))
    tt = t["time_traffic"]
    mb = tt.sort_values("round").groupby(["method", "seed"]).tail(1).groupby("method")["traffic_mb"].mean()
    sfl, fl = float(mb[LABELS["semisfl"]]), float(mb[LABELS["semifl"]])
    out.append(Claim("Measured traffic follows it for a tiny model", "SVHN: SFL costs more than FL",
                     f"whole run: SemiSFL {sfl:.1f} MB, SemiFL {fl:.1f} MB, FedSwitch {float(mb[LABELS['fedswitch']]):.1f} MB, "
                     f"FedMatch {float(mb[LABELS['fedmatch']]):.1f} MB", verdict(sfl > fl)))
    ks = _final_by(t["adaptive_ks"], "variant")
    dr = t["dirichlet"].set_index(["partition", "method"])["mean"]
    sup100 = float(dr["server only", LABELS["supervised-only"]])
    semi100 = float(dr["dir0.1", LABELS["semisfl"]])
    g50 = float(ks["adaptive (paper)"] - ks["Supervised-only"])
    g100 = semi100 - sup100
    out.append(Claim("Semi-supervised training beats Supervised-only, by more with fewer labels",
                     "CIFAR-10: 88.6 vs 75.1 (Table II)",
                     f"50 labels: SemiSFL {ks['adaptive (paper)']:.1f} (adaptive) vs {ks['Supervised-only']:.1f} ({g50:+.1f}); "
                     f"100 labels: {semi100:.1f} vs {sup100:.1f} ({g100:+.1f})",
                     verdict(g50 > 0 and g100 > 0 and g50 > g100, partly=g50 > 0 or g100 > 0)))
    d = float(ks["adaptive (paper)"] - ks["fixed K_s = 20"])
    out.append(Claim("Adaptive K_s beats fixed K_s with few labels", "+10.8 points, 250 labels (Fig. 11)",
                     f"{d:+.1f} points (paper controller {ks['adaptive (paper)']:.1f} vs fixed {ks['fixed K_s = 20']:.1f}, "
                     f"50 labels); code controller {ks['adaptive (code)']:.1f}", verdict(d > 0)))
    a = t["adaptive_ks"]
    last_ks = a[a["variant"] == "adaptive (paper)"].sort_values("round").groupby("seed")["k_s"].last()
    first = int(a[a["variant"] == "adaptive (paper)"].sort_values("round").groupby("seed")["k_s"].first().iloc[0])
    fell = int((last_ks < first).sum())
    out.append(Claim("K_s decays and settles lower with few labels", "mostly below 30 from 100 (Fig. 11b)",
                     f"paper controller: {first} → " + ", ".join(str(int(v)) for v in last_ks) + " over the seeds",
                     verdict(fell == len(last_ks), partly=fell > 0)))
    rh = t["r_h"].dropna(subset=["r_h"])
    if len(rh):
        r0 = int(rh["round"].min())
        at0 = rh[rh["round"] == r0].groupby("k_s")["r_h"].mean()
        big, small = float(at0.get(20, float("nan"))), float(at0.get(5, float("nan")))
        cell = f"R_h at round {r0} (first full span): {fmt(big, 2)} (K_s = 20) vs {fmt(small, 2)} (K_s = 5)"
        v = verdict(big > small) if np.isfinite(big) and np.isfinite(small) else "n/a"
    else:
        cell, v = "no full span of indicators within the run", "n/a"
    out.append(Claim("R_h rises sooner with a larger K_s", "Fig. 3b: K_s = 100 above K_s = 20 early", cell, v))
    parts = [p for p in ("iid", "dir1.0", "dir0.1", "dir0.05") if (p, LABELS["semisfl"]) in dr.index]
    gaps = [float(dr[p, LABELS["semisfl"]] - dr[p, LABELS["fedswitch-sl"]]) for p in parts]
    skewed = [g for p, g in zip(parts, gaps) if p != "iid"]
    out.append(Claim("SemiSFL beats FedSwitch-SL, more as skew rises", "+1.5 (Dir 1.0) → +5.1 (Dir 0.05), Table IV",
                     ", ".join(f"{p} {dr[p, LABELS['semisfl']]:.1f} vs {dr[p, LABELS['fedswitch-sl']]:.1f}"
                               for p in parts),
                     verdict(all(g > 0 for g in gaps) and len(skewed) > 1 and monotone(skewed, 1),
                             partly=any(g > 0 for g in gaps))))
    semi = [float(dr[p, LABELS["semisfl"]]) for p in parts if p != "iid"]
    out.append(Claim("Accuracy falls as skew rises", "SemiSFL 87.9 → 82.3",
                     "SemiSFL " + " → ".join(f"{v:.1f}" for v in semi) + f" ({', '.join(p for p in parts if p != 'iid')})",
                     verdict(len(semi) > 1 and semi[-1] < semi[0]) if len(semi) > 1 else "n/a"))
    fin = _final_by(tt, "method")
    fls = {m: float(fin[LABELS[m]]) for m in ("semifl", "fedswitch", "fedmatch")}
    me = float(fin[LABELS["semisfl"]])
    beats = [me > v for v in fls.values()]
    out.append(Claim("SemiSFL beats the FL baselines", "SemiFL 78.9, FedSwitch 79.4, FedMatch 79.7 vs SemiSFL 83.8 (Dir 0.1)",
                     ", ".join(f"{LABELS[m]} {v:.1f}" for m, v in fls.items()) + f" vs SemiSFL {me:.1f}",
                     verdict(all(beats), partly=any(beats))))
    tg = t["to_target"].set_index("method")["time_to_target_s"]
    mine = float(tg[LABELS["semisfl"]])
    others = {m: float(v) for m, v in tg.items() if m != LABELS["semisfl"]}
    faster = [np.isfinite(mine) and (not np.isfinite(v) or mine < v) for v in others.values()]
    target = float(t["to_target"]["target"].iloc[0])
    out.append(Claim(f"Faster to a target accuracy ({100 * target:.0f}%)", "CIFAR-10, 80%: 86.5 min vs 113.6 "
                     "(FedSwitch-SL), 279.9–702.4 (FL)",
                     f"SemiSFL {fmt(mine)} s; " + ", ".join(f"{m} {fmt(v)} s" for m, v in others.items()),
                     verdict(all(faster), partly=any(faster)) if np.isfinite(mine) else "n/a"))
    hd = t["head"].set_index("head")["mean"]
    hv = [float(hd[h]) for h in HEADS]
    out.append(Claim("Projection head none < linear < MLP", "82.8 < 82.9 < 83.8 (Dir 0.1, Table V)",
                     " / ".join(f"{h} {v:.1f}" for h, v in zip(HEADS, hv)),
                     verdict(monotone(hv, 1), partly=hv[-1] == max(hv))))
    return out


def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             progress: bool = True, rounds: int | None = None) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables, their CSVs and ``claims.md`` into ``out``
    (``rounds``: rounds per run, default 12 quick, 40 full)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else ([0] if quick else [0, 1, 2])
    rounds = rounds if rounds is not None else (12 if quick else 40)
    head_parts = ("dir0.1",)
    dir_parts = ("iid", "dir0.1") if quick else tuple(PARTS)
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
    command = "python -m figures.semisfl" + (" --quick" if quick else "") + f" --seeds {' '.join(map(str, seeds))}"
    rows = claims(tables, seeds)
    (out / "claims.md").write_text(render_claims(rows, command=command, seeds=seeds, commit=commit_hash()),
                                   encoding="utf-8")
    tables["claims"] = pd.DataFrame([c.__dict__ for c in rows])
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.semisfl", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="one seed, 12 rounds, fewer settings (under three minutes)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2; --quick: 0)")
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds)
    print(f"SemiSFL figures and tables written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
