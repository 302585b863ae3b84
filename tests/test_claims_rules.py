"""The verdict rules of figures/claims.py at each boundary: a verdict never flatters."""
import math

import pytest

from figures.claims import (FLOOR, RULES, Choice, Claim, acc_resolution, censor, chance_gate, clock_ok, judge,
                            judge_acc, judge_value, ratio_resolution, render_claims, stabilize, t95, weaker)

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def test_two_seeds_far_apart_are_not_yes_against_a_paper_number():
    j = judge([0.6, 5.0], 1.0)
    assert j.verdict == "no" and "interval includes zero" in j.cell


def test_one_seed_is_never_a_verdict():
    for e, p in (([1.0], 1.0), ([1.0], None), ([100.0], 1.0)):
        j = judge(e, p, resolution=0.01, res_name="unit")
        assert j.verdict == "n/a" and "fewer than two measured seeds" in j.cell


def test_yes_needs_every_seed_the_interval_and_half_the_paper():
    assert judge([1.0, 1.1, 0.9, 1.0, 1.05], 1.0).verdict == "yes"
    assert judge([0.5, 0.52, 0.51], 1.0, resolution=0.01).verdict == "yes"        # exactly about half
    assert judge([0.49, 0.48, 0.49], 1.0, resolution=0.01).verdict == "partly"    # just under half
    j = judge([1.0, 1.0, 0.005, 1.0, 1.0], 1.0, resolution=0.01)                   # one seed inside its resolution
    assert j.verdict == "partly" and "not every seed" in j.cell


def test_partly_has_a_floor_of_a_quarter_of_the_paper():
    assert FLOOR == 0.25
    j = judge([0.14, 0.14, 0.15, 0.13, 0.14], 1.0, resolution=0.001)              # 14% of the paper
    assert j.verdict == "no" and "under the 25% floor" in j.cell
    assert judge([0.26, 0.26, 0.27, 0.25, 0.26], 1.0, resolution=0.001).verdict == "partly"
    # a factor: paper 8.9×, 1.06× is 0.7% of its gain
    assert judge([1.06, 1.06, 1.07], 8.9, ratio=True, resolution=0.001).verdict == "no"
    assert judge([1.2, 1.21, 1.19], 1.4, ratio=True, resolution=0.001).verdict == "yes"


def test_a_direction_needs_the_interval_to_exclude_zero_with_the_rows_own_dof():
    assert judge([0.1, 0.2, 3.0], resolution=0.01).verdict == "no"      # every seed positive, interval straddles
    assert judge([1.0, 1.1, 0.9]).verdict == "yes"
    assert t95(11) == pytest.approx(2.201, abs=1e-3) and t95(1) == pytest.approx(12.706, abs=1e-3)
    # dof 11 needs 2.201 standard errors: 2.19 is not enough (a table quantile for dof 12 would have passed it)
    e = [1.0 + (0.5 if i % 2 else -0.5) for i in range(12)]
    se = (sum((x - 1.0) ** 2 for x in e) / 11) ** 0.5 / 12 ** 0.5
    shift = 2.19 * se - 1.0
    assert judge([x + shift for x in e], resolution=0.0).verdict == "no"
    assert judge([x + shift + 0.02 * se for x in e], resolution=0.0).verdict in ("partly", "yes")


def test_a_mean_carried_by_one_seed_is_no():
    assert judge([5.0, -0.5, -0.5], 1.0).verdict == "no"
    assert judge([1.0, 1.0, -1.9]).verdict == "no"


def test_quantities_without_a_unit_use_the_seed_spread():
    j = judge([0.002, 0.003, 0.002])
    assert "seed spread" in j.cell
    # any positive seed used to point the paper's way; now a seed must clear one sd of the seeds
    assert judge([0.1, 0.2, 3.0]).verdict == "no"
    assert judge([0.0, 0.0, 0.0]).verdict == "no"                       # ρ = 0 is no


def test_a_negative_paper_effect_is_not_passed_for_free():
    assert judge([0.01, 0.02, 0.01], -1.0, resolution=0.001).verdict == "no"
    assert judge([-1.0, -1.1, -0.9], -1.0, resolution=0.01).verdict == "yes"
    assert judge([-0.3, -0.3, -0.31], -1.0, resolution=0.01).verdict == "partly"
    assert judge([0.5, 0.52, 0.49], 0.5, ratio=True, resolution=0.01).verdict == "yes"   # halving: 0.5×


def test_a_time_ratio_counts_both_clocks():
    # 4 s vs 8 s on a 0.2 s clock: 2 × (0.2/4 + 0.2/8) = 0.15, not one clock's 0.05
    assert ratio_resolution([4.0], [8.0], 0.2) == [pytest.approx(0.15)]
    fast, slow = [4.0, 4.0, 4.0], [4.4, 4.42, 4.38]
    res = ratio_resolution(fast, slow, 0.2)
    j = judge([b / a for a, b in zip(fast, slow)], resolution=res, res_name="both clocks", ratio=True)
    assert j.verdict == "no" and "both clocks" in j.cell
    one_clock = [0.2 / 4.0] * 3
    assert judge([b / a for a, b in zip(fast, slow)], resolution=one_clock, ratio=True).verdict == "yes"


