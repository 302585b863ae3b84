"""The verdict rules of figures/claims.py at each boundary: a verdict never flatters."""
import math

from figures.claims import RULES, Choice, Claim, censor, clock_ok, judge, judge_value, render_claims


def test_every_seed_but_one_is_partly_even_above_half_the_paper():
    assert judge([1.0, 1.0, 1.0], 1.0).verdict == "yes"
    j = judge([1.0, 1.0, -0.1], 1.0)
    assert j.verdict == "partly" and "63% of the paper's effect" in j.cell


def test_a_mean_carried_by_one_seed_is_no():
    assert judge([5.0, -0.5, -0.5], 1.0).verdict == "no"
    assert judge([5.0, -0.5, -0.5]).verdict == "no"


def test_exactly_half_the_paper_is_yes_and_just_below_is_partly():
    assert judge([0.5, 0.5, 0.5], 1.0).verdict == "yes"
    assert judge([0.49, 0.49, 0.49], 1.0).verdict == "partly"
    # a factor: 1.4× in the paper, half its gain is 1.2×; 1.06× against 8.9× is only partly
    assert judge([1.2, 1.2, 1.2], 1.4, ratio=True).verdict == "yes"
    assert judge([1.19, 1.19, 1.19], 1.4, ratio=True).verdict == "partly"
    assert judge([1.06, 1.06, 1.06], 8.9, ratio=True).verdict == "partly"
    assert judge([0.99, 1.5, 1.5], 1.4, ratio=True).verdict == "partly"


def test_a_difference_inside_the_resolution_is_no():
    one_sample = 1 / 359
    assert judge([0.002, 0.003, 0.002], resolution=one_sample).verdict == "no"
    assert "inside the resolution" in judge([0.002, 0.003, 0.002], 0.001, resolution=one_sample).cell
    # just beyond it (and every seed agreeing, the interval clear of zero) it counts
    assert judge([0.0030, 0.0031, 0.0030], resolution=one_sample).verdict == "yes"
    # inside the seeds' spread: the mean is within one standard error of zero
    assert judge([1.0, 1.0, -1.9]).verdict == "no"
    # a seed inside one test sample does not point the paper's way: [2.8, 0.001] is one seed of two
    assert judge([2.8, 0.001], 9.5, resolution=one_sample * 100).verdict == "no"
    assert judge([2.8, 2.0, 0.001], 9.5, resolution=one_sample * 100).verdict == "partly"


def test_rho_zero_is_no():
    assert judge([0.0, 0.0, 0.0]).verdict == "no"
    assert judge([0.0]).verdict == "no"


def test_a_direction_needs_the_interval_to_exclude_zero():
    assert judge([0.1, 0.2, 3.0]).verdict == "partly"   # every seed positive, interval straddles zero
    assert judge([1.0, 1.1, 0.9]).verdict == "yes"
    assert judge([1.0]).verdict == "partly"             # one seed cannot give an interval
    assert judge([1.0], 1.0).verdict == "yes"           # ... but can reach half the paper's number


def test_missing_and_exact_and_values():
    assert judge([math.nan, math.nan]).verdict == "n/a"
    assert judge([1.0, math.nan, 1.0], 1.0).verdict == "partly"
    assert judge([0.5], exact=True).verdict == "yes" and judge([-0.5], exact=True).verdict == "no"
    assert judge([0.001], exact=True, resolution=0.01).verdict == "no"
    assert judge_value(54.0, 52.0).verdict == "yes" and judge_value(56.0, 52.0).verdict == "partly"
    assert judge_value(60.0, 52.0).verdict == "no" and judge_value(math.nan, 52.0).verdict == "n/a"


def test_cell_shows_seeds_mean_std_and_paper():
    cell = judge([1.0, 2.0, 3.0], 4.0, unit=" pts").cell
    assert "per seed 1.0 / 2.0 / 3.0 pts" in cell and "mean 2.0 pts ± 1.0" in cell and "paper 4.0 pts" in cell
    cell = judge([5.0, 8.0], 4.0, censored=[False, True]).cell
    assert ">8.0" in cell


def test_time_helpers():
    assert clock_ok(0.25, [5.0, 10.0]) and not clock_ok(0.5, [5.0, 10.0]) and not clock_ok(0.1, [math.nan])
    assert censor([1.0, math.inf, math.nan], 40.0) == ([1.0, 40.0, 40.0], [False, True, True])


def test_rules_and_choices_print_under_every_table():
    text = render_claims([Claim("c", "p", "f", "no")], command="x", seeds=[0], commit="abc",
                         choices=[Choice("R_n", "Table 7", "the paper's", {"Table 7": "no", "balanced": "yes"})])
    assert RULES in text and "| c | p | f | **no** |" in text
    assert "Choices that matter" in text and "*balanced*: yes" in text
