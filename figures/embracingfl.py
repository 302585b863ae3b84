"""EmbracingFL (Lee et al.): Tables 2, 3–4, 6, 7, Figures 1 and 3 and the bias floor, on two CPU cores.

    python -m figures.embracingfl --out DIR [--quick] [--seeds 0 1 2 3 4] [--stability-seeds 5 6 7 8 9] [--resume]

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
  against width reduction (HeteroFL's static prefix sub-models, weak width 0.2).  Every run has the same
  world of 16 clients (clients 0-3 on the AGX Orin, 4-15 on the Jetson Nano; one data partition over all
  16) and the weak clients beyond the first w are offline, so the strong set and its data are fixed and
  each weak client added brings its own data, as the paper's fixed 16 strong of 128.
* Tables 3–4 style: 25% participation (4 of 16 per round), the paper's cases 1, 2, 4–8 by type fractions.
* Table 6: width reduction (moderate width 0.45, weak 0.2) against EmbracingFL, all 16 participating,
  device classes strong / moderate / weak; Table 7: rounds each needs to reach the width-reduction
  run's final accuracy (paper: "rounds to target").
* Fig. 1: layer-wise maximum pairwise SVCCA of 6 clients training independently (no sync), per block.
* Fig. 3: the same with partial sync every 10 steps: (a) layer-wise (output-side half) vs channel-wise
  (half of every layer's channels); (b) second half vs first half.
* Bias floor: ‖∇F‖² (and its y part) over the last checkpoints against the number of strong clients s
  (16 clients, all participating, the rest weak).

``claims.md`` is the paper's claims against these numbers, one row per part, each verdict by
``figures.claims.RULES`` (printed under the table; the binomial test-set error on the 359 test samples and
one tick of the every-2-rounds evaluation clock are the resolutions; accuracy rows only above the chance
margin), with its stability line and the choices that matter (the evaluation clock); ``RESULTS.md`` adds
the tables.  Both name the command, the commit and the seeds.
"""
from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedsim.sim.trace import load_trace  # noqa: E402
from figures.claims import (Choice, Claim, acc_resolution, add_seed_arguments, censor, chance_gate,  # noqa: E402
                            claim, claims_of, commit_hash, default_seeds, judge, judge_acc, render_claims,
                            results_head, seeds_args, verdicts_of)
from figures.common import Job, run_jobs, save, test_size  # noqa: E402

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


def _by_device(fractions: tuple[float, float, float], n: int, method: str, split: str = "cifar") -> dict[str, Any]:
    """EmbracingFL (types from the device class, ``split``'s frozen blocks) or HeteroFL (widths from the device
    class), all n clients."""
    devs = [d for d, f in zip((STRONG_DEV, MODERATE_DEV, WEAK_DEV), fractions) if f > 0]
    types = dict(zip((STRONG_DEV, MODERATE_DEV, WEAK_DEV), ("strong", "moderate", "weak")))
    if method == "embracingfl":
        return {"name": "embracingfl", "clients_per_round": n, "assign": "devices",
                "types": {d: types[d] for d in devs}, "splits": SPLITS[split]}
    return {"name": "heterofl", "clients_per_round": n, "widths": {d: WIDTH[types[d]] for d in devs}}


# ------------------------------------------------------------------------------------------------ jobs

#: Table 2's world: a fixed strong set of T2_STRONG clients and up to T2_WEAK weak clients, one Dirichlet
#: partition of the data over all T2_STRONG + T2_WEAK of them (the same for every weak count), as the paper
#: fixes 16 strong clients and adds weak ones with their own data (16 of 128 there, 4 of 16 here)
T2_STRONG, T2_WEAK = 4, 12


def table2_online(out: Path, weak: int, strong: int = T2_STRONG) -> Path:
    """The availability trace of Table 2 with ``weak`` weak clients added: clients 0..strong+weak−1 online
    for the whole run, the rest of the fixed world offline (a trace lists only online clients)."""
    d = Path(out) / "availability"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"t2_strong{strong}_weak{weak}.csv"
    path.write_text("client,start,end\n" + "".join(f"{c},0,1e12\n" for c in range(strong + weak)), encoding="utf-8")
    return path.resolve()


