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


def test_claims_table_is_generated_from_the_recipe_numbers(tmp_path):
    """The quick recipe (shortened to 3 s of virtual time) writes claims.md and RESULTS.md from its own
    tables, with commit and seeds; moving an input number moves the cell and the verdict."""
    import copy

    from figures.claims import commit_hash, render_claims

    tables = fedraa.make_all(tmp_path, quick=True, seeds=[0], progress=False, time_s=3.0)
    text = (tmp_path / "claims.md").read_text(encoding="utf-8")
    runs = pd.read_csv(tmp_path / "ablation_runs.csv")
    rows = fedraa.claims(tables["main"], tables["ablation"], runs, tables["beta_m"])
    assert text == render_claims(rows, command="python -m figures.fedraa --quick --seeds 0", seeds=[0],
                                 commit=commit_hash())
    results = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert text in results and f"commit `{commit_hash()}`" in results
    assert (tmp_path / "main_comparison.md").read_text(encoding="utf-8") in results
    name = "Sync Fed-RAA slower than async (same mixing, only waiting differs)"
    for sync_s, expected in ((3.0, "yes"), (1.5, "partly"), (0.5, "no")):
        ab = copy.deepcopy(tables["ablation"])
        ab.loc[ab["method"] == "Gre-RAA", "time_to_target_s"] = 1.0
        ab.loc[ab["method"] == "Sync", "time_to_target_s"] = sync_s
        row = next(c for c in fedraa.claims(tables["main"], ab, runs, tables["beta_m"]) if c.claim == name)
        assert row.verdict == expected and row.fedsim.startswith(f"{sync_s:.2f}×")
    # an assignment above K breaks the Theorem 2 row
    bad = runs.copy()
    bad.loc[bad["method"] == "Gre-RAA", "assign_over_K"] = 1
    thm = [c for c in fedraa.claims(tables["main"], tables["ablation"], bad, tables["beta_m"]) if "Theorem 2" in c.claim]
    assert thm[0].verdict == "no" and thm[0].fedsim.startswith("1 of ")
