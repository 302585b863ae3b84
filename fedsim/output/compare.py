"""``fedsim compare RUN_DIR...``: earlier runs side by side, whatever their algorithm, seed or scenario.

Every run found under the folders given (a run, a multi-algorithm run, a ``--seeds`` folder, a sweep) is
one line of ``comparison.csv`` / ``comparison.md`` and one curve of the figures: test accuracy against
virtual time (``compare_accuracy.png``), bytes moved against virtual time and accuracy against bytes
(``compare_bytes.png``), and energy per run, active apart from idle (``compare_energy.png``).  A run
that did not finish is listed with its status, so a comparison never hides one.  Two runs are also put side
by side in ``report.html`` with their differences named (:mod:`fedsim.output.side_by_side`).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedsim.errors import ConfigError  # noqa: E402
from fedsim.files import write_csv, write_text  # noqa: E402
from fedsim.output.report import ENERGY_PARTS, fmt_bytes, fmt_seconds, save_figure  # noqa: E402
from fedsim.sweep import time_to_accuracy  # noqa: E402


def find_runs(folders: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """Every single-algorithm run folder under ``folders`` (its ``summary.json`` holds one summary, or it has
    none but a ``scenario.yaml``: a run killed or still running, listed with that status), named by its
    path from the folders' common parent (so two runs never share a name).  A summary.json that is not
    JSON is one line naming it."""
    found: list[Path] = []
    for f in folders:
        f = Path(f)
        if not f.exists():
            raise ConfigError("RUN_DIR", f"'{f}' does not exist")
        if not f.is_dir():
            raise ConfigError("RUN_DIR", f"'{f}' is not a folder (give run folders, e.g. runs/default)")
        candidates = {p.parent for p in f.rglob("summary.json")} | {p.parent for p in f.rglob("scenario.yaml")}
        runs = sorted((d for d in candidates if _single(d)), key=lambda p: str(p))
        if not runs:
            raise ConfigError("RUN_DIR", f"'{f}' holds no fedsim run (no summary.json or scenario.yaml)")
        found.extend(r for r in runs if r.resolve() not in {x.resolve() for x in found})
    resolved = [r.resolve() for r in found]
    common = Path(os.path.commonpath(resolved)) if len(resolved) > 1 else resolved[0].parent
    if any(r == common for r in resolved):
        common = common.parent
    return [(str(r.relative_to(common)), p) for r, p in zip(resolved, found)]


def _single(folder: Path) -> bool:
    """Whether ``folder`` is one run: its summary is one summary (not a multi-algorithm run's list), or it
    has none and holds a run's scenario.yaml beside a manifest or a trace."""
    from fedsim.rundirs import read_summary

    summary = read_summary(folder / "summary.json")
    if summary is not None:
        return isinstance(summary, dict)
    from fedsim.files import MANIFEST
    from fedsim.sim.trace import TRACE_FILES

    # a user's scenario.yaml alone is no run: fedsim's manifest or a trace says one started here
    return (folder / "scenario.yaml").is_file() and any((folder / n).is_file() for n in (MANIFEST, *TRACE_FILES.values()))


#: The status a run without summary.json is listed with.
NO_SUMMARY = "no summary (killed, or still running)"


def _summary_or_scenario(d: Path) -> dict[str, Any]:
    """The run's summary; for a run without one, what its scenario.yaml says (name, algorithm, seed) and
    the status :data:`NO_SUMMARY`."""
    import yaml

    from fedsim.rundirs import read_summary

    s = read_summary(d / "summary.json")
    if isinstance(s, dict):
        return s
    try:
        sc = yaml.safe_load((d / "scenario.yaml").read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        sc = None
    sc = sc if isinstance(sc, dict) else {}
    alg = sc.get("algorithm") if isinstance(sc.get("algorithm"), dict) else {}
    return {"scenario": sc.get("name"), "algorithm": alg.get("name"), "seed": sc.get("seed"), "status": NO_SUMMARY}


def compare_table(runs: Sequence[tuple[str, Path]], target: float | None = None) -> pd.DataFrame:
    """One row per run: what it was (scenario, algorithm, seed, status) and what it cost and reached."""
    rows = []
    for name, d in runs:
        s = _summary_or_scenario(d)
        metrics = pd.read_csv(d / "metrics.csv") if (d / "metrics.csv").exists() else pd.DataFrame()
        ttt = None
        if target is not None and len(metrics) and metrics["accuracy"].notna().any():
            ttt = time_to_accuracy(metrics, target)
        energy = pd.read_csv(d / "energy.csv") if (d / "energy.csv").exists() else pd.DataFrame()
        active = float(energy[[c for c in ("compute_j", "tx_j", "rx_j") if c in energy]].to_numpy().sum()) \
            if len(energy) else None
        rows.append({"run": name, "scenario": s.get("scenario"), "algorithm": s.get("algorithm"),
                     "seed": s.get("seed"), "status": s.get("status"), "final_accuracy": s.get("final_accuracy"),
                     "best_accuracy": s.get("best_accuracy"), "time_to_target_s": ttt,
                     "virtual_time_s": s.get("virtual_time_s"), "versions": s.get("versions"),
                     "mean_staleness": s.get("mean_staleness"), "bytes_up": s.get("bytes_up"),
                     "bytes_down": s.get("bytes_down"), "energy_j": s.get("energy_j"), "active_energy_j": active,
                     "wall_time_s": s.get("wall_time_s"), "path": str(d)})
    table = pd.DataFrame(rows)
    if target is None:
        table = table.drop(columns=["time_to_target_s"])
    return table


def markdown_table(table: pd.DataFrame, target: float | None = None) -> str:
    """The comparison for people: units and rounded numbers, one line per run."""
    head = ["run", "algorithm", "seed", "status", "final acc.", "best acc."]
    if target is not None:
        head.append(f"time to {target:.0%}")
    head += ["virtual time", "bytes up", "bytes down", "energy", "active energy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def num(v: Any, f: Any) -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f(v)

    for _, r in table.iterrows():
        cells = [str(r["run"]), str(r["algorithm"]), num(r["seed"], lambda v: f"{int(v)}"), str(r["status"]),
                 num(r["final_accuracy"], lambda v: f"{v:.4f}"), num(r["best_accuracy"], lambda v: f"{v:.4f}")]
        if target is not None:
            cells.append(num(r["time_to_target_s"], fmt_seconds))
        cells += [num(r["virtual_time_s"], fmt_seconds), num(r["bytes_up"], fmt_bytes), num(r["bytes_down"], fmt_bytes),
                  num(r["energy_j"], lambda v: f"{v:.4g} J"), num(r["active_energy_j"], lambda v: f"{v:.4g} J")]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def compare_figures(runs: Sequence[tuple[str, Path]], out: Path) -> list[Path]:
    """Overlays of the runs' metrics (accuracy and bytes against virtual time, accuracy against bytes) and
    their energy; returns the figures written."""
    metrics = {name: pd.read_csv(d / "metrics.csv") for name, d in runs if (d / "metrics.csv").exists()}
    written = []
    has_acc = {n: m for n, m in metrics.items() if len(m) and m["accuracy"].notna().any()}
    if has_acc:
        from fedsim.output.report import accuracy_figure

        p = out / "compare_accuracy.png"
        accuracy_figure(has_acc, p, title="test accuracy of the compared runs")
        written.append(p)
    if metrics:
        fig, axes = plt.subplots(1, 2 if has_acc else 1, figsize=(11 if has_acc else 6, 4), squeeze=False)
        for name, m in metrics.items():
            moved = m.get("bytes_up", 0) + m.get("bytes_down", 0)
            line = axes[0, 0].plot(m["t"], moved / 1e6, marker=".", label=name)[0]
            if name in has_acc:
                axes[0, 1].plot(moved / 1e6, m["accuracy"], marker=".", color=line.get_color(), label=name)
        axes[0, 0].set_xlabel("virtual time (s)")
        axes[0, 0].set_ylabel("bytes moved, up + down (MB)")
        axes[0, 0].set_title("traffic", fontsize=9)
        if has_acc:
            axes[0, 1].set_xlabel("bytes moved, up + down (MB)")
            axes[0, 1].set_ylabel("test accuracy")
            axes[0, 1].set_title("accuracy per byte", fontsize=9)
        for ax in axes.flat:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        p = out / "compare_bytes.png"
        save_figure(fig, p)
        plt.close(fig)
        written.append(p)
    energy = {}
    for name, d in runs:
        if (d / "energy.csv").exists():
            e = pd.read_csv(d / "energy.csv")
            energy[name] = {c: float(e[c].sum()) for c in ENERGY_PARTS if c in e}
    if energy:
        names = list(energy)
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.8 + 0.45 * len(names) + 1.2))
        for ax, cols, title in ((axes[0], tuple(ENERGY_PARTS), "all energy"),
                                (axes[1], tuple(c for c in ENERGY_PARTS if c != "idle_j"), "active energy only")):
            left = np.zeros(len(names))
            for c in cols:
                vals = np.array([energy[n].get(c, 0.0) for n in names])
                ax.barh(range(len(names)), vals, left=left, color=ENERGY_PARTS[c][1], label=ENERGY_PARTS[c][0])
                left += vals
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel("energy, all devices (J)")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=7)
        p = out / "compare_energy.png"
        save_figure(fig, p)
        plt.close(fig)
        written.append(p)
    return written


def compare(folders: Sequence[str | Path], out: Path, *, target: float | None = None,
            force: bool = False) -> pd.DataFrame:
    """Compare the runs under ``folders`` into ``out`` (new or empty; ``force`` clears an earlier
    comparison): comparison.csv, comparison.md and the figures; for exactly two runs also the side-by-side
    report.html and differences.json."""
    from fedsim.rundirs import prepare_run_dir
    from fedsim.sweep import check_target

    check_target(target)
    runs = find_runs(folders)
    outside = out.resolve()
    if any(outside == d.resolve() or outside in d.resolve().parents for _, d in runs):
        raise ConfigError("--out", f"'{out}' is one of the compared runs; give a new folder")
    out = prepare_run_dir(out, force=force)
    table = compare_table(runs, target)
    write_csv(table, out / "comparison.csv")
    write_text(out / "comparison.md", markdown_table(table, target))
    compare_figures(runs, out)
    if len(runs) == 2:  # two runs: side by side in report.html, the differences named
        from fedsim.output.side_by_side import side_by_side

        side_by_side(runs[0], runs[1], out)
    return table
