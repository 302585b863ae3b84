"""`fedsim check` on a seeds folder judges the mean over seeds with a one-sided Student t interval."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.present import mean_verdict, seed_means


def test_the_interval_is_students_t_and_decides_holds_and_refuted():
    vals = [1.0, 2.0, 3.0]  # mean 2, s = 1, n = 3: t_{0.95, 2} = 2.919986 (tables)
    v, mean, lo, hi, note = mean_verdict(vals, [4.0, 4.0, 4.0], ["holds"] * 3, certified=True)
    assert mean == 2.0 and hi == pytest.approx(2.0 + 2.919986 / math.sqrt(3), rel=1e-6)
    assert v == "holds" and "95%" in note
    assert mean_verdict(vals, [3.0] * 3, ["holds"] * 3, certified=True)[0] == "insufficient evidence"
    assert mean_verdict([10.0, 10.5, 11.0], [4.0] * 3, ["refuted"] * 3, certified=True)[0] == "refuted"
    assert mean_verdict([10.0, 10.5, 11.0], [4.0] * 3, ["refuted"] * 3, certified=False)[0] == \
        "above the estimated bound (not a refutation)"
    assert mean_verdict(vals, [4.0] * 3, ["holds", "not applicable", "holds"], certified=True)[0] == "not applicable"
    assert mean_verdict(vals, [40.0] * 3, ["uninformative"] * 3, certified=True)[0] == "uninformative"


def test_one_mean_row_per_bound_of_a_seeds_folder():
    def table(m):
        return pd.DataFrame([{"quantity": "[fedavg_partial] Theorem A: avg", "measured": m, "bound_or_expectation": 5.0,
                              "holds": True, "note": "", "role": "bound", "verdict": "holds", "provenance": "certified"},
                             {"quantity": "[fedavg_partial] Theorem A: eta", "measured": 0.1,
                              "bound_or_expectation": 0.2, "holds": True, "note": "", "role": "condition",
                              "verdict": "", "provenance": "certified"}])

    runs = [Path("s") / f"seed-{i}" for i in range(3)]
    rows = seed_means(runs, [table(m) for m in (1.0, 1.2, 0.9)], lambda r, a: r.relative_to("s").as_posix())
    assert len(rows) == 1 and rows[0].verdict == "holds" and rows[0].group == "theorem:fedavg_partial"
    assert "mean over 3 seeds" in rows[0].quantity and "Student t" in rows[0].note
