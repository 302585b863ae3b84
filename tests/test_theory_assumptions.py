"""Every registered theorem prints its smoothness, variance and dissimilarity assumptions as rows with their
provenance (one shared helper, analysis.theory.base.assumption_rows): certified from the data → met;
estimated along the run → unverified (a lower estimate of a uniform bound); not measured → a note."""
from __future__ import annotations

import importlib

import pytest

from analysis.theory import MODULES
from analysis.theory.base import ASSUMPTION_KINDS, assumption_rows, bound_row, judge


def _assumptions(rows):
    return [r for r in rows if r.quantity.startswith("assumption (")]


@pytest.mark.parametrize("theorem", sorted(MODULES))
def test_every_registered_theorem_prints_its_assumptions(theorem):
    module = importlib.import_module(MODULES[theorem])
    keys = {key for _, key, _ in module.ASSUMPTIONS}
    # nothing measured: each assumption is a note saying it is taken on trust (and decides nothing)
    rows = _assumptions(module.evaluate({}, {}))
    assert {r.quantity.split(")")[0][len("assumption ("):] for r in rows} == set(ASSUMPTION_KINDS), theorem
    assert all(r.role == "note" and "not measured" in r.note for r in rows)
    # every key estimated along a run: unverified conditions, provenance "estimated"
    rows = _assumptions(module.evaluate({k: 2.0 for k in keys}, {}))
    assert len(rows) == len(module.ASSUMPTIONS) and all(
        r.role == "condition" and r.verdict == "unverified" and r.provenance == "estimated" and r.measured == 2.0
        for r in rows), theorem
    # every key certified: met, provenance "certified"
    cert = {"certified": {k: {"value": 0.5, "provenance": "certified"} for k in keys}}
    rows = _assumptions(module.evaluate(cert, {}))
    assert all(r.holds is True and r.provenance == "certified" and r.measured == 0.5 for r in rows), theorem


def test_an_unverified_assumption_keeps_a_certified_bound_from_holding():
    """A deliberately weakened case: the bound row alone would "hold"; an estimated smoothness assumption
    turns it into "consistent with estimated constants", and a certified one leaves it."""
    bound = bound_row("Theorem X: lhs", 1.0, 2.0, certified=True)
    assert bound.verdict == "holds"
    est = assumption_rows({"L": 3.0}, {}, [("smoothness", "L", "f L-smooth")])
    cert = assumption_rows({"certified": {"L": {"value": 3.0}}}, {}, [("smoothness", "L", "f L-smooth")])
    assert judge(est + [bound])[-1].verdict == "consistent with estimated constants"
    assert judge(cert + [bound])[-1].verdict == "holds"


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="assumption kind"):
        assumption_rows({}, {}, [("convexity", "mu", "weakly convex")])