def table2_jobs(seeds: Sequence[int], versions: int, weak_counts: Sequence[int], out: Path,
                strong: int = T2_STRONG, max_weak: int = T2_WEAK) -> list[Job]:
    """Table 2: every run has the same world of ``strong + max_weak`` clients (the first ``strong`` on the
    strong device, the rest weak; one data partition over all of them), and the weak clients beyond the
    first ``w`` are offline, so the strong set and its data are identical across weak counts and each weak
    client added brings its own data; all online clients train every round."""
    jobs = []
    n = strong + max_weak
    mix = [{"profile": STRONG_DEV, "count": strong}, {"profile": WEAK_DEV, "count": max_weak}]
    for s in seeds:
        for w in weak_counts:
            online = table2_online(out, w, strong)
            for method in (("embracingfl",) if w == 0 else ("embracingfl", "heterofl")):
                m = _mapping(s, versions, _by_device((strong / n, 0.0, max_weak / n), strong + w, method),
                             num_clients=n, mix=mix)
                m["availability"] = {"model": "trace", "path": str(online)}
                jobs.append(Job(("t2", method, w, s), m))
    return jobs


def table34_jobs(seeds: Sequence[int], versions: int, cases: Sequence[int]) -> list[Job]:
    return [Job(("t34", split, c, s), _mapping(s, versions, {"name": "embracingfl", "clients_per_round": M // 4,
                                                              "weak_fraction": CASES[c][2],
                                                              "moderate_fraction": CASES[c][1], "splits": SPLITS[split]}))
            for s in seeds for split in ("cifar", "femnist") for c in cases if c != 1 or split == "cifar"]


def table2_resplit_jobs(seeds: Sequence[int], versions: int, weak_counts: Sequence[int],
                        strong: int = T2_STRONG) -> list[Job]:
    """The other reading of Table 2 (the choices table): the data re-split over the strong + w clients of each
    run (the strong set keeps 4 clients, by device counts, but its data shrinks as weak clients join)."""
    jobs = []
    for s in seeds:
        for w in weak_counts:
            n = strong + w
            mix = [{"profile": STRONG_DEV, "count": strong}] + ([{"profile": WEAK_DEV, "count": w}] if w else [])
            for method in (("embracingfl",) if w == 0 else ("embracingfl", "heterofl")):
                jobs.append(Job(("t2r", method, w, s), _mapping(s, versions, _by_device((strong / n, 0.0, w / n), n,
                                                                                          method), num_clients=n,
                                                                 mix=mix)))
    return jobs


def table6_split_jobs(seeds: Sequence[int], versions: int, cases: Sequence[int]) -> list[Job]:
    """The other model split of Table 6 (the choices table): EmbracingFL with the FEMNIST split (2 / 3 frozen
    blocks) against the same width-reduction runs."""
    return [Job(("t6f", "embracingfl", c, s), _mapping(s, versions, _by_device(CASES[c], M, "embracingfl", "femnist"),
                                                       mix=_device_mix(CASES[c])))
            for s in seeds for c in cases if c != 1]


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


def _md(df: pd.DataFrame, path: Path) -> None:
    df = df[[c for c in df.columns if not c.endswith("_seeds")]]  # per-seed lists stay in the CSV
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r) + " |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _nanmean(vals: Sequence[float]) -> float:
    a = np.asarray(vals, dtype=float)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def _seeds(vals: Sequence[float]) -> str:
    """Per-seed values for a table's ``*_seeds`` column (what the claims' every-seed rule reads)."""
    return " ".join(f"{float(v):.4f}" for v in vals)


def seed_values(cell: Any) -> list[float]:
    """The values of a ``*_seeds`` column cell."""
    return [float(v) for v in str(cell).split()]


