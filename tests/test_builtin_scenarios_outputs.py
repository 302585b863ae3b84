"""Every built-in scenario runs briefly with its default outputs (figures and report.html) on.

``tests/test_quadratic_run.py`` passed while the ``quadratic`` scenario crashed building its report: a
test that stops before the outputs does not cover them.  Each scenario runs for 2 s of virtual time
through the command line, as a user runs it, and stops after at most 3 model versions (a version is
the unit every output draws: the figures and the report still see aggregations, evaluations and, where a
scenario saves them, checkpoints), so the whole set stays quick.  The two that train most (default,
heterofl: 10 clients a round, several algorithms) take 2 local steps instead of 20: the outputs they draw
are the same kinds, only the training is shorter."""
from __future__ import annotations

import json

import pytest

from fedsim.cli import main
from fedsim.scenario import builtin_scenarios


#: less local training for the scenarios that cost most here (each is still a real training run)
SHORTER = {"default": ["train.local_steps=2"], "heterofl": ["train.local_steps=2"]}


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_writes_its_report(name, tmp_path):
    out = tmp_path / name
    code = main(["run", name, "stop.max_time_s=2", "stop.max_versions=3", *SHORTER.get(name, []), "--quiet",
                 "--out", str(out)])
    assert code == 0
    assert (out / "report.html").stat().st_size > 0
    summaries = [json.loads(p.read_text()) for p in out.rglob("summary.json")]
    runs = [r for s in summaries for r in (s if isinstance(s, list) else [s])]
    assert runs and all(r.get("status", "ok") == "ok" for r in runs)
