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
from fedsim.runner import run_scenario, run_state  # noqa: E402
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
