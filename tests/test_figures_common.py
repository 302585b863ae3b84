"""The figure recipes' shared runner: jobs run once per key, a finished run of the identical scenario is
reused only when asked, and any change of the scenario runs it again."""
from __future__ import annotations

import copy
import math

import pandas as pd

from fedsim import load_scenario
from figures.common import Job, finished, run_jobs


def _mapping(versions: int) -> dict:
    m = load_scenario("default", ["algorithm=fedavg", "train.systems_only=true", "stop.max_time_s=null",
                                  f"stop.max_versions={versions}", "output.figures=false"]).as_mapping()
    return copy.deepcopy(m)


def test_resume_reuses_only_the_identical_finished_scenario(tmp_path):
    jobs = [Job(("a", 0), _mapping(2)), Job(("a", 0), _mapping(2))]  # same key: run once
    first = run_jobs(jobs, tmp_path, label="test", progress=False)
    d = first["a", 0]["dir"]
    assert list(first) == [("a", 0)] and d == tmp_path / "runs" / "a-0"
    stamp = (d / "summary.json").stat().st_mtime_ns
    again = run_jobs(jobs, tmp_path, label="test", progress=False, resume=True)
    assert (d / "summary.json").stat().st_mtime_ns == stamp  # reused, not run
    assert again["a", 0]["summary"]["versions"] == first["a", 0]["summary"]["versions"] == 2
    changed = run_jobs([Job(("a", 0), _mapping(3))], tmp_path, label="test", progress=False, resume=True)
    assert changed["a", 0]["summary"]["versions"] == 3  # another scenario: run again
    rerun = run_jobs([Job(("a", 0), _mapping(3))], tmp_path, label="test", progress=False)
    assert (d / "summary.json").stat().st_mtime_ns != stamp and rerun["a", 0]["summary"]["versions"] == 3


def test_an_unfinished_run_is_not_reused(tmp_path):
    from fedsim import scenario_from_mapping

    run_jobs([Job(("b",), _mapping(2))], tmp_path, label="test", progress=False)
    d = tmp_path / "runs" / "b"
    sc = scenario_from_mapping(_mapping(2))
    assert finished(d, sc) is not None
    (d / "summary.json").write_text('{"status": "interrupted"}', encoding="utf-8")
    assert finished(d, sc) is None


def test_claim_helpers_by_hand():
    from figures.claims import judge, monotone, verdict

    assert monotone([3.0, 1.0, 0.0, 0.0], -1) and not monotone([3.0, 1.0, 1.5], -1)
    assert not monotone([1.0, 1.0], 1) and monotone([1.0, 2.0], 1) and not monotone([1.0], 1)
    # paper 1.4×, one seed: no verdict; three tight seeds: yes from 1.2× (half the gain), partly from 1.1× (the
    # 25% floor), no below it or at 1
    assert judge([1.25], 1.4, ratio=True).verdict == "n/a"
    assert [judge([x, x + 0.002, x - 0.002], 1.4, ratio=True, resolution=0.001).verdict
            for x in (1.25, 1.2, 1.12, 1.05, 1.0, 0.8)] == ["yes", "yes", "partly", "no", "no", "no"]
    assert judge([float("nan")], 1.4, ratio=True).verdict == "n/a"
    assert (verdict(True), verdict(False), verdict(None)) == ("yes", "no", "n/a")


def test_version_clock_keeps_the_first_evaluation_after_each_tick():
    from figures.common import first_time, on_version_clock

    m = pd.DataFrame({"t": [0.1, 0.2, 0.3, 0.4, 0.5], "updates": [3, 9, 10, 12, 21],
                      "accuracy": [0.5, 0.9, 0.91, 0.95, 0.96]})
    coarse = on_version_clock(m, 10)
    assert list(coarse["t"]) == [0.3, 0.5]
    assert first_time(m, 0.9) == 0.2 and first_time(coarse, 0.9) == 0.3 and math.isnan(first_time(m, 0.99))

def test_regenerate_counts_verdicts_and_replaces_only_the_marked_block(tmp_path):
    from figures import regenerate
    from figures.claims import Claim, render_claims

    text = render_claims([Claim("a", "p", "f", "yes"), Claim("b", "p", "f", "no"), Claim("c", "p", "f", "n/a")],
                         command="x", seeds=[0, 1], commit="abc",
                         stability=[Claim("a", "p", "g", "yes"), Claim("b", "p", "g", "partly"),
                                    Claim("c", "p", "g", "n/a")], stability_seeds=[2, 3])
    # a table after the claims (GAS's checks against the authors' code) is not counted
    text += "\n### fedsim against the code\n\n| quantity | code | fedsim | matches? |\n|---|---|---|---|\n| t | 1 | 1 | yes |\n"
    c = regenerate.counts(text)
    # b flips (no on 0, 1; partly on 2, 3): unstable, the weaker verdict
    assert (c["yes"], c["partly"], c["no"], c["n/a"], c["stable"], c["rows"]) == (1, 0, 1, 1, 2, 3)
    page = f"intro\n{regenerate.BEGIN}\nold table\n{regenerate.END}\nrest\n"
    assert regenerate.replace_block(page, "new") == f"intro\n{regenerate.BEGIN}\nnew\n{regenerate.END}\nrest\n"
    assert regenerate.replace_block("no markers", "new") is None
    (tmp_path / "gas").mkdir()
    (tmp_path / "gas" / "claims.md").write_text(text, encoding="utf-8")
    block = regenerate.collect(tmp_path, ["gas"], "abc")
    assert "| GAS | 1 | 0 | 1 | 1 | 2 of 3 |" in block and "Commit `abc`" in block
    assert regenerate.estimate_minutes(["gas"]) == regenerate.MINUTES_PER_SEED["gas"] * 10