def _ms(vals: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(vals, dtype=float)
    return float(a.mean()), float(a.std()) if a.size > 1 else 0.0


# ------------------------------------------------------------------------------------------------ tables

def table2(results: dict, seeds: Sequence[int], weak_counts: Sequence[int], out: Path, prefix: str = "t2",
           name: str = "table2") -> pd.DataFrame:
    rows = []
    for w in weak_counts:
        efl = [_final(results[(prefix, "embracingfl", w, s)]) for s in seeds]
        wr = efl if w == 0 else [_final(results[(prefix, "heterofl", w, s)]) for s in seeds]
        (em, es), (wm, ws) = _ms(efl), _ms(wr)
        rows.append({"weak_added": w, "strong": T2_STRONG, "weak": w,
                     "width_reduction": wm, "width_reduction_std": ws, "embracingfl": em, "embracingfl_std": es,
                     "width_reduction_seeds": _seeds(wr), "embracingfl_seeds": _seeds(efl)})
    df = pd.DataFrame(rows)
    df.to_csv(out / f"{name}.csv", index=False)
    _md(df, out / f"{name}.md")
    if prefix != "t2":   # the alternative reading: its CSV and table only
        return df
    fig, ax = plt.subplots(figsize=(4.6, 3.3))
    ax.errorbar(df["weak_added"], df["embracingfl"], df["embracingfl_std"], marker="o", label="EmbracingFL", capsize=3)
    ax.errorbar(df["weak_added"], df["width_reduction"], df["width_reduction_std"], marker="s",
                label="width reduction (HeteroFL)", capsize=3)
    ax.set(xlabel=f"weak clients added to {T2_STRONG} strong", ylabel="test accuracy (%)",
           title="Table 2: adding weak clients")
    ax.legend()
    save(fig, out / "table2.png")
    return df


def _efl_by_case(results: dict, seeds: Sequence[int], cases: Sequence[int], prefix: str, out: Path) -> pd.DataFrame:
    """EmbracingFL's final accuracy per case and seed of one alternative reading (``table6_femnist_split.csv``)."""
    rows = [{"case": c, "embracingfl_seeds": _seeds([_final(results[(prefix, "embracingfl", c, s)]) for s in seeds])}
            for c in cases]
    df = pd.DataFrame(rows, columns=["case", "embracingfl_seeds"])
    df.to_csv(out / "table6_femnist_split.csv", index=False)
    return df


def table34(results: dict, seeds: Sequence[int], cases: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for c in cases:
        st, mo, we = CASES[c]
        row: dict[str, Any] = {"case": c, "strong": int(round(st * M)), "moderate": int(round(mo * M)),
                               "weak": int(round(we * M))}
        for split in ("cifar", "femnist"):
            key = "cifar" if c == 1 else split
            vals = [_final(results[("t34", key, c, s)]) for s in seeds]
            m, sd = _ms(vals)
            row[f"{split}_split"], row[f"{split}_split_std"], row[f"{split}_split_seeds"] = m, sd, _seeds(vals)
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
                     "embracingfl_std": es, "gap": em - wm, "paper_wr": PAPER_T6_WR[c], "paper_efl": PAPER_T3[c],
                     "width_reduction_seeds": _seeds(wr), "embracingfl_seeds": _seeds(efl)})
        r_e, r_w = [], []
        for s, target in zip(seeds, wr):
            r_e.append(_rounds_to(results[("t6", "embracingfl", c, s)]["metrics"], target))  # nan: never reached
            key = ("t6", "embracingfl" if c == 1 else "heterofl", c, s)
            r_w.append(_rounds_to(results[key]["metrics"], target))
        rows7.append({"case": c, "target": wm, "rounds_width_reduction": _nanmean(r_w),
                      "rounds_embracingfl": _nanmean(r_e), "embracingfl_reached": int(np.isfinite(r_e).sum()),
                      "seeds": len(seeds), "rounds_width_reduction_seeds": _seeds(r_w),
                      "rounds_embracingfl_seeds": _seeds(r_e)})
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
    raw.to_csv(out / "bias_floor_seeds.csv", index=False)
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
    from fedsim.learn.sgd import SGDConfig

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


