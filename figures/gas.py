"""GAS (Yang & Liu): Figures 2, 3, 4 and Tables 1, 2 at a scale that runs on two CPU cores.

    python -m figures.gas --out DIR [--quick] [--seeds 0 1 2] [--cifar-root DIR] [--resume]

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
* Cell timing: the built-in ``gas-cell-timing`` scenario (the GAS code's seed-2023 clients, systems only),
  1000 global iterations (100 with ``--quick``): simulated time, buffer shares, participations, staleness.
* Lemma 1: per seed, the Figure 2 GAS runs' paired server-gradient dissimilarity with and without the
  generated rows (same weights, same buffer), against Lemma 1's factor ρ.

``claims.md`` is the paper's claims against these numbers, each verdict by the rule written under the
table; ``RESULTS.md`` adds the tables.  Both name the command, the commit and the seeds.
"""
from __future__ import annotations

import argparse
import copy
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.estimators import gas_lemma1_rho  # noqa: E402
from fedsim.scenario import load_raw  # noqa: E402
from figures.claims import (Claim, close_verdict, combine, commit_hash, fmt, render_claims,  # noqa: E402
                            results_head, seeds_verdict, verdict)
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
    df["partition"] = df["column"].map({c[0]: c[1] for c in cols})
    df["E"] = df["column"].map({c[0]: c[2] for c in cols})
    df.to_csv(out / "table2_local_iterations.csv", index=False)
    (out / "table2_local_iterations.md").write_text(md, encoding="utf-8")
    return df


# ------------------------------------------------------------------------------------------------ cell timing, Lemma 1

#: the GAS code's timing facts at K = 20, C = 10, E = 20, B = 32 over 1000 global iterations (spec §3.2-3.3)
CELL_SPEC = {"time_min": 52.0, "share_fast": 7.3, "share_slow": 2.4, "part_fast": 726.0, "part_slow": 241.0,
             "staleness_mean": 0.9, "staleness_max": 4.0}
CELL_LABELS = {"time_min": "simulated time of 1000 global iterations (min)",
               "share_fast": "buffer share of the fastest client (%)", "share_slow": "buffer share of the slowest client (%)",
               "part_fast": "participations (dispatches) of the fastest client",
               "part_slow": "participations (dispatches) of the slowest client",
               "staleness_mean": "client-model staleness, mean", "staleness_max": "client-model staleness, max"}


def cell_jobs(versions: int) -> list[Job]:
    """The built-in ``gas-cell-timing`` scenario (pinned clients, systems only, seed 0) for ``versions``."""
    m = load_raw("gas-cell-timing")
    m["stop"] = {"max_versions": versions}
    m["output"] = {**m.get("output", {}), "figures": False}
    return [Job(("cell", versions), m)]


def cell_timing(results: dict, versions: int, out: Path) -> pd.DataFrame:
    """The timing facts of the cell run, counts scaled to 1000 global iterations; fastest / slowest client by
    its measured time per local iteration (forward + backward + activation upload) in the trace."""
    res = results["cell", versions]
    tr = trace_of(res)
    comp = tr[tr["kind"] == "compute"]
    up = tr[(tr["kind"] == "upload") & (tr["what"] == "activations")]
    busy = ((comp["end"] - comp["start"]).groupby(comp["client"]).sum()
            + (up["end"] - up["start"]).groupby(up["client"]).sum())
    per_iter = busy / up.groupby("client").size()
    fast, slow = int(per_iter.idxmin()), int(per_iter.idxmax())
    steps = tr[tr["kind"] == "server_step"]
    share = pd.Series([c for cl in steps["clients"] for c in cl]).value_counts(normalize=True)
    parts = tr[tr["kind"] == "dispatch"].groupby("client").size()
    applied = tr[tr["kind"] == "apply"]
    scale = 1000.0 / versions
    value = {"time_min": float(res["summary"]["virtual_time_s"]) / 60.0 * scale,
             "share_fast": 100.0 * float(share.get(fast, 0.0)), "share_slow": 100.0 * float(share.get(slow, 0.0)),
             "part_fast": float(parts.get(fast, 0)) * scale, "part_slow": float(parts.get(slow, 0)) * scale,
             "staleness_mean": float(applied["staleness"].mean()), "staleness_max": float(applied["staleness"].max())}
    table = pd.DataFrame([{"quantity": k, "spec": CELL_SPEC[k], "value": v, "versions": versions,
                           "fastest_client": fast, "slowest_client": slow} for k, v in value.items()])
    table.to_csv(out / "cell_timing.csv", index=False)
    return table


