"""figures.embracingfl: every recipe scenario is valid, and the table helpers count what they say."""
from __future__ import annotations

import pandas as pd

import figures.embracingfl as fe
from fedsim import scenario_from_mapping


def test_every_recipe_scenario_validates():
    jobs = (fe.table2_jobs([0], 12, (0, 4, 12)) + fe.table34_jobs([0], 12, (1, 2, 5, 7))
            + fe.table6_jobs([0], 12, (1, 5, 7)) + fe.floor_jobs([0], 12, (2, 16)))
    assert len({j.key for j in jobs}) == len(jobs)          # one run directory per job
    for j in jobs:
        sc = scenario_from_mapping(j.mapping)
        assert sc.stop.max_versions == 12
    t2 = {j.key: j.mapping for j in fe.table2_jobs([0], 12, (12,))}
    assert t2[("t2", "heterofl", 12, 0)]["algorithm"]["widths"] == {fe.STRONG_DEV: 1.0, fe.WEAK_DEV: 0.2}
    assert t2[("t2", "embracingfl", 12, 0)]["algorithm"]["types"] == {fe.STRONG_DEV: "strong", fe.WEAK_DEV: "weak"}


def test_rounds_to_target_is_the_first_evaluated_version_at_or_above_it():
    m = pd.DataFrame({"version": [0, 2, 4, 6], "accuracy": [0.1, 0.5, 0.49, 0.7]})
    assert fe._rounds_to(m, 50.0) == 2.0
    assert fe._rounds_to(m, 69.0) == 6.0
    assert pd.isna(fe._rounds_to(m, 80.0))
