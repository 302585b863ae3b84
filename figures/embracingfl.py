"""EmbracingFL (Lee et al.): Tables 2, 3–4, 6, 7, Figures 1 and 3 and the bias floor, on two CPU cores.

    python -m figures.embracingfl --out DIR [--quick] [--seeds 0 1 2] [--resume]

Every figure is a PNG next to the CSV of exactly what it plots; tables are CSV and Markdown.  The runs
(trace, metrics, checkpoints) are kept under ``DIR/runs``.

Scale (documented, not the paper's): sklearn digits (8x8) with Dirichlet(0.1) label skew instead of
CIFAR-10 / FEMNIST; 16 clients instead of 128; the FEMNIST CNN's four blocks (conv 16, conv 32, dense 64,
output) as the model, moderate clients freezing the two conv blocks and weak clients the conv blocks and
the dense block (spec §2.5's FEMNIST split); τ = 10 local steps of B = 32, momentum 0.9, weight decay
1e-4, η = 0.05; 30 rounds (12 with ``--quick``) instead of 200–1000.  Splits: the CIFAR-like tables
freeze 1 (moderate) / 2 (weak) blocks so that partial clients train a share of the parameters close to
the ResNet-20's; Tables 3–4 also run the FEMNIST split (2 / 3 blocks).

* Table 2: a fixed strong set (4 clients) and 0, 4, 8 or 12 weak clients, all participating; EmbracingFL
  against width reduction (HeteroFL's static prefix sub-models, weak width 0.2).  Client types come from
  the device class (strong: AGX Orin, weak: Jetson Nano), the same draw for both methods.
* Tables 3–4 style: 25% participation (4 of 16 per round), the paper's cases 1, 2, 4–8 by type fractions.
* Table 6: width reduction (moderate width 0.45, weak 0.2) against EmbracingFL, all 16 participating,
  device classes strong / moderate / weak; Table 7: rounds each needs to reach the width-reduction
  run's final accuracy (paper: "rounds to target").
* Fig. 1: layer-wise maximum pairwise SVCCA of 6 clients training independently (no sync), per block.
* Fig. 3: the same with partial sync every 10 steps: (a) layer-wise (output-side half) vs channel-wise
  (half of every layer's channels); (b) second half vs first half.
* Bias floor: ‖∇F‖² (and its y part) over the last checkpoints against the number of strong clients s
  (16 clients, all participating, the rest weak).
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

from fedsim.sim.trace import load_trace  # noqa: E402
from figures.common import Job, run_jobs, save  # noqa: E402

STRONG_DEV, MODERATE_DEV, WEAK_DEV = "jetson-agx-orin-32gb", "jetson-xavier-nx-8gb", "jetson-nano"
WIDTH = {"strong": 1.0, "moderate": 0.45, "weak": 0.2}      # the paper's width-reduction capacities
M = 16
#: splits (input-side blocks frozen) that match the paper's trained-parameter shares: the CIFAR-10 ResNet-20
#: moderate / weak clients train 95% / 76% of the parameters, the FEMNIST CNN's 99% / 2%.  On the 4-block
#: CNN here, freezing conv1 (moderate) or conv1+conv2 (weak) trains 98% / 40%; freezing conv1+conv2 (moderate)
#: or every block but the output (weak) is the FEMNIST split itself (40% / 3%).
SPLITS = {"cifar": {"moderate": 1, "weak": 2}, "femnist": {"moderate": 2, "weak": 3}}
BASE: dict[str, Any] = {
    "name": "embracingfl-figure",
    "seed": 0,
    "data": {"name": "digits", "num_clients": M, "partition": {"method": "dirichlet", "alpha": 0.1, "min_size": 32}},
    "model": {"name": "femnist_cnn", "hidden": 128, "width": 0.5},
    "train": {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "batch_size": 32, "local_steps": 10},
    "devices": {"mix": [{"profile": STRONG_DEV}], "jitter": 0.0},
    "channel": {"uplink": {"model": "fixed", "mbps": 10.0}, "downlink": {"model": "fixed", "mbps": 40.0}},
    "network": {"latency_s": 0.02},
    "server": {"profile": "rtx-3090", "workers": 1},
    "stop": {"max_versions": 40},
    "eval": {"every_versions": 2},
    "output": {"figures": False, "flush_every": 2048},
}
#: the paper's cases (strong, moderate, weak) as fractions of the clients (Tables 3–7)
CASES: dict[int, tuple[float, float, float]] = {1: (1, 0, 0), 2: (0.5, 0.5, 0), 4: (0.125, 0.875, 0), 5: (0.5, 0, 0.5),
                                                 6: (0.25, 0, 0.75), 7: (0.125, 0, 0.875), 8: (0.25, 0.25, 0.5)}
PAPER_T3 = {1: 80.45, 2: 80.20, 4: 79.72, 5: 80.08, 6: 78.91, 7: 76.98, 8: 80.33}
PAPER_T4 = {1: 81.27, 2: 81.80, 4: 80.44, 5: 80.80, 6: 80.78, 7: 79.63, 8: 81.29}
PAPER_T6_WR = {1: 80.45, 2: 76.77, 4: 59.03, 5: 72.97, 6: 69.70, 7: 54.53, 8: 67.93}
PAPER_T2 = {0: (60.15, 60.15), 16: (61.34, 66.62), 32: (62.09, 72.60), 64: (63.68, 74.79), 112: (65.01, 77.34)}


def _mapping(seed: int, versions: int, algo: dict[str, Any], *, num_clients: int = M,
             mix: list[dict] | None = None, checkpoints: int | None = None) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    m["seed"] = seed
    m["data"]["num_clients"] = num_clients
    m["stop"] = {"max_versions": versions}
    m["algorithm"] = algo
    if mix is not None:
        m["devices"]["mix"] = mix
    if checkpoints:
        m["output"]["checkpoints"] = checkpoints
    return m


def _device_mix(fractions: tuple[float, float, float]) -> list[dict]:
    return [{"profile": d, "weight": float(f)} for d, f in zip((STRONG_DEV, MODERATE_DEV, WEAK_DEV), fractions) if f > 0]


def _by_device(fractions: tuple[float, float, float], n: int, method: str) -> dict[str, Any]:
    """EmbracingFL (types from the device class) or HeteroFL (widths from the device class), all n clients."""
    devs = [d for d, f in zip((STRONG_DEV, MODERATE_DEV, WEAK_DEV), fractions) if f > 0]
    types = dict(zip((STRONG_DEV, MODERATE_DEV, WEAK_DEV), ("strong", "moderate", "weak")))
    if method == "embracingfl":
        return {"name": "embracingfl", "clients_per_round": n, "assign": "devices",
                "types": {d: types[d] for d in devs}, "splits": SPLITS["cifar"]}
    return {"name": "heterofl", "clients_per_round": n, "widths": {d: WIDTH[types[d]] for d in devs}}


# ------------------------------------------------------------------------------------------------ jobs

def table2_jobs(seeds: Sequence[int], versions: int, weak_counts: Sequence[int], strong: int = 4) -> list[Job]:
    jobs = []
    for s in seeds:
        for w in weak_counts:
            n = strong + w
            fr = (strong / n, 0.0, w / n)
            for method in (("embracingfl",) if w == 0 else ("embracingfl", "heterofl")):
                jobs.append(Job(("t2", method, w, s), _mapping(s, versions, _by_device(fr, n, method), num_clients=n,
                                                               mix=_device_mix(fr))))
    return jobs


def table34_jobs(seeds: Sequence[int], versions: int, cases: Sequence[int]) -> list[Job]:
    return [Job(("t34", split, c, s), _mapping(s, versions, {"name": "embracingfl", "clients_per_round": M // 4,
                                                              "weak_fraction": CASES[c][2],
                                                              "moderate_fraction": CASES[c][1], "splits": SPLITS[split]}))
            for s in seeds for split in ("cifar", "femnist") for c in cases if c != 1 or split == "cifar"]


def table6_jobs(seeds: Sequence[int], versions: int, cases: Sequence[int]) -> list[Job]:
    jobs = []
    for s in seeds:
        for c in cases:
            for method in (("embracingfl",) if c == 1 else ("embracingfl", "heterofl")):
                jobs.append(Job(("t6", method, c, s), _mapping(s, versions, _by_device(CASES[c], M, method),
                                                               mix=_device_mix(CASES[c]))))
    return jobs


def floor_jobs(seeds: Sequence[int], versions: int, strong_counts: Sequence[int]) -> list[Job]:
    every = max(1, versions // 8)
    return [Job(("floor", k, s), _mapping(s, versions, {"name": "embracingfl", "clients_per_round": M,
                                                         "weak_fraction": 1 - k / M, "splits": SPLITS["cifar"]},
                                          checkpoints=every))
            for s in seeds for k in strong_counts]


def _final(res: dict[str, Any]) -> float:
    return 100.0 * float(res["metrics"]["accuracy"].iloc[-1])


def _counts(res: dict[str, Any]) -> dict[str, int]:
    tr = load_trace(res["dir"])
    ev = tr[tr["kind"] == "client_types"]
    if len(ev):
        return dict(ev.iloc[0]["counts"])
    return {}


def _md(df: pd.DataFrame, path: Path) -> None:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _nanmean(vals: Sequence[float]) -> float:
    a = np.asarray(vals, dtype=float)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def _ms(vals: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(vals, dtype=float)
    return float(a.mean()), float(a.std()) if a.size > 1 else 0.0


# ------------------------------------------------------------------------------------------------ tables

def table2(results: dict, seeds: Sequence[int], weak_counts: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for w in weak_counts:
        efl = [_final(results[("t2", "embracingfl", w, s)]) for s in seeds]
        wr = efl if w == 0 else [_final(results[("t2", "heterofl", w, s)]) for s in seeds]
        cnt = [_counts(results[("t2", "embracingfl", w, s)]) for s in seeds]
        (em, es), (wm, ws) = _ms(efl), _ms(wr)
        rows.append({"weak_added": w, "strong_realised": np.mean([c.get("strong", 0) for c in cnt]),
                     "weak_realised": np.mean([c.get("weak", 0) for c in cnt]),
                     "width_reduction": wm, "width_reduction_std": ws, "embracingfl": em, "embracingfl_std": es})
    df = pd.DataFrame(rows)
    df.to_csv(out / "table2.csv", index=False)
    _md(df, out / "table2.md")
    fig, ax = plt.subplots(figsize=(4.6, 3.3))
    ax.errorbar(df["weak_added"], df["embracingfl"], df["embracingfl_std"], marker="o", label="EmbracingFL", capsize=3)
    ax.errorbar(df["weak_added"], df["width_reduction"], df["width_reduction_std"], marker="s",
                label="width reduction (HeteroFL)", capsize=3)
    ax.set(xlabel="weak clients added to 4 strong (nominal)", ylabel="test accuracy (%)",
           title="Table 2: adding weak clients")
    ax.legend()
    save(fig, out / "table2.png")
    return df


def table34(results: dict, seeds: Sequence[int], cases: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for c in cases:
        st, mo, we = CASES[c]
        row: dict[str, Any] = {"case": c, "strong": int(round(st * M)), "moderate": int(round(mo * M)),
                               "weak": int(round(we * M))}
        for split in ("cifar", "femnist"):
            key = "cifar" if c == 1 else split
            m, sd = _ms([_final(results[("t34", key, c, s)]) for s in seeds])
            row[f"{split}_split"], row[f"{split}_split_std"] = m, sd
        row["paper_cifar10"], row["paper_femnist"] = PAPER_T3[c], PAPER_T4[c]
        rows.append(row)
    df = pd.DataFrame(rows)
    df.to_csv(out / "table34.csv", index=False)
    _md(df, out / "table34.md")
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    x = np.arange(len(df))
    ax.bar(x - 0.2, df["cifar_split"], 0.4, yerr=df["cifar_split_std"], capsize=3, label="ResNet-like split (1 / 2 blocks)")
    ax.bar(x + 0.2, df["femnist_split"], 0.4, yerr=df["femnist_split_std"], capsize=3, label="FEMNIST split (2 / 3 blocks)")
    ax.set_xticks(x, [str(c) for c in df["case"]])
    ax.set(xlabel="case (paper numbering)", ylabel="test accuracy (%)", title="Tables 3-4 style: 25% participation",
           ylim=(max(0, min(df["cifar_split"].min(), df["femnist_split"].min()) - 15), 100))
    ax.legend(fontsize=7)
    save(fig, out / "table34.png")
    return df


def _rounds_to(metrics: pd.DataFrame, target: float) -> float:
    hit = metrics[100.0 * metrics["accuracy"] >= target - 1e-9]
    return float(hit["version"].iloc[0]) if len(hit) else float("nan")


def table67(results: dict, seeds: Sequence[int], cases: Sequence[int], out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, rows7 = [], []
    for c in cases:
        efl = [_final(results[("t6", "embracingfl", c, s)]) for s in seeds]
        wr = efl if c == 1 else [_final(results[("t6", "heterofl", c, s)]) for s in seeds]
        (em, es), (wm, ws) = _ms(efl), _ms(wr)
        rows.append({"case": c, "width_reduction": wm, "width_reduction_std": ws, "embracingfl": em,
                     "embracingfl_std": es, "gap": em - wm, "paper_wr": PAPER_T6_WR[c], "paper_efl": PAPER_T3[c]})
        r_e, r_w = [], []
        for s, target in zip(seeds, wr):
            r_e.append(_rounds_to(results[("t6", "embracingfl", c, s)]["metrics"], target))  # nan: never reached
            key = ("t6", "embracingfl" if c == 1 else "heterofl", c, s)
            r_w.append(_rounds_to(results[key]["metrics"], target))
        rows7.append({"case": c, "target": wm, "rounds_width_reduction": _nanmean(r_w),
                      "rounds_embracingfl": _nanmean(r_e), "embracingfl_reached": int(np.isfinite(r_e).sum()),
                      "seeds": len(seeds)})
    df, df7 = pd.DataFrame(rows), pd.DataFrame(rows7)
    df.to_csv(out / "table6.csv", index=False)
    _md(df, out / "table6.md")
    df7.to_csv(out / "table7.csv", index=False)
    _md(df7, out / "table7.md")
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    x = np.arange(len(df))
    ax.bar(x - 0.2, df["width_reduction"], 0.4, yerr=df["width_reduction_std"], capsize=3, label="width reduction")
    ax.bar(x + 0.2, df["embracingfl"], 0.4, yerr=df["embracingfl_std"], capsize=3, label="EmbracingFL")
    ax.set_xticks(x, [str(c) for c in df["case"]])
    ax.set(xlabel="case (paper numbering)", ylabel="test accuracy (%)", title="Table 6: width reduction vs EmbracingFL")
    ax.legend(fontsize=8)
    save(fig, out / "table6.png")
    fig, ax = plt.subplots(figsize=(5.2, 3.3))
    ax.bar(x - 0.2, df7["rounds_width_reduction"], 0.4, label="width reduction")
    ax.bar(x + 0.2, df7["rounds_embracingfl"], 0.4, label="EmbracingFL")
    ax.set_xticks(x, [str(c) for c in df7["case"]])
    ax.set(xlabel="case", ylabel="rounds to the WR final accuracy", title="Table 7: rounds to target")
    ax.legend(fontsize=8)
    save(fig, out / "table7.png")
    return df, df7


def floor(results: dict, seeds: Sequence[int], strong_counts: Sequence[int], out: Path, progress: bool) -> pd.DataFrame:
    from tqdm import tqdm

    from analysis.embracingfl import late_gradient_norms

    rows = []
    keys = [(k, s) for k in strong_counts for s in seeds]
    for k, s in tqdm(keys, desc="bias floor probes", unit="run", disable=not progress, dynamic_ncols=True):
        g = late_gradient_norms(str(results[("floor", k, s)]["dir"]))
        rows.append({"s": k, "seed": s, **g, "accuracy": _final(results[("floor", k, s)])})
    raw = pd.DataFrame(rows)
    df = raw.groupby("s", as_index=False).agg(grad_sq=("grad_sq", "mean"), grad_sq_std=("grad_sq", "std"),
                                               grad_y_sq=("grad_y_sq", "mean"), grad_z_sq=("grad_z_sq", "mean"),
                                               train_loss=("train_loss", "mean"), accuracy=("accuracy", "mean"))
    df.to_csv(out / "bias_floor.csv", index=False)
    fig, ax = plt.subplots(figsize=(4.6, 3.3))
    ax.plot(df["s"], df["grad_sq"], marker="o", label="||grad F||^2")
    ax.plot(df["s"], df["grad_y_sq"], marker="s", label="||grad_y F||^2 (strong-only layers)")
    ax.plot(df["s"], df["train_loss"], marker="^", linestyle="--", label="training loss")
    ax.set(xscale="log", yscale="log", xlabel=f"strong clients s (of {M})", title="Error floor vs s (last checkpoints)")
    ax.set_xticks(list(df["s"]), [str(v) for v in df["s"]])
    ax.legend(fontsize=7)
    save(fig, out / "bias_floor.png")
    return df


# ------------------------------------------------------------------------------------------------ SVCCA

def svcca_runs(seeds: Sequence[int], iterations: int, clients: int, out: Path, progress: bool,
               measure_every: int = 1) -> pd.DataFrame:
    import torch
    from tqdm import tqdm

    from analysis.embracingfl import svcca_study
    from fedsim.learn.data import load_dataset
    from fedsim.learn.models import build_model
    from fedsim.learn.partition import partition
    from fedsim.learn.train import SGDConfig

    frames = []
    jobs = [(s, sch) for s in seeds for sch in ("none", "second_half", "first_half", "channels")]
    for seed, scheme in tqdm(jobs, desc="SVCCA studies", unit="study", disable=not progress, dynamic_ncols=True):
        data = load_dataset("digits", rng=np.random.default_rng(seed))
        parts = partition(data.train.y.numpy(), clients, "dirichlet", np.random.default_rng(seed), alpha=0.1, min_size=20)

        def build(seed: int = seed) -> Any:
            return build_model("femnist_cnn", tuple(data.train.input_shape), 10, hidden=128, width=0.5,
                               seed_generator=torch.Generator().manual_seed(seed))

        df = svcca_study(build, data.train.x, data.train.y, parts, data.test.x[:300], scheme=scheme,
                         iterations=iterations, sync_every=10,
                         sgd=SGDConfig(lr=0.05, momentum=0.9, weight_decay=1e-4, batch_size=32), seed=seed,
                         measure_every=measure_every if scheme == "none" else 10**6)
        df["seed"] = seed
        frames.append(df)
    raw = pd.concat(frames, ignore_index=True)
    raw.to_csv(out / "svcca_raw.csv", index=False)
    return raw


LAYER_NAMES = {"block0": "conv1", "block1": "conv2", "block2": "dense", "block3": "output"}


def fig1(raw: pd.DataFrame, out: Path) -> pd.DataFrame:
    from scipy.stats import spearmanr

    d = raw[raw["scheme"] == "none"].groupby(["iteration", "layer", "depth"], as_index=False)["svcca"].agg(["mean", "std"])
    d.to_csv(out / "fig1_svcca.csv", index=False)
    fig, ax = plt.subplots(figsize=(4.6, 3.3))
    for layer, g in d.groupby("layer"):
        ax.plot(g["iteration"], g["mean"], marker=".", label=LAYER_NAMES.get(layer, layer))
    ax.set(xlabel="local iterations (no sync)", ylabel="max pairwise SVCCA", title="Fig. 1: independent training")
    ax.legend(fontsize=8)
    save(fig, out / "fig1_svcca.png")
    last = raw[(raw["scheme"] == "none") & (raw["iteration"] == raw["iteration"].max())]
    rho = [float(spearmanr(g["depth"], g["svcca"]).statistic) for _, g in last.groupby("seed")]
    pd.DataFrame({"seed": sorted(last["seed"].unique()), "spearman_depth_svcca": rho}).to_csv(
        out / "fig1_spearman.csv", index=False)
    return d


def fig3(raw: pd.DataFrame, out: Path) -> pd.DataFrame:
    last = raw[raw["iteration"] == raw["iteration"].max()]
    d = last.groupby(["scheme", "layer", "depth"], as_index=False)["svcca"].agg(["mean", "std"])
    d.to_csv(out / "fig3_svcca.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), sharey=True)
    for ax, pair, title in ((axes[0], ("second_half", "channels"), "(a) layer-wise vs channel-wise"),
                            (axes[1], ("second_half", "first_half"), "(b) second half vs first half")):
        for i, sch in enumerate(pair):
            g = d[d["scheme"] == sch].sort_values("depth")
            ax.bar(g["depth"] + (i - 0.5) * 0.38, g["mean"], 0.38, yerr=g["std"].fillna(0), capsize=2, label=sch)
        ax.set_xticks(range(4), [LAYER_NAMES[f"block{j}"] for j in range(4)])
        ax.set(title=title, xlabel="layer", ylim=(0, 1.05))
        ax.legend(fontsize=8)
    axes[0].set_ylabel("max pairwise SVCCA after the last sync")
    save(fig, out / "fig3_svcca.png")
    return d


# ------------------------------------------------------------------------------------------------ entry point

def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             progress: bool = True, resume: bool = False) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables and their CSVs into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else ([0] if quick else [0, 1, 2])
    if quick:
        v, weak_counts, cases34, cases6, strong_counts, it, nc, me = 12, (0, 12), (1, 7), (1, 7), (2, 16), 20, 6, 2
    else:
        v, weak_counts, cases34, cases6, strong_counts, it, nc, me = 30, (0, 4, 8, 12), (1, 2, 5, 7), \
            (1, 5, 7), (2, 4, 16), 40, 6, 2
    jobs = (table2_jobs(seeds, v, weak_counts) + table34_jobs(seeds, v, cases34) + table6_jobs(seeds, v, cases6)
            + floor_jobs(seeds, v, strong_counts))
    results = run_jobs(jobs, out, label="EmbracingFL", progress=progress, resume=resume)
    t6, t7 = table67(results, seeds, cases6, out)
    raw = svcca_runs(seeds, it, nc, out, progress, measure_every=me)
    return {
        "table2": table2(results, seeds, weak_counts, out),
        "table34": table34(results, seeds, cases34, out),
        "table6": t6, "table7": t7,
        "bias_floor": floor(results, seeds, strong_counts, out, progress),
        "fig1": fig1(raw, out),
        "fig3": fig3(raw, out),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.embracingfl", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="one seed, short runs (under three minutes)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2; --quick: 0)")
    p.add_argument("--resume", action="store_true", help="reuse finished runs of the same scenarios under OUT/runs")
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds, resume=args.resume)
    print(f"EmbracingFL figures and tables written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