# ------------------------------------------------------------------------------------------------ claims

#: the paper's "close to all-strong" margin: every case of Tables 3-4 and 6 is within 3.5 points of case 1
CLOSE_PTS = 3.5
#: the evaluation clock of every run (rounds): Table 7 counts rounds, and a round is one tick of it
EVAL_ROUNDS = int(BASE["eval"]["every_versions"])


#: chance accuracy on digits' 10 classes (%): accuracy rows are judged only clearly above it
CHANCE = 10.0


def _rounds_gaps(wr: Any, efl: Any, budget: int, clock: int = EVAL_ROUNDS) -> tuple[list[float], list[Any]]:
    """Per seed, rounds saved by EmbracingFL (width reduction's rounds − EmbracingFL's) on a ``clock``-round
    evaluation clock; a target never reached counts as the run's rounds, a bound: "low" when only width
    reduction never reached it (the saving is at least that), "high" when only EmbracingFL did not, "both"."""
    up = (lambda x: math.ceil(x / clock) * clock) if clock != EVAL_ROUNDS else (lambda x: x)
    w, nw = censor(seed_values(wr), budget)
    e, ne = censor(seed_values(efl), budget)
    sides = [("both" if a and b else "low" if a else "high" if b else False) for a, b in zip(nw, ne)]
    return [up(a) - up(b) for a, b in zip(w, e)], sides


