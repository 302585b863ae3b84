"""GAS (Yang & Liu): Figures 2, 3, 4 and Tables 1, 2 at a scale that runs on two CPU cores.

    python -m figures.gas --out DIR [--quick] [--seeds 0 1 2] [--cifar-root DIR]

Every figure is written as a PNG next to the CSV of exactly what it plots; tables are written as CSV and
Markdown.  The runs themselves (trace, metrics, summary) are kept under ``DIR/runs``.

Scale (documented, not the paper's): sklearn digits (and MNIST-1D for a second column of Table 1)
instead of CIFAR-10 / CINIC-10 / Fashion-MNIST; K = 10 clients, C = 3 active, B = 16, a 64-64 block MLP cut
after its first block (a 64-dim activation, diagonal Gaussians); T = 30–60 global iterations instead of
1000–2000.  Devices draw U(1e9, 1e10) FLOP/s and links come from the world's ``gas-cell`` channel preset
(distance U(0.1, 1) km, TR 36.814 path loss, 10 MHz per client, ideal downlink), shared by every method;
split learning uses the ``real`` timing convention (FLOPs × batch, labels uploaded, server time queued).  With ``--cifar-root`` pointing at
``cifar-10-batches-py``'s parent, Table 1 adds a CIFAR-10 shard-2 column with the small CNN.

* Fig. 2: GAS vs the same asynchronous SFL without generated activations: (a) server-gradient
  dissimilarity ‖g_buffer − g_population‖² per global iteration, (b) test accuracy.
* Fig. 3: GAS vs MiniBatch-SFL and S2FL, test accuracy against virtual time.
* Fig. 4: GAS vs FedBuff, CA2FL and FedAvg against virtual time at two numbers of local iterations E.
* Table 1: accuracy after T global iterations, FedAvg / FedBuff / CA2FL / GAS, shard-2 and Dir(0.1).
* Table 2: accuracy against E for FedBuff, CA2FL and GAS.
"""
from __future__ import annotations

import argparse
import copy
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from figures.common import Job, run_jobs, save, trace_of  # noqa: E402

BASE: dict[str, Any] = {
    "name": "gas-figure",
    "seed": 0,
    "data": {"name": "digits", "num_clients": 10, "partition": {"method": "shards", "labels_per_client": 2}},
    "model": {"name": "mlp", "hidden": [64, 64]},
    "train": {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "batch_size": 16, "local_steps": 5, "clip_norm": 10.0},
    "devices": {"mix": [{"profile": "jetson-nano", "flops_per_s": [1e9, 1e10]}], "jitter": 0.0},
    "channel": {"preset": "gas-cell"},
    "network": {"latency_s": 0.0},
    "server": {"profile": "rtx-3090", "workers": 1},
    "stop": {"max_versions": 30},
    "eval": {"every_versions": 2},
    "output": {"figures": False, "flush_every": 2048},
}
C = 3
LABELS = {"gas": "GAS", "async-sfl": "w/o generative activations", "minibatch-sfl": "MiniBatch-SFL", "s2fl": "S2FL",
          "fedavg": "FedAvg", "fedbuff": "FedBuff", "ca2fl": "CA2FL"}


def algorithm(name: str, **extra: Any) -> dict[str, Any]:
    """The algorithm mapping of one method with the shared concurrency (C) and buffer sizes (Q_s = Q_c = C)."""
    if name in ("gas", "async-sfl"):
        return {"name": name, "cut": 1, "concurrency": C, **extra}
    if name in ("minibatch-sfl", "s2fl"):
        return {"name": name, "cut": 1, "clients_per_round": C, **extra}
    if name == "fedavg":
        return {"name": name, "clients_per_round": C, **extra}
    if name == "fedbuff":
        return {"name": name, "concurrency": C, "buffer_size": C, "staleness": "constant", **extra}
    return {"name": name, "concurrency": C, "buffer_size": C, **extra}


def partition(kind: str) -> dict[str, Any]:
    return {"method": "shards", "labels_per_client": 2} if kind == "shard2" else {"method": "dirichlet", "alpha": 0.1,
                                                                                  "min_size": 10}


def job(key: tuple, algo: dict[str, Any], seed: int, *, dataset: str = "digits", part: str = "shard2",
        local_steps: int | None = None, stop: dict | None = None, eval_every: int = 2, model: dict | None = None,
        root: str | None = None) -> Job:
    m = copy.deepcopy(BASE)
    m["seed"] = seed
    m["algorithm"] = algo
    m["data"]["name"] = dataset
    m["data"]["root"] = root
    m["data"]["partition"] = partition(part)
    if local_steps is not None:
        m["train"]["local_steps"] = local_steps
    if stop is not None:
        m["stop"] = stop
    if model is not None:
        m["model"] = model
    m["eval"]["every_versions"] = eval_every
    return Job(key, m)


def _mean_curve(df: pd.DataFrame, x: str, y: str, by: str) -> pd.DataFrame:
    return df.groupby([by, x], as_index=False)[y].agg(["mean", "std"]).reset_index()


