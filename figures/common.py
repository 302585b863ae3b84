"""What every paper's figure recipe shares: a job (key + scenario mapping), running the jobs under
``OUT/runs`` with a progress bar (optionally reusing finished runs of the identical scenario), the lazily
loaded trace of a run, and saving a figure.

Reuse is a recipe's choice: a finished run is reused only when its saved ``scenario.yaml`` is the one
the job resolves to, but a run made by older code is reused too, so recipes that default to it say so.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fedsim import scenario_from_mapping  # noqa: E402
from fedsim.runner import run_scenario  # noqa: E402
from fedsim.rundirs import run_state
from fedsim.scenario import Scenario  # noqa: E402
from fedsim.sim.trace import load_trace  # noqa: E402


@dataclass
class Job:
    """One run of a recipe: ``key`` names it (and its folder ``OUT/runs/<key joined by ->``)."""

    key: tuple
    mapping: dict[str, Any]


def run_dir(out: Path, key: tuple) -> Path:
    return Path(out) / "runs" / "-".join(str(k) for k in key)


def finished(d: Path, scenario: Scenario) -> dict[str, Any] | None:
    """The summary of a finished (status ok) run of exactly ``scenario`` in ``d`` (same resolved YAML), else None."""
    state, summaries, _ = run_state(d, scenario)
    return summaries[0] if state == "finished" and summaries else None


def run_jobs(jobs: Sequence[Job], out: Path, *, label: str, progress: bool = True,
             resume: bool = False) -> dict[tuple, dict[str, Any]]:
    """Run every job (jobs sharing a key run once) under ``out/runs``; per key its ``summary``, ``metrics``
    (DataFrame) and ``dir``.  With ``resume``, a finished run of the identical scenario is reused."""
    from tqdm import tqdm

    unique = {j.key: j for j in jobs}
    results: dict[tuple, dict[str, Any]] = {}
    bar = tqdm(list(unique.values()), desc=f"{label} figures", unit="run", disable=not progress, dynamic_ncols=True)
    for j in bar:
        d = run_dir(out, j.key)
        bar.set_postfix_str(d.name, refresh=False)
        scenario = scenario_from_mapping(j.mapping)
        summary = finished(d, scenario) if resume else None
        if summary is None:
            # the recipe owns OUT/runs: an earlier run of another scenario (or an unfinished one) is replaced
            summary = run_scenario(scenario, d, progress=False, force=True)[0]
        results[j.key] = {"summary": summary, "metrics": pd.read_csv(d / "metrics.csv"), "dir": d}
    return results


def trace_of(res: dict[str, Any]) -> pd.DataFrame:
    """The whole trace of a run in ``run_jobs``'s results, loaded once."""
    if "trace" not in res:
        res["trace"] = load_trace(res["dir"])
    return res["trace"]


def save(fig: plt.Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


_TEST_N: dict[str, int] = {}


def test_size(mapping: dict[str, Any]) -> int:
    """Samples in the test set a run of ``mapping`` evaluates on: one sample is 1/n of accuracy, the
    resolution of an accuracy difference (the claims' rules).  Built once per data section."""
    import json

    from fedsim.build import prepare_data

    key = json.dumps(mapping.get("data"), sort_keys=True, default=str)
    if key not in _TEST_N:
        _TEST_N[key] = int(len(prepare_data(scenario_from_mapping(mapping)).data.test.y))
    return _TEST_N[key]


def on_version_clock(metrics: pd.DataFrame, every_versions: int) -> pd.DataFrame:
    """The evaluations a clock of every ``every_versions`` server versions would have seen, emulated from a
    finer virtual-time clock: the first evaluation at or after each multiple of ``every_versions`` (what a
    recipe's "evaluation clock" choice compares against; late by at most one fine tick)."""
    m = metrics.sort_values("t")
    step = (m["updates"].astype(int) // int(every_versions))
    keep = step.ne(step.shift(1)) & (step > 0)
    return m[keep]


def first_time(metrics: pd.DataFrame, target: float) -> float:
    """First evaluation time with accuracy >= ``target`` (NaN if never)."""
    hit = metrics[metrics["accuracy"] >= target]
    return float(hit["t"].iloc[0]) if len(hit) else float("nan")