def claims(t: dict[str, Any], seeds: Sequence[int], *, clock: int = EVAL_ROUNDS) -> list[Claim]:
    """The paper's claims against this recipe's tables (``make_all``'s dict, with ``test_n``, ``rounds`` and the
    per-seed ``bias_floor_seeds`` / ``svcca_raw``); every cell and verdict by :data:`figures.claims.RULES`,
    one row per part.  ``clock``: the evaluation clock in rounds (the choices table re-reads a coarser one)."""
    out: list[Claim] = []
    n = int(t["test_n"])
    rho = list(t["fig1_spearman"].sort_values("seed")["spearman_depth_svcca"])
    out.append(claim("Fig. 1: input-side layers stay more alike across independently trained clients (−Spearman of "
                     "max-pairwise SVCCA against depth, per seed)", "conv layers near 1, output side lower",
                     judge([-r for r in rho], digits=2)))
    t2 = t["table2"]
    for _, r in t2[t2["weak_added"] > 0].iterrows():
        w = int(r["weak_added"])
        out.append(claim(f"Table 2: EmbracingFL above width reduction with {w} weak clients added to {T2_STRONG} strong",
                         "+5.3 to +12.3 points (16–112 weak added to 16 strong)",
                         judge_acc(seed_values(r["embracingfl_seeds"]), seed_values(r["width_reduction_seeds"]),
                                   n_test=n, chance=CHANCE)))
    lo, hi = t2.iloc[0], t2.iloc[-1]
    out.append(claim(f"Table 2: adding weak clients to the fixed strong set raises EmbracingFL's accuracy "
                     f"({int(lo['weak_added'])} → {int(hi['weak_added'])} weak)",
                     f"{PAPER_T2[0][1]:.2f} → {PAPER_T2[112][1]:.2f}% (+17.2)",
                     judge_acc(seed_values(hi["embracingfl_seeds"]), seed_values(lo["embracingfl_seeds"]),
                               n_test=n, chance=CHANCE)))
    ws = t2[t2["weak_added"] > 0]
    if len(ws) >= 2:
        a, b = ws.iloc[0], ws.iloc[-1]
        ea, wa = seed_values(a["embracingfl_seeds"]), seed_values(a["width_reduction_seeds"])
        eb, wb = seed_values(b["embracingfl_seeds"]), seed_values(b["width_reduction_seeds"])
        grow = [(x - y) - (u - v) for x, y, u, v in zip(eb, wb, ea, wa)]
        res = [math.hypot(r1, r2) for r1, r2 in zip(acc_resolution(eb, wb, n), acc_resolution(ea, wa, n))]
        gate = chance_gate([float(np.mean(v)) for v in (ea, wa, eb, wb)], CHANCE, n)
        out.append(claim(f"Table 2 / Fig. 4: the gap over width reduction grows with the weak fraction "
                         f"({int(a['weak_added'])} → {int(b['weak_added'])} weak added)",
                         "+5.3 → +12.3 points (16 → 112 weak)",
                         judge(grow, resolution=res, res_name=f"test-set sampling of four accuracies, n = {n}",
                               unit=" pts", na=gate)))
    t6 = t["table6"].set_index("case")
    for c in [c for c in t6.index if c != 1]:
        out.append(claim(f"Table 6, case {c}: EmbracingFL above width reduction (full participation)",
                         f"{PAPER_T3[c]:.1f} vs {PAPER_T6_WR[c]:.1f} (+{PAPER_T3[c] - PAPER_T6_WR[c]:.1f})",
                         judge_acc(seed_values(t6.loc[c, "embracingfl_seeds"]),
                                   seed_values(t6.loc[c, "width_reduction_seeds"]), PAPER_T3[c] - PAPER_T6_WR[c],
                                   n_test=n, chance=CHANCE)))
        base = seed_values(t6.loc[1, "embracingfl_seeds"])
        out.append(claim(f"Table 6, case {c}: EmbracingFL within {CLOSE_PTS:g} points of all-strong case 1 "
                         f"(effect {CLOSE_PTS:g} − (case 1 − case {c}))", f"{PAPER_T3[c] - PAPER_T3[1]:+.1f} points",
                         judge_acc(seed_values(t6.loc[c, "embracingfl_seeds"]), base, n_test=n, chance=CHANCE,
                                   offset=CLOSE_PTS)))
    t7 = t["table7"].set_index("case")
    paper_t7 = {2: (867, 817), 3: (982, 801), 4: (836, 483), 5: (813, 811), 6: (806, 629), 7: (939, 572)}
    for c in [c for c in t7.index if c != 1]:
        gaps, cen = _rounds_gaps(t7.loc[c, "rounds_width_reduction_seeds"], t7.loc[c, "rounds_embracingfl_seeds"],
                                 int(t["rounds"]), clock)
        p = paper_t7.get(c)
        if all(x == "both" for x in cen):
            out.append(Claim(f"Table 7, case {c}: EmbracingFL needs fewer rounds to the width-reduction accuracy",
                             f"{p[1]} vs {p[0]} rounds" if p else "fewer", "neither reaches the target on any seed",
                             "n/a"))
            continue
        out.append(claim(f"Table 7, case {c}: EmbracingFL needs fewer rounds to the width-reduction accuracy",
                         f"{p[1]} vs {p[0]} rounds" if p else "fewer",
                         judge(gaps, resolution=clock, res_name=f"one tick of the {clock}-round evaluation clock",
                               unit=" rounds", digits=0, censored=cen)))
    t34 = t["table34"].set_index("case")
    b34 = seed_values(t34.loc[1, "cifar_split_seeds"])
    for c in [c for c in t34.index if c != 1]:
        for col, name in (("cifar_split", "ResNet-like split"), ("femnist_split", "FEMNIST split")):
            out.append(claim(f"Tables 3–4, case {c} ({name}, 25% participation): within {CLOSE_PTS:g} points of case 1",
                             f"{PAPER_T3[c] - PAPER_T3[1]:+.1f} / {PAPER_T4[c] - PAPER_T4[1]:+.1f} points",
                             judge_acc(seed_values(t34.loc[c, f"{col}_seeds"]), b34, n_test=n, chance=CHANCE,
                                       offset=CLOSE_PTS)))
    fl = t["bias_floor_seeds"]
    s0, s1 = int(fl["s"].min()), int(fl["s"].max())
    for col, what in (("grad_sq", "‖∇F‖²"), ("grad_y_sq", "its y part")):
        a = fl[fl["s"] == s0].sort_values("seed")[col].to_numpy(float)
        b = fl[fl["s"] == s1].sort_values("seed")[col].to_numpy(float)
        out.append(claim(f"Remark 2: the error floor ({what} over the last checkpoints) shrinks from s = {s0} to s = "
                         f"{s1} strong clients", "floor ∝ σ̄_y²/s", judge(a - b, digits=3)))
    raw = t["svcca_raw"]
    last = raw[raw["iteration"] == raw["iteration"].max()]
    per = last.groupby(["scheme", "depth", "seed"])["svcca"].mean()

    def gap(a: str, b: str, d: int) -> list[float]:
        return [float(per[a, d, s] - per[b, d, s]) for s in seeds]

    for d in sorted(last["depth"].unique()):
        name = LAYER_NAMES.get(f"block{int(d)}", str(d))
        out.append(claim(f"Fig. 3a: layer-wise (output-half) sync keeps {name} more alike than channel-wise sync",
                         "layer-wise higher at every layer", judge(gap("second_half", "channels", d), digits=3)))
    for d in [d for d in sorted(last["depth"].unique()) if d >= last["depth"].max() - 1]:
        name = LAYER_NAMES.get(f"block{int(d)}", str(d))
        out.append(claim(f"Fig. 3b: second-half sync keeps {name} more alike than first-half sync",
                         "second half higher at the output side", judge(gap("second_half", "first_half", d), digits=3)))
    return out