# ------------------------------------------------------------------------------------------------ recipes

def figure2_jobs(seeds: Sequence[int], versions: int) -> list[Job]:
    return [job(("fig2", a, s), algorithm(a, measure_every=1, measure_samples=500), s,
                stop={"max_versions": versions}, eval_every=1) for s in seeds for a in ("gas", "async-sfl")]


def figure2(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    rows = []
    for a in ("gas", "async-sfl"):
        for s in seeds:
            res = results["fig2", a, s]
            df = trace_of(res)
            d = df[df["kind"] == "dissimilarity"].copy()
            # the dissimilarity of the batch each step used: with the generated rows for GAS, without for the ablation
            d["used_value"] = np.where(d["used"], d["with_generation"], d["without_generation"])
            per_version = d.groupby("version")["used_value"].mean()
            acc = res["metrics"].set_index("version")["accuracy"]
            for v in sorted(set(per_version.index) | set(acc.index)):
                rows.append({"method": LABELS[a], "seed": s, "global_iteration": int(v),
                             "dissimilarity": float(per_version.get(v, np.nan)),
                             "accuracy": float(acc.get(v, np.nan))})
    table = pd.DataFrame(rows)
    table.to_csv(out / "fig2_dissimilarity_accuracy.csv", index=False)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method, g in table.groupby("method", sort=False):
        m = g.groupby("global_iteration")[["dissimilarity", "accuracy"]].mean()
        axes[0].plot(m.index, m["dissimilarity"], label=method)
        axes[1].plot(m.index, m["accuracy"], label=method)
    axes[0].set_yscale("log")
    axes[0].set(xlabel="global iteration", ylabel="gradient dissimilarity", title="(a) gradient dissimilarity")
    axes[1].set(xlabel="global iteration", ylabel="test accuracy", title="(b) test accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    save(fig, out / "fig2_dissimilarity_accuracy.png")
    return table


def _curves(results: dict, keys: list[tuple], label_of: Callable[[tuple], str]) -> pd.DataFrame:
    rows = []
    for k in keys:
        m = results[k]["metrics"]
        for _, r in m.iterrows():
            rows.append({"method": label_of(k), "seed": k[-1], "time_s": float(r["t"]), "global_iteration": int(r["version"]),
                         "accuracy": float(r["accuracy"])})
    return pd.DataFrame(rows)


def _plot_time(ax: plt.Axes, table: pd.DataFrame, title: str) -> None:
    grid_end = table.groupby(["method", "seed"])["time_s"].max().min()
    grid = np.linspace(0, grid_end, 60)
    for method, g in table.groupby("method", sort=False):
        ys = [np.interp(grid, gs["time_s"], gs["accuracy"]) for _, gs in g.groupby("seed")]
        ax.plot(grid, np.mean(ys, 0), label=method)
    ax.set(xlabel="virtual time (s)", ylabel="test accuracy", title=title)
    ax.grid(alpha=0.3)
    ax.legend()


def figure3_jobs(seeds: Sequence[int], time_s: float) -> list[Job]:
    return [job(("fig3", a, s), algorithm(a), s, stop={"max_time_s": time_s, "max_versions": None}, eval_every=1)
            for s in seeds for a in ("gas", "minibatch-sfl", "s2fl")]


def figure3(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    keys = [("fig3", a, s) for a in ("gas", "minibatch-sfl", "s2fl") for s in seeds]
    table = _curves(results, keys, lambda k: LABELS[k[1]])
    table.to_csv(out / "fig3_sfl_time.csv", index=False)
    fig, ax = plt.subplots(figsize=(6, 4))
    _plot_time(ax, table, "digits, shard = 2: GAS vs synchronous SFL")
    save(fig, out / "fig3_sfl_time.png")
    return table


FL_METHODS = ("gas", "fedbuff", "ca2fl", "fedavg")


def figure4_jobs(seeds: Sequence[int], es: Sequence[int], time_s: float) -> list[Job]:
    return [job(("fig4", a, e, s), algorithm(a), s, part="dir0.1", local_steps=e,
                stop={"max_time_s": time_s, "max_versions": None}, eval_every=1)
            for e in es for s in seeds for a in FL_METHODS]


def figure4(results: dict, seeds: Sequence[int], es: Sequence[int], out: Path) -> pd.DataFrame:
    tables = []
    fig, axes = plt.subplots(1, len(es), figsize=(5 * len(es), 4), squeeze=False)
    for ax, e in zip(axes[0], es):
        keys = [("fig4", a, e, s) for a in FL_METHODS for s in seeds]
        t = _curves(results, keys, lambda k: LABELS[k[1]]).assign(E=e)
        tables.append(t)
        _plot_time(ax, t, f"E = {e}, Dir(0.1)")
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "fig4_local_iterations_time.csv", index=False)
    save(fig, out / "fig4_local_iterations_time.png")
    return table


def table1_jobs(seeds: Sequence[int], versions: int, settings: Sequence[tuple[str, str]], cifar_root: str | None) -> list[Job]:
    jobs = []
    for ds, part in settings:
        model = {"name": "cnn"} if ds == "cifar10" else None
        cut = 2 if ds == "cifar10" else 1
        for s in seeds:
            for a in FL_METHODS:
                algo = algorithm(a) if a not in ("gas",) else algorithm(a, cut=cut)
                jobs.append(job(("table1", ds, part, a, s), algo, s, dataset=ds, part=part,
                                stop={"max_versions": versions}, eval_every=versions, model=model,
                                root=cifar_root if ds == "cifar10" else None))
    return jobs


def _table(results: dict, rows: list[tuple], cols: list[tuple], key: Callable[[tuple, tuple, int], tuple],
           seeds: Sequence[int]) -> tuple[pd.DataFrame, str]:
    recs, md = [], []
    header = "| Method | " + " | ".join(c[0] for c in cols) + " |"
    md += [header, "|" + "---|" * (len(cols) + 1)]
    for r in rows:
        cells = []
        for c in cols:
            accs = [100 * results[key(r, c, s)]["summary"]["final_accuracy"] for s in seeds]
            recs.append({"method": r[0], "column": c[0], "mean": float(np.mean(accs)), "std": float(np.std(accs)),
                         "seeds": len(accs), "values": " ".join(f"{a:.2f}" for a in accs)})
            cells.append(f"{np.mean(accs):.2f}±{np.std(accs):.2f}")
        md.append(f"| {r[0]} | " + " | ".join(cells) + " |")
    return pd.DataFrame(recs), "\n".join(md) + "\n"


def table1(results: dict, seeds: Sequence[int], settings: Sequence[tuple[str, str]], out: Path) -> pd.DataFrame:
    rows = [(LABELS[a], a) for a in ("fedavg", "fedbuff", "ca2fl", "gas")]
    cols = [(f"{ds} {'s=2' if p == 'shard2' else 'α=0.1'}", ds, p) for ds, p in settings]
    df, md = _table(results, rows, cols, lambda r, c, s: ("table1", c[1], c[2], r[1], s), seeds)
    df.to_csv(out / "table1_accuracy.csv", index=False)
    (out / "table1_accuracy.md").write_text(md, encoding="utf-8")
    return df


def table2_jobs(seeds: Sequence[int], versions: int, es: Sequence[int]) -> list[Job]:
    return [job(("table2", part, a, e, s), algorithm(a), s, part=part, local_steps=e, stop={"max_versions": versions},
                eval_every=versions)
            for part in ("shard2", "dir0.1") for e in es for s in seeds for a in ("fedbuff", "ca2fl", "gas")]


def table2(results: dict, seeds: Sequence[int], es: Sequence[int], out: Path) -> pd.DataFrame:
    rows = [(LABELS[a], a) for a in ("fedbuff", "ca2fl", "gas")]
    cols = [(f"{'s=2' if p == 'shard2' else 'α=0.1'}, E={e}", p, e) for p in ("shard2", "dir0.1") for e in es]
    df, md = _table(results, rows, cols, lambda r, c, s: ("table2", c[1], r[1], c[2], s), seeds)
    df.to_csv(out / "table2_local_iterations.csv", index=False)
    (out / "table2_local_iterations.md").write_text(md, encoding="utf-8")
    return df


# ------------------------------------------------------------------------------------------------ entry point

def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             cifar_root: str | None = None, progress: bool = True) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables and their CSVs into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else ([0] if quick else [0, 1, 2])
    if quick:
        v2, t3, t4, es4, v1, v2t, es2 = 20, 3.0, 3.0, (2, 8), 20, 20, (2, 8)
        settings = [("digits", "shard2")]
    else:
        v2, t3, t4, es4, v1, v2t, es2 = 40, 8.0, 8.0, (5, 15), 60, 40, (2, 5, 10, 20)
        settings = [("digits", "shard2"), ("digits", "dir0.1"), ("mnist1d", "shard2")]
    if cifar_root and os.path.isdir(os.path.join(cifar_root, "cifar-10-batches-py")):
        settings.append(("cifar10", "shard2"))
    jobs = (figure2_jobs(seeds, v2) + figure3_jobs(seeds, t3) + figure4_jobs(seeds, es4, t4)
            + table1_jobs(seeds, v1, settings, cifar_root) + table2_jobs(seeds, v2t, es2))
    results = run_jobs(jobs, out, label="GAS", progress=progress)
    return {
        "fig2": figure2(results, seeds, out),
        "fig3": figure3(results, seeds, out),
        "fig4": figure4(results, seeds, es4, out),
        "table1": table1(results, seeds, settings, out),
        "table2": table2(results, seeds, es2, out),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.gas", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="one seed, short runs (about 35 s of CPU time)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2; --quick: 0)")
    p.add_argument("--cifar-root", default=None, help="folder holding cifar-10-batches-py (adds a CIFAR-10 column)")
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds, cifar_root=args.cifar_root)
    print(f"GAS figures and tables written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