def lemma1(results: dict, seeds: Sequence[int], out: Path) -> pd.DataFrame:
    """Per seed, from the Figure 2 GAS run: the mean paired dissimilarity with / without the generated rows
    (same server weights, same buffer), their ratio, the share of the generating steps where generation
    lowered it, and Lemma 1's ρ for the run's real rows B·Q_s and mean generated rows B̂."""
    rows = []
    for s in seeds:
        d = trace_of(results["fig2", "gas", s])
        d = d[d["kind"] == "dissimilarity"]
        with_g, without = d["with_generation"].astype(float), d["without_generation"].astype(float)
        gen = d["n_generated"].astype(float) > 0
        b_hat = int(round(float(d.loc[gen, "n_generated"].astype(float).mean()))) if gen.any() else 0
        real = int(round(float(d["n_real"].astype(float).mean())))
        batch = int(BASE["train"]["batch_size"])
        rows.append({"seed": s, "steps": len(d), "generating_steps": int(gen.sum()),
                     "with_generation": float(with_g.mean()), "without_generation": float(without.mean()),
                     "factor": float(with_g.mean() / without.mean()),
                     "lower_share": float((with_g[gen] < without[gen]).mean()) if gen.any() else float("nan"),
                     "n_real": real, "b_hat": b_hat,
                     "rho": gas_lemma1_rho(batch, max(1, real // batch), b_hat) if b_hat else float("nan")})
    table = pd.DataFrame(rows)
    table.to_csv(out / "lemma1_paired.csv", index=False)
    return table


# ------------------------------------------------------------------------------------------------ claims

TARGET3, TARGET4 = 0.85, 0.80
RULES = ("Verdicts: a number the paper states is \"yes\" within 5% of it, \"partly\" within 10%; a comparison "
         "(A above B, or A reaches a target first) is \"yes\" when it holds on the seed mean and on every seed, "
         "\"partly\" when on the mean or on most seeds, \"no\" otherwise; a claim over several columns or "
         "settings is \"yes\" when every part is, \"partly\" when some part is at least partly, \"n/a\" when "
         "nothing could be measured (a target never reached by either side).  A run that never reaches a "
         "target counts as infinitely late.  Lemma 1 is \"yes\" when the paired factor is below 1 on every seed "
         "and within the lemma's ρ, \"partly\" when only below 1.  Trends over E (Table 2) are judged on the seed "
         "means: the peak's position, and the change from the smallest to the largest E.")


def _per_seed(row: pd.Series) -> list[float]:
    """The per-seed values a Table 1/2 row lists (its ``values`` column)."""
    return [float(v) for v in str(row["values"]).split()]


def times_to(curves: pd.DataFrame, target: float) -> pd.Series:
    """Per (method, seed): the first evaluation time at or above ``target`` (inf when never; Python floats,
    so that two never-reached runs compare as NaN without a warning)."""
    def first(g: pd.DataFrame) -> float:
        hit = g[g["accuracy"] >= target]
        return float(hit["time_s"].iloc[0]) if len(hit) else math.inf
    return curves.sort_values("time_s").groupby(["method", "seed"])[["time_s", "accuracy"]].apply(first).astype(object)


def _finals(curves: pd.DataFrame) -> pd.Series:
    """Per (method, seed): the accuracy of the last evaluation (the end of the time budget)."""
    return curves.sort_values("time_s").groupby(["method", "seed"])["accuracy"].last()


def _span(vals: Sequence[float], digits: int = 2, unit: str = " s") -> str:
    v = [x for x in vals if math.isfinite(x)]
    never = len(vals) - len(v)
    if not v:
        return "never"
    text = f"{min(v):.{digits}f}{unit}" if min(v) == max(v) else f"{min(v):.{digits}f}–{max(v):.{digits}f}{unit}"
    return text + (f" ({never} never)" if never else "")


def claims(t: dict[str, pd.DataFrame], seeds: Sequence[int]) -> list[Claim]:
    """The paper's claims against this recipe's tables (``make_all``'s dict); every cell and verdict is
    computed here from those numbers, by the rules in :data:`RULES`."""
    out: list[Claim] = []
    seeds = list(seeds)
    if "cell" in t:
        c = t["cell"].set_index("quantity")
        v, n = c["value"], int(c["versions"].iloc[0])
        per = "" if n == 1000 else f" ({n} iterations, scaled)"
        out.append(Claim("GAS code timing: simulated time of 1000 global iterations (gas-cell-timing, seed 0)",
                         "≈52 min", f"{v['time_min']:.1f} min{per}", close_verdict(v["time_min"], 52.0)))
        out.append(Claim("buffer share of the fastest / slowest client", "≈7.3% / ≈2.4%",
                         f"{v['share_fast']:.2f}% / {v['share_slow']:.2f}%",
                         combine([close_verdict(v["share_fast"], 7.3), close_verdict(v["share_slow"], 2.4)])))
        out.append(Claim("participations of the fastest / slowest client", "726 / 241",
                         f"{v['part_fast']:.0f} / {v['part_slow']:.0f}{per}",
                         combine([close_verdict(v["part_fast"], 726.0), close_verdict(v["part_slow"], 241.0)])))
        out.append(Claim("client-model staleness, mean / max", "≈0.9 / 4",
                         f"{v['staleness_mean']:.2f} / {v['staleness_max']:.0f}",
                         combine([close_verdict(v["staleness_mean"], 0.9), close_verdict(v["staleness_max"], 4.0)])))
    lm = t["lemma1"]
    below_rho = bool((lm["factor"] <= lm["rho"]).all())
    v1 = seeds_verdict(list(1.0 - lm["factor"]))
    out.append(Claim("Lemma 1 / Fig. 2a: generated activations shrink the server-gradient dissimilarity "
                     "(paired: same weights, same buffer)", "factor ≤ ρ < 1",
                     f"factor {_span(list(lm['factor']), 2, '')} per seed (ρ = {_span(list(lm['rho']), 2, '')}); "
                     f"lower on {_span(list(100 * lm['lower_share']), 0, '%')} of the generating steps",
                     "yes" if v1 == "yes" and below_rho else ("partly" if v1 == "yes" else v1)))
    f2 = t["fig2"]
    last = int(f2["global_iteration"].max())
    parts, cells = [], []
    for it in sorted({max(1, last // 2), last}):
        at = f2[f2["global_iteration"] == it].pivot_table(index="seed", columns="method", values="accuracy")
        gaps = list(at[LABELS["gas"]] - at[LABELS["async-sfl"]])
        parts.append(seeds_verdict(gaps))
        cells.append(f"{it} iterations: {100 * at[LABELS['gas']].mean():.1f}% vs {100 * at[LABELS['async-sfl']].mean():.1f}%"
                     f" (gap {_span([100 * g for g in gaps], 1, ' pts')})")
    out.append(Claim("Fig. 2b: GAS more accurate than the same async SFL without generation, at equal global "
                     "iterations (2-label shards)", "GAS curve above", "; ".join(cells), combine(parts)))
    t1 = t["table1"]
    cols = list(dict.fromkeys(t1["column"]))
    first, ca2fl, cells1, cells2 = [], [], [], []
    for col in cols:
        g = t1[t1["column"] == col].set_index("method")
        others = [m for m in g.index if m != "GAS"]
        best = max(others, key=lambda m: g.loc[m, "mean"])
        gas_v = _per_seed(g.loc["GAS"])
        first.append(seeds_verdict([gv - max(_per_seed(g.loc[m])[i] for m in others) for i, gv in enumerate(gas_v)]))
        cells1.append(f"{col}: {g.loc['GAS', 'mean']:.1f} vs {best} {g.loc[best, 'mean']:.1f}")
        ca = _per_seed(g.loc["CA2FL"])
        ca2fl.append(seeds_verdict([cv - max(_per_seed(g.loc[m])[i] for m in ("FedAvg", "FedBuff"))
                                    for i, cv in enumerate(ca)]))
        cells2.append(f"{col}: CA2FL {g.loc['CA2FL', 'mean']:.1f}, FedAvg {g.loc['FedAvg', 'mean']:.1f}, "
                      f"FedBuff {g.loc['FedBuff', 'mean']:.1f}")
    v1_iters = "equal global iterations"
    out.append(Claim(f"Table 1: GAS most accurate in every column ({v1_iters})", "GAS first in all 8 columns",
                     "; ".join(cells1), combine(first)))
    out.append(Claim("Table 1: CA2FL above FedAvg and FedBuff", "in all 8 columns", "; ".join(cells2), combine(ca2fl)))
    t2 = t["table2"]
    es = sorted(t2["E"].unique())
    beats, peaks, rising, cells_b, cells_p, cells_r = [], [], [], [], [], []
    for part in ("shard2", "dir0.1"):
        g = t2[t2["partition"] == part]
        short = "s=2" if part == "shard2" else "α=0.1"
        for e in es:
            ge = g[g["E"] == e].set_index("method")
            gas_v = _per_seed(ge.loc["GAS"])
            beats.append(seeds_verdict([gv - max(_per_seed(ge.loc[m])[i] for m in ("FedBuff", "CA2FL"))
                                        for i, gv in enumerate(gas_v)]))
        worst = g[g["method"] != "GAS"].groupby("E")["mean"].max()
        gas_e = g[g["method"] == "GAS"].set_index("E")["mean"]
        cells_b.append(f"{short}: GAS − best baseline " + " / ".join(f"{gas_e[e] - worst[e]:+.1f}" for e in es))
        peak = float(gas_e.idxmax())
        peaks.append(verdict(len(es) > 2 and es[0] < peak < es[-1]))
        cells_p.append(f"{short}: GAS " + " / ".join(f"{gas_e[e]:.1f}" for e in es) + f" (peak at E = {peak:g})")
        for m in ("FedBuff", "CA2FL"):
            ys = list(g[g["method"] == m].set_index("E")["mean"].loc[es])
            rising.append(verdict(ys[-1] > ys[0]))
            cells_r.append(f"{short} {m} " + " / ".join(f"{y:.1f}" for y in ys))
    e_list = ", ".join(f"{e:g}" for e in es)
    out.append(Claim(f"Table 2: GAS above FedBuff and CA2FL at each E (E = {e_list})",
                     "at E = 10–35 (CA2FL higher at E = 50)",
                     "; ".join(cells_b), combine(beats)))
    out.append(Claim("Table 2: GAS non-monotone in E, peaking at an intermediate E", "peak at E = 20 (s=2 and α=0.1)",
                     "; ".join(cells_p), combine(peaks)))
    out.append(Claim("Table 2: FedBuff and CA2FL improve with E (smallest to largest E)",
                     "net rise from E = 10 to 50 in all four rows", "; ".join(cells_r),
                     combine(rising)))
    f3 = t["fig3"]
    tt, fin = times_to(f3, TARGET3), _finals(f3)
    gas_t = [tt[LABELS["gas"], s] for s in seeds]
    sync = [LABELS["minibatch-sfl"], LABELS["s2fl"]]
    out.append(Claim(f"Fig. 3: GAS reaches {TARGET3:.0%} in less simulated time than synchronous SFL",
                     "\"faster convergence speeds\" (text)",
                     f"GAS {_span(gas_t)}; " + "; ".join(f"{m} {_span([tt[m, s] for s in seeds])}" for m in sync),
                     combine([seeds_verdict([tt[m, s] - tt[LABELS['gas'], s] for s in seeds]) for m in sync])))
    end3 = float(f3.groupby(["method", "seed"])["time_s"].max().min())
    out.append(Claim(f"Fig. 3: GAS ends at least as high as synchronous SFL ({end3:.1f} s of simulated time)",
                     "\"better convergence performance\" (text)",
                     f"GAS {100 * fin[LABELS['gas']].mean():.1f}%; "
                     + "; ".join(f"{m} {100 * fin[m].mean():.1f}%" for m in sync),
                     combine([seeds_verdict([fin[LABELS['gas'], s] - fin[m, s] for s in seeds]) for m in sync])))
    f4 = t["fig4"]
    e_small, e_large = int(f4["E"].min()), int(f4["E"].max())
    small = f4[f4["E"] == e_small]
    tt4, fin4 = times_to(small, TARGET4), _finals(small)
    others = [LABELS[a] for a in FL_METHODS if a != "gas"]
    out.append(Claim(f"Fig. 4a (E = {e_small}, Dir(0.1)): GAS reaches {TARGET4:.0%} first", "GAS fastest (E = 20)",
                     f"GAS {_span([tt4[LABELS['gas'], s] for s in seeds])}; "
                     + "; ".join(f"{m} {_span([tt4[m, s] for s in seeds])}" for m in others),
                     combine([seeds_verdict([tt4[m, s] - tt4[LABELS['gas'], s] for s in seeds]) for m in others])))
    out.append(Claim(f"Fig. 4a (E = {e_small}): GAS ends highest", "GAS highest (E = 20)",
                     f"GAS {100 * fin4[LABELS['gas']].mean():.1f}%; "
                     + "; ".join(f"{m} {100 * fin4[m].mean():.1f}%" for m in others),
                     combine([seeds_verdict([fin4[LABELS['gas'], s] - fin4[m, s] for s in seeds]) for m in others])))
    big = times_to(f4[f4["E"] == e_large], TARGET4)
    ca_big = [big[LABELS["ca2fl"], s] for s in seeds]
    gas_small = [tt4[LABELS["gas"], s] for s in seeds]
    out.append(Claim(f"Fig. 4: CA2FL at the larger E ({e_large}) needs longer to a target than GAS at the smaller "
                     f"E ({e_small})", "60 vs 30 min to 60% (E = 50 vs 20)",
                     f"to {TARGET4:.0%}: CA2FL {_span(ca_big)} vs GAS {_span(gas_small)}",
                     seeds_verdict([a - b for a, b in zip(ca_big, gas_small)])))
    return out


def results_markdown(out: Path, seeds: Sequence[int], commit: str, command: str) -> str:
    """GAS_RESULTS.md: the claims table and the tables this run wrote, with its provenance."""
    parts = results_head("GAS", "gas", out, seeds, commit, command)
    cell = out / "cell_timing.csv"
    if cell.exists():
        c = pd.read_csv(cell)
        n = int(c["versions"].iloc[0])
        scaled = "" if n == 1000 else "; counts and time scaled to 1000"
        lines = [f"The built-in `gas-cell-timing` scenario (seed 0, {n} global iterations{scaled}; fastest client "
                 f"{int(c['fastest_client'].iloc[0])}, slowest {int(c['slowest_client'].iloc[0])} by their measured "
                 f"time per local iteration).\n", "| quantity | spec | fedsim |", "|---|---|---|"]
        for _, r in c.iterrows():
            lines.append(f"| {CELL_LABELS[r['quantity']]} | {r['spec']:g} | {r['value']:.3f} |")
        parts += ["## Cell timing (spec §3.2-3.3)\n", "\n".join(lines) + "\n"]
    lm = pd.read_csv(out / "lemma1_paired.csv")
    lines = ["| seed | server steps (generating) | mean D with generation | without | factor | ρ (B·Q_s, B̂) | "
             "lower on |", "|---|---|---|---|---|---|---|"]
    for _, r in lm.iterrows():
        lines.append(f"| {int(r['seed'])} | {int(r['steps'])} ({int(r['generating_steps'])}) | {r['with_generation']:.3f} "
                     f"| {r['without_generation']:.3f} | {r['factor']:.3f} | {fmt(r['rho'], 3)} ({int(r['n_real'])}, "
                     f"{int(r['b_hat'])}) | {fmt(100 * r['lower_share'], 1)}% |")
    parts += ["## Lemma 1 / Figure 2a: paired dissimilarity (Figure 2's GAS runs)\n", "\n".join(lines) + "\n",
              "## Table 1: accuracy (%) after a fixed number of global iterations\n",
              (out / "table1_accuracy.md").read_text(encoding="utf-8"),
              "## Table 2: accuracy (%) against E\n", (out / "table2_local_iterations.md").read_text(encoding="utf-8")]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ entry point

def make_all(out: str | Path, *, quick: bool = False, seeds: Sequence[int] | None = None,
             cifar_root: str | None = None, progress: bool = True, iterations: int | None = None,
             time_s: float | None = None, resume: bool = False) -> dict[str, pd.DataFrame]:
    """Run every recipe and write the figures, tables, their CSVs, ``claims.md`` and ``RESULTS.md`` into
    ``out`` (``iterations`` / ``time_s``: every run's global iterations / simulated seconds, to shorten it;
    ``resume``: reuse finished runs of the identical scenario, even ones made by older code)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(seeds) if seeds is not None else ([0] if quick else [0, 1, 2])
    if quick:
        v2, t3, t4, es4, v1, v2t, es2, vc = 20, 3.0, 3.0, (2, 8), 20, 20, (2, 8), 100
        settings = [("digits", "shard2")]
    else:
        v2, t3, t4, es4, v1, v2t, es2, vc = 40, 8.0, 8.0, (5, 15), 60, 40, (2, 5, 10, 20), 1000
        settings = [("digits", "shard2"), ("digits", "dir0.1"), ("mnist1d", "shard2")]
    if iterations is not None:
        v2 = v1 = v2t = vc = iterations
    if time_s is not None:
        t3 = t4 = time_s
    if cifar_root and os.path.isdir(os.path.join(cifar_root, "cifar-10-batches-py")):
        settings.append(("cifar10", "shard2"))
    jobs = (figure2_jobs(seeds, v2) + figure3_jobs(seeds, t3) + figure4_jobs(seeds, es4, t4)
            + table1_jobs(seeds, v1, settings, cifar_root) + table2_jobs(seeds, v2t, es2) + cell_jobs(vc))
    results = run_jobs(jobs, out, label="GAS", progress=progress, resume=resume)
    tables = {
        "fig2": figure2(results, seeds, out),
        "fig3": figure3(results, seeds, out),
        "fig4": figure4(results, seeds, es4, out),
        "table1": table1(results, seeds, settings, out),
        "table2": table2(results, seeds, es2, out),
        "cell": cell_timing(results, vc, out),
        "lemma1": lemma1(results, seeds, out),
    }
    command = "python -m figures.gas" + (" --quick" if quick else "") + f" --seeds {' '.join(map(str, seeds))}"
    commit = commit_hash()
    rows = claims(tables, seeds)
    (out / "claims.md").write_text(render_claims(rows, command=command, seeds=seeds, commit=commit, rules=RULES),
                                   encoding="utf-8")
    (out / "RESULTS.md").write_text(results_markdown(out, seeds, commit, command), encoding="utf-8")
    tables["claims"] = pd.DataFrame([c.__dict__ for c in rows])
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.gas", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--quick", action="store_true", help="one seed, short runs (about 45 s of CPU time)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2; --quick: 0)")
    p.add_argument("--cifar-root", default=None, help="folder holding cifar-10-batches-py (adds a CIFAR-10 column)")
    p.add_argument("--resume", action="store_true", help="reuse finished runs of the identical scenario")
    args = p.parse_args(argv)
    make_all(args.out, quick=args.quick, seeds=args.seeds, cifar_root=args.cifar_root, resume=args.resume)
    print(f"GAS figures and tables written to {args.out} (claims.md, RESULTS.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