def choices(t: dict[str, Any], seeds: Sequence[int], used: list[Claim]) -> list[Choice]:
    """The readings that move a verdict, each computed: Table 2's world (fixed strong data, or the data
    re-split over the run's clients), Table 6's model split (ResNet-like or FEMNIST) and the evaluation clock."""
    coarse = claims(t, seeds, clock=2 * EVAL_ROUNDS)
    out = []
    if "table2_resplit" in t:
        alt = claims({**t, "table2": t["table2_resplit"]}, seeds)
        out.append(Choice("Table 2's world", "fixed strong set and data, weak clients with their own data",
                          "the paper fixes 16 strong clients and adds weak ones; a re-split would shrink the strong "
                          "set's data as weak clients join",
                          {"fixed strong data": verdicts_of(used, ("Table 2",)),
                           "data re-split over strong + w": verdicts_of(alt, ("Table 2",))}))
    if "table6_femnist_split" in t:
        t6 = t["table6"].copy()
        f = t["table6_femnist_split"].set_index("case")
        for i, c in zip(t6.index, t6["case"]):
            if c in f.index:
                t6.loc[i, "embracingfl_seeds"] = f.loc[c, "embracingfl_seeds"]
        alt6 = claims({**t, "table6": t6}, seeds)
        out.append(Choice("Table 6's model split", "ResNet-like (1 / 2 frozen blocks)",
                          "its trained-parameter shares match the paper's ResNet-20 on CIFAR-10, Table 6's setting",
                          {"ResNet-like": verdicts_of(used, ("Table 6",)),
                           "FEMNIST split (2 / 3 frozen blocks)": verdicts_of(alt6, ("Table 6",))}))
    return out + [Choice("evaluation clock", f"every {EVAL_ROUNDS} rounds",
                   "Table 7 counts rounds, so the clock is in rounds; its tick is each row's resolution",
                   {f"every {EVAL_ROUNDS} rounds": verdicts_of(used, ("Table 7",)),
                    f"every {2 * EVAL_ROUNDS} rounds (re-read)": verdicts_of(coarse, ("Table 7",))})]


