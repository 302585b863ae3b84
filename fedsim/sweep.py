"""Sweeps: one run per value of one scenario field, and time-to-accuracy against that value.

    fedsim sweep default channel.uplink.mbps=0.5,2,8 --target 0.9

The swept field is the override whose value is a comma-separated list (outside brackets).  Every run
gets the same seed, so the runs differ only in the swept value.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from fedsim.errors import ConfigError  # noqa: E402


def split_sweep(overrides: list[str]) -> tuple[str, list[str], list[str]]:
    """Find the one ``key=v1,v2,...`` override; returns (key, raw values, the other overrides)."""
    swept = [o for o in overrides if "=" in o and _is_list(o.split("=", 1)[1])]
    if len(swept) != 1:
        raise ConfigError("sweep", f"give exactly one key=v1,v2,... to sweep (found {len(swept)}), e.g. channel.uplink.mbps=1,5,20")
    key, raw = swept[0].split("=", 1)
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if len(values) < 2:
        raise ConfigError(key, "a sweep needs at least two values")
    return key.strip(), values, [o for o in overrides if o is not swept[0]]


def _is_list(raw: str) -> bool:
    raw = raw.strip()
    return "," in raw and not raw.startswith(("[", "{"))


def time_to_accuracy(metrics: pd.DataFrame, target: float) -> float:
    """First virtual time at which test accuracy reaches ``target`` (inf if never)."""
    hit = metrics[metrics["accuracy"] >= target]
    return float(hit["t"].iloc[0]) if len(hit) else math.inf


def run_sweep(source: str | None, overrides: list[str], out: Path, *, target: float | None, progress: bool = True) -> pd.DataFrame:
    """Run the scenario once per swept value into ``out/<key>=<value>``; write sweep.csv and sweep.png."""
    from fedsim.runner import run_scenario
    from fedsim import load_scenario

    key, values, rest = split_sweep(overrides)
    if target is not None and not (math.isfinite(target) and 0 < target <= 1):
        raise ConfigError("--target", f"got {target!r} (allowed: an accuracy in (0, 1], e.g. 0.9)")
    scenarios = [load_scenario(source, rest + [f"{key}={v}"]) for v in values]  # validate all before running any
    if target is not None and any(sc.train.systems_only for sc in scenarios):
        raise ConfigError("--target", "a systems-only run (train.systems_only: true) measures no accuracy")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("--out", f"'{out}' exists and is not an empty folder; give a new folder for the sweep")
    rows: list[dict[str, Any]] = []
    for value, sc in zip(values, scenarios):
        sub = out / f"{key}={value}"
        for s in run_scenario(sc, sub, progress=progress):
            several = len(sc.algorithms) > 1
            metrics = pd.read_csv((sub / s["label"] if several else sub) / "metrics.csv")
            goal = target if target is not None else sc.stop.target_accuracy
            rows.append({
                "key": key, "value": yaml.safe_load(value), "label": s["label"], "status": s["status"],
                "final_accuracy": s.get("final_accuracy"), "virtual_time_s": s["virtual_time_s"],
                "target": goal, "time_to_target_s": time_to_accuracy(metrics, goal) if goal is not None else None,
                "reached_target": (bool(math.isfinite(time_to_accuracy(metrics, goal))) if goal is not None else None),
                "bytes_up": s.get("bytes_up"), "run_dir": str(sub),
            })
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "sweep.csv", index=False)
    (out / "sweep.json").write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
    sweep_figure(table, out / "sweep.png")
    return table


def sweep_figure(table: pd.DataFrame, path: Path) -> None:
    """Time to target accuracy (or final accuracy when no target) against the swept value."""
    fig, ax = plt.subplots(figsize=(6, 4))
    use_target = table["time_to_target_s"].notna().any()
    ycol = "time_to_target_s" if use_target else "final_accuracy"
    numeric = pd.api.types.is_numeric_dtype(table["value"])
    finite = table[ycol].replace(math.inf, float("nan"))
    top = float(finite.max()) if finite.notna().any() else 1.0
    for label, group in table.groupby("label", sort=False):
        x = group["value"] if numeric else list(range(len(group)))
        y = group[ycol].replace(math.inf, float("nan"))
        line = ax.plot(x, y, marker="o", label=str(label))[0]
        if use_target:  # never reached: an open marker above the data, not a missing (or fastest) point
            miss = ~group[ycol].apply(lambda v: v is not None and math.isfinite(v))
            if miss.any():
                xs = [xv for xv, m in zip(x, miss) if m]
                ax.scatter(xs, [top * 1.08] * len(xs), marker="^", facecolors="none", edgecolors=line.get_color(),
                           label=f"{label}: target not reached")
        if not numeric:
            ax.set_xticks(list(range(len(group))), [str(v) for v in group["value"]])
    if numeric and (table["value"] > 0).all() and table["value"].max() / table["value"].min() >= 10:
        from matplotlib.ticker import NullLocator

        ax.set_xscale("log")
        ax.xaxis.set_minor_locator(NullLocator())  # the swept values are the ticks: no overlapping log labels
    if numeric:
        values = sorted(set(table["value"]))
        ax.set_xticks(values, [f"{v:g}" for v in values])
    key = table["key"].iloc[0] if len(table) else ""
    ax.set_xlabel(f"{key} (swept)")
    tgt = table["target"].iloc[0] if use_target else None
    ax.set_ylabel(f"virtual time to {tgt:.0%} accuracy (s)" if use_target else "final test accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_seeds(scenario: Any, seeds: list[int], out: Path, *, target: float | None = None, progress: bool = True,
              force: bool = False, allow_large: bool = False) -> pd.DataFrame:
    """Run ``scenario`` once per seed into ``out/seed-<s>`` and compare algorithms across seeds.

    Writes ``seeds.csv`` (one row per algorithm and seed: final/best accuracy, time to ``target``, bytes,
    energy), ``seeds_summary.csv`` (mean and std over seeds per algorithm) and ``seeds.png`` (mean ± std
    of test accuracy against virtual time, each seed's curve held constant between evaluations).  Every
    seed's scenario is validated before the first run."""
    import dataclasses

    import numpy as np

    from fedsim.runner import preflight, prepare_run_dir, run_scenario

    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError("--seeds", f"give distinct seeds, e.g. 0,1,2 (got {seeds})")
    goal = target if target is not None else scenario.stop.target_accuracy
    if goal is not None and not (math.isfinite(goal) and 0 < goal <= 1):
        raise ConfigError("--target", f"got {goal!r} (allowed: an accuracy in (0, 1])")
    variants = [dataclasses.replace(scenario, seed=s) for s in seeds]
    for v in variants:
        preflight(v, allow_large=allow_large)
    out = prepare_run_dir(out, force=force)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[pd.DataFrame]] = {}
    for seed, sc in zip(seeds, variants):
        sub = out / f"seed-{seed}"
        for s in run_scenario(sc, sub, progress=progress, allow_large=allow_large):
            folder = sub / s["label"] if len(sc.algorithms) > 1 else sub
            metrics = pd.read_csv(folder / "metrics.csv")
            curves.setdefault(s["label"], []).append(metrics)
            ttt = time_to_accuracy(metrics, goal) if goal is not None else None
            rows.append({"algorithm": s["label"], "seed": seed, "status": s["status"],
                         "final_accuracy": s.get("final_accuracy"), "best_accuracy": s.get("best_accuracy"),
                         "target": goal, "time_to_target_s": ttt,
                         "reached_target": None if ttt is None else bool(math.isfinite(ttt)),
                         "virtual_time_s": s["virtual_time_s"], "bytes_up": s.get("bytes_up"),
                         "bytes_down": s.get("bytes_down"), "energy_j": s.get("energy_j")})
    table = pd.DataFrame(rows)
    table.to_csv(out / "seeds.csv", index=False)
    numeric = ["final_accuracy", "best_accuracy", "virtual_time_s", "bytes_up", "bytes_down", "energy_j"]
    summary = table.groupby("algorithm", sort=False)[numeric].agg(["mean", "std"])
    summary.columns = [f"{a}_{b}" for a, b in summary.columns]
    if goal is not None:
        summary["reached_target"] = table.groupby("algorithm", sort=False)["reached_target"].sum().astype(int)
        summary["seeds"] = table.groupby("algorithm", sort=False).size()
        # over the seeds that reached the target (a seed that never did has no time; reached_target counts them)
        hit = table[table["reached_target"] == True].groupby("algorithm", sort=False)["time_to_target_s"]  # noqa: E712
        summary["time_to_target_s_mean"], summary["time_to_target_s_std"] = hit.mean(), hit.std()
    summary.reset_index().to_csv(out / "seeds_summary.csv", index=False)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, frames in curves.items():
        end = max(float(f["t"].max()) for f in frames)
        grid = np.linspace(0.0, end, 200)
        ys = []
        for f in frames:
            f = f.dropna(subset=["accuracy"]).sort_values("t")
            if len(f) == 0:
                continue
            idx = np.searchsorted(f["t"].to_numpy(), grid, side="right") - 1
            ys.append(np.where(idx >= 0, f["accuracy"].to_numpy()[np.clip(idx, 0, None)], np.nan))
        if not ys:
            continue
        arr = np.vstack(ys)
        mean, std = np.nanmean(arr, axis=0), np.nanstd(arr, axis=0)
        line = ax.plot(grid, mean, label=f"{label} (n={len(ys)} seeds)")[0]
        ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "seeds.png", dpi=120)
    plt.close(fig)
    from fedsim.report import html_report

    html_report(out)
    return table
