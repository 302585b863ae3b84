"""The Fed-RAA figure recipe: time-to-target by hand, a tiny scheduler run writes its CSV and PNG, CLI options."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from figures import fedraa


def test_time_to_target_is_the_first_evaluation_at_or_above_it():
    m = pd.DataFrame({"t": [0.0, 0.5, 1.0, 1.5], "accuracy": [0.1, 0.919, 0.92, 0.95]})
    assert fedraa.time_to_target(m, 0.92) == 1.0
    assert math.isnan(fedraa.time_to_target(m, 0.99))


def test_assignment_picture_recipe(tmp_path):
    jobs = [fedraa.job(("ablation", v, 0), fedraa.ABLATION[v], 0, time_s=1.5) for v in fedraa.ABLATION if v != "Gre-RAA"]
    jobs.append(fedraa.job(("main", "Fed-RAA", 0), fedraa.RAA, 0, time_s=1.5))
    results = fedraa.run_jobs(jobs, tmp_path, label="Fed-RAA", progress=False)
    fedraa.link_ablation(results, [0])
    table = fedraa.assignments(results, 0, tmp_path, window_s=1.5)
    on_disk = pd.read_csv(tmp_path / "assignments.csv")
    assert (tmp_path / "assignments.png").stat().st_size > 0
    assert len(on_disk) == len(table) > 0 and set(on_disk["scheduler"]) == set(fedraa.ABLATION)
    # the picture's rows are the runs' own scheduling decisions
    tr = fedraa.trace_of(results["ablation", "Random", 0])
    assert (on_disk["scheduler"] == "Random").sum() == int((tr["kind"] == "assign").sum())


def test_cli_requires_out(capsys):
    with pytest.raises(SystemExit):
        fedraa.main([])
    assert "--out" in capsys.readouterr().err