def test_a_censored_time_is_never_a_value():
    # the slow method never reached the target on seed 1: its bound is in the claim's favour
    j = judge([2.0, 9.0, 2.1, 1.9], resolution=0.2, censored=[False, "low", False, False])
    assert j.verdict == "yes" and ">9.0" in j.cell and "mean 2.0" in j.cell    # 9.0 is not in the mean
    # the fast method never reached it: the bound is against the claim, the seed cannot point its way
    assert judge([2.0, 9.0, 2.1, 1.9], resolution=0.2, censored=[False, "high", False, False]).verdict == "partly"
    assert judge([2.0, 9.0, 2.1, 1.9], resolution=0.2, censored=[False, True, False, False]).verdict == "partly"
    # with fewer than two uncensored seeds there is no interval
    assert judge([9.0, 9.0, 2.0], resolution=0.2, censored=["low", "low", False]).verdict == "n/a"
    # a favourable bound inside the resolution does not point the paper's way either
    assert judge([2.0, 0.1, 2.1], resolution=0.2, censored=[False, "low", False]).verdict != "yes"
    # a negative paper effect flips the side of the bound too
    assert judge([-2.0, -9.0, -2.1], -1.0, resolution=0.2, censored=[False, "high", False]).verdict in ("yes",
                                                                                                         "partly")
    assert censor([1.0, math.inf, math.nan], 40.0) == ([1.0, 40.0, 40.0], [False, True, True])


def test_accuracy_resolution_and_the_chance_margin():
    r = acc_resolution([90.0], [90.0], 359)[0]
    assert r == pytest.approx(100 * math.sqrt(2 * 0.09 / 359))
    assert chance_gate([90.0, 60.0], 10.0, 359) is None
    reason = chance_gate([25.0, 60.0], 10.0, 1000)
    assert reason and "near chance" in reason and "32.5%" in reason
    assert chance_gate([32.6, 40.0], 10.0, 1000) is None
    j = judge_acc([25.0, 26.0, 24.0], [15.0, 14.0, 16.0], 5.0, n_test=1000, chance=10.0)
    assert j.verdict == "n/a" and "near chance" in j.cell
    j = judge_acc([80.0, 81.0, 80.5], [70.0, 70.5, 70.0], 10.0, n_test=359, chance=10.0)
    assert j.verdict == "yes" and "test-set sampling, n = 359" in j.cell
    # one point on 359 samples is inside the binomial resolution (about 3 points): no
    assert judge_acc([81.0, 81.0, 81.0], [80.0, 80.0, 80.0], n_test=359, chance=10.0).verdict == "no"


def test_exact_and_values():
    assert judge([0.5], exact=True).verdict == "yes" and judge([-0.5], exact=True).verdict == "no"
    assert judge([0.001], exact=True, resolution=0.01).verdict == "no"
    assert judge([0.4], 1.0, exact=True, resolution=0.01).verdict == "no"
    assert judge([math.nan, math.nan]).verdict == "n/a"
    assert judge_value(54.0, 52.0).verdict == "yes" and judge_value(56.0, 52.0).verdict == "partly"
    assert judge_value(60.0, 52.0).verdict == "no" and judge_value(math.nan, 52.0).verdict == "n/a"


def test_cell_shows_seeds_mean_std_resolution_and_paper():
    cell = judge([1.0, 2.0, 3.0], 4.0, unit=" pts", resolution=0.5, res_name="test-set sampling").cell
    assert "per seed 1.0 / 2.0 / 3.0 pts" in cell and "mean 2.0 pts ± 1.0" in cell and "paper 4.0 pts" in cell
    assert "test-set sampling" in cell


def test_time_helpers():
    assert clock_ok(0.25, [5.0, 10.0]) and not clock_ok(0.5, [5.0, 10.0]) and not clock_ok(0.1, [math.nan])


def test_stability_marks_a_flip_unstable_and_never_yes():
    a = [Claim("r1", "p", "f", "yes"), Claim("r2", "p", "f", "no"), Claim("r3", "p", "f", "yes")]
    b = [Claim("r1", "p", "g", "yes"), Claim("r2", "p", "g", "no"), Claim("r3", "p", "g", "partly")]
    rows, line = stabilize(a, b, [0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
    assert [r.verdict for r in rows] == ["yes", "no", "partly"]
    assert "unstable: yes on seeds 0–4, partly on seeds 5–9" in rows[2].fedsim
    assert "2 of 3 rows agree" in line and "5–9" in line
    assert weaker("yes", "n/a") == "n/a" and weaker("partly", "no") == "no"
    with pytest.raises(ValueError):
        stabilize(a, b, [0, 1], [1, 2])


def test_rules_seeds_stability_and_choices_print_under_every_table():
    text = render_claims([Claim("c", "p", "f", "no")], command="x", seeds=[0, 1], commit="abc",
                         choices=[Choice("R_n", "Table 7", "the paper's", {"Table 7": "no", "balanced": "yes"})])
    assert RULES in text and "| c | p | f | **no** |" in text and "seeds 0, 1;" in text
    assert "Stability: not measured" in text
    assert "Choices that matter" in text and "*balanced*: yes" in text
    text = render_claims([Claim("c", "p", "f", "yes")], command="x", seeds=[0, 1], commit="abc",
                         stability=[Claim("c", "p", "f", "no")], stability_seeds=[2, 3])
    assert "0 of 1 rows agree" in text and "| **no** |" in text
