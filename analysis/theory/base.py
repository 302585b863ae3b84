"""The Check record and small helpers shared by the theory modules."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd


@dataclass
class Check:
    """One comparison of a measured quantity with what a theorem says about it.

    ``holds`` is True/False when the comparison could be made, None when an input is missing or the
    statement has no checkable constant (the note says which).
    """

    quantity: str
    measured: float | None
    bound_or_expectation: float | str | None
    holds: bool | None
    note: str = ""
    #: what the row is to its theorem: ``condition`` (an assumption the theorem needs; a failed one makes
    #: every ``bound`` row of the theorem "not applicable"), ``bound`` (the theorem's inequality, judged only
    #: where every condition holds), ``note`` (a line without a verdict), or "" (a measurement or a claim
    #: that stands on its own, such as a lemma without conditions or a sweep's shape)
    role: str = ""


def checks_frame(checks: Sequence[Check]) -> pd.DataFrame:
    """Checks as a DataFrame with columns quantity, measured, bound_or_expectation, holds, note, role."""
    cols = ["quantity", "measured", "bound_or_expectation", "holds", "note", "role"]
    return pd.DataFrame([asdict(c) for c in checks], columns=cols)


def condition(quantity: str, measured: Any, required: Any, holds: bool | None, note: str = "") -> Check:
    """An assumption of a theorem, read off the run (a setting or a measured constant)."""
    return Check(quantity, measured, required, None if holds is None else bool(holds), note, "condition")


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float, np.integer, np.floating)):
        return f"{float(value):.4g}"
    return "none" if value is None else str(value)


def judge(checks: Sequence[Check]) -> list[Check]:
    """The rule every theorem is judged by, fixed before any run: a ``bound`` row keeps a verdict only when
    every ``condition`` row of its theorem holds; otherwise it says "not applicable: <condition>, measured
    <x> against required <y>" and has no verdict.  A bound that is infinite or not a number is vacuous and
    never holds.  Condition rows that could not be evaluated leave the bound unjudged as well ("not
    evaluated"): a theorem is judged only where its conditions are known to hold."""
    failed = [c for c in checks if c.role == "condition" and c.holds is False]
    unknown = [c for c in checks if c.role == "condition" and c.holds is None]
    out: list[Check] = []
    for c in checks:
        if c.role != "bound":
            out.append(c)
            continue
        if failed:
            why = "; ".join(f"{f.quantity}: measured {_cell(f.measured)} against required {_cell(f.bound_or_expectation)}"
                            for f in failed)
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None, f"not applicable: {why}", "bound"))
            continue
        try:
            b = float(c.bound_or_expectation)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            b = None
        if c.holds is not None and b is not None and not math.isfinite(b):
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None,
                             "vacuous: the bound is not finite at these constants, so it says nothing", "bound"))
            continue
        if c.holds is not None and unknown:
            names = ", ".join(u.quantity for u in unknown)
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None,
                             f"not judged: condition(s) not evaluated ({names}); " + (c.note or ""), "bound"))
            continue
        out.append(c)
    return out


def lookup(measured: Mapping[str, Any], params: Mapping[str, Any], *keys: str) -> tuple[dict[str, float], list[str]]:
    """Values of ``keys`` from measured (first) or params; returns (found, missing)."""
    found, missing = {}, []
    for k in keys:
        v = measured.get(k, params.get(k)) if measured is not None else params.get(k)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            missing.append(k)
        else:
            found[k] = v
    return found, missing


def missing(quantity: str, keys: Sequence[str], what: str = "", role: str = "") -> Check:
    return Check(quantity, None, what or None, None, f"not evaluated: missing {', '.join(keys)}", role)


def le(quantity: str, lhs: float, rhs: float, note: str = "", role: str = "bound") -> Check:
    """LHS ≤ RHS check; the note gets the ratio LHS/RHS (how loose the bound is)."""
    ratio = lhs / rhs if rhs not in (0, 0.0) and math.isfinite(rhs) else float("nan")
    extra = f"ratio measured/bound = {ratio:.3g}" if math.isfinite(ratio) else ""
    return Check(quantity, float(lhs), float(rhs), bool(lhs <= rhs), "; ".join(s for s in (note, extra) if s), role)


def trend(quantity: str, xs: Sequence[float], ys: Sequence[float], expect: str, note: str = "") -> Check:
    """Monotone-trend check with Spearman's ρ: ``expect`` is "nonincreasing" (ρ ≤ 0) or "nondecreasing"."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if xs.size < 2:
        return Check(quantity, None, expect, None, "need at least two sweep points")
    if xs.size == 2:
        rho = float(np.sign(xs[1] - xs[0]) * np.sign(ys[1] - ys[0]))
    else:
        from scipy import stats  # here: scipy costs a fresh `fedsim check` about half a second to import

        rho = float(stats.spearmanr(xs, ys).statistic)
    if math.isnan(rho):
        rho = 0.0
    ok = rho <= 0 if expect == "nonincreasing" else rho >= 0
    return Check(quantity, rho, f"Spearman rho {'<=' if expect == 'nonincreasing' else '>='} 0 ({expect})", bool(ok),
                 "; ".join(s for s in (note, "shape check: constants of the bound are not used") if s))


def slope(quantity: str, xs: Sequence[float], ys: Sequence[float], at_most: float, note: str = "") -> Check:
    """Log-log slope of ys on xs; holds when the empirical rate is at least as fast as ``at_most``."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    good = (xs > 0) & (ys > 0)
    if good.sum() < 2:
        return Check(quantity, None, at_most, None, "need two positive sweep points")
    b = float(np.polyfit(np.log(xs[good]), np.log(ys[good]), 1)[0])
    return Check(quantity, b, at_most, bool(b <= at_most),
                 "; ".join(s for s in (note, "shape check: log-log slope, absolute constants unknown") if s))


def sweep(measured: Mapping[str, Any], key: str) -> tuple[list[float], list[float]] | None:
    """A sweep stored as ``measured[key] = [(x, y), ...]`` or ``{"x": [...], "y": [...]}``."""
    v = measured.get(key)
    if v is None:
        return None
    if isinstance(v, Mapping):
        return list(v["x"]), list(v["y"])
    pairs = list(v)
    return [float(p[0]) for p in pairs], [float(p[1]) for p in pairs]
