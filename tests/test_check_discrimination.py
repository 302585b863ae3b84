"""The discrimination suite (benchmarks/discrimination.py, table in docs/discrimination.md): cases with known
truth.  A broken algorithm never gets "holds" or "consistent", a correct one is never "refuted", each case
gets one of the verdicts it may get, and with certified constants broken server rules are refuted, on one run
and on the mean over a seeds folder."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import discrimination as disc  # noqa: E402

CASES = disc.cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("discrimination")
    return [(case, disc.run_case(case, root / f"case{i:02d}")) for i, case in enumerate(CASES)]


def test_the_suite_has_fifteen_cases_of_every_kind():
    assert len(CASES) >= 15
    assert sum(c.broken for c in CASES) >= 5 and sum(not c.broken for c in CASES) >= 8
    seeds = [c for c in CASES if c.seeds]  # seeds folders judged on the mean: one correct, one broken
    assert {c.broken for c in seeds} == {True, False} and all(len(c.seeds) >= 3 for c in seeds)


def test_seeds_folders_are_judged_on_the_mean_with_its_interval(results):
    for case, verdict in results:
        if case.seeds:
            assert case.detail.startswith("mean ") and "95% limits" in case.detail, case.name
            assert verdict == ("refuted" if case.broken else "holds"), (case.name, verdict, case.detail)


def test_every_case_gets_a_verdict_it_may_get(results):
    bad = [(c.name, v, disc.judge_case(c, v)) for c, v in results if disc.judge_case(c, v)]
    assert not bad, bad


def test_no_broken_algorithm_holds_and_no_correct_one_is_refuted(results):
    assert not [c.name for c, v in results if c.broken and v in disc.NEVER_FOR_BROKEN]
    assert not [c.name for c, v in results if not c.broken and v == "refuted"]
    refuted = [c.name for c, v in results if c.broken and v == "refuted"]
    assert len(refuted) >= 1, "with certified constants a broken algorithm must be refuted"
    assert any(not c.broken and v == "holds" for c, v in results)


def test_the_docs_table_is_the_suite(results):
    page = (Path(__file__).resolve().parents[1] / "docs" / "discrimination.md").read_text(encoding="utf-8")
    assert disc.table(results) in page