def results_markdown(out: Path, seeds: Sequence[int], commit: str, command: str) -> str:
    """RESULTS.md: the claims table and the tables this run wrote, with its provenance."""
    parts = results_head("EmbracingFL", "embracingfl", out, seeds, commit, command)
    for name, title in (("table2", "Table 2: weak clients added to 4 strong"),
                        ("table34", "Tables 3-4 style: 25% participation"),
                        ("table6", "Table 6: width reduction vs EmbracingFL"),
                        ("table7", "Table 7: rounds to the width-reduction final accuracy")):
        parts += [f"## {title}\n", (out / f"{name}.md").read_text(encoding="utf-8")]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ entry point

def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             progress: bool = True, resume: bool = False, rounds: int | None = None,
             stability_seeds: Sequence[int] | None = None) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables, their CSVs, ``claims.md`` and ``RESULTS.md`` into ``out``
    (``rounds``: every run's rounds and the SVCCA studies' iterations, to shorten it).  With
    ``stability_seeds`` the whole recipe runs again on them under ``out/stability`` and every claims row is
    checked against that run (:func:`figures.claims.stabilize`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds, stability_seeds = default_seeds(quick, seeds, stability_seeds)
    stab = None
    if stability_seeds:
        stab = claims_of(make_all(out / "stability", quick=quick, seeds=stability_seeds, progress=progress,
                                  resume=resume, rounds=rounds, stability_seeds=[])["claims"])
    if quick:
        v, weak_counts, cases34, cases6, strong_counts, it, nc, me = 12, (0, 12), (1, 7), (1, 7), (2, 16), 20, 6, 2
    else:
        v, weak_counts, cases34, cases6, strong_counts, it, nc, me = 30, (0, 4, 8, 12), (1, 2, 5, 7), \
            (1, 5, 7), (2, 4, 16), 40, 6, 2
    if rounds is not None:
        v, it = rounds, rounds
    jobs = (table2_jobs(seeds, v, weak_counts, out) + table34_jobs(seeds, v, cases34) + table6_jobs(seeds, v, cases6)
            + floor_jobs(seeds, v, strong_counts) + table2_resplit_jobs(seeds, v, weak_counts)
            + table6_split_jobs(seeds, v, cases6))
    results = run_jobs(jobs, out, label="EmbracingFL", progress=progress, resume=resume)
    t6, t7 = table67(results, seeds, cases6, out)
    raw = svcca_runs(seeds, it, nc, out, progress, measure_every=me)
    tables = {
        "table2": table2(results, seeds, weak_counts, out),
        "table2_resplit": table2(results, seeds, weak_counts, out, prefix="t2r", name="table2_resplit"),
        "table6_femnist_split": _efl_by_case(results, seeds, [c for c in cases6 if c != 1], "t6f", out),
        "table34": table34(results, seeds, cases34, out),
        "table6": t6, "table7": t7,
        "bias_floor": floor(results, seeds, strong_counts, out, progress),
        "fig1": fig1(raw, out),
        "fig1_spearman": pd.read_csv(out / "fig1_spearman.csv"),
        "fig3": fig3(raw, out),
        "svcca_raw": raw, "test_n": test_size(BASE), "rounds": v,
    }
    tables["bias_floor_seeds"] = pd.read_csv(out / "bias_floor_seeds.csv")
    command = "python -m figures.embracingfl" + (" --quick" if quick else "") + seeds_args(seeds, stability_seeds)
    commit = commit_hash()
    rows = claims(tables, seeds)
    (out / "claims.md").write_text(render_claims(rows, command=command, seeds=seeds, commit=commit,
                                                 choices=choices(tables, seeds, rows), stability=stab,
                                                 stability_seeds=stability_seeds), encoding="utf-8")
    (out / "RESULTS.md").write_text(results_markdown(out, seeds, commit, command), encoding="utf-8")
    tables["claims"] = pd.DataFrame([c.__dict__ for c in rows])
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.embracingfl", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="two seeds, short runs")
    add_seed_arguments(p)
    p.add_argument("--resume", action="store_true", help="reuse finished runs of the same scenarios under OUT/runs")
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds, resume=args.resume, stability_seeds=args.stability_seeds)
    print(f"EmbracingFL figures and tables written to {args.out} (claims.md, RESULTS.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
