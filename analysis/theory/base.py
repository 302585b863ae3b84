"""The Check record and small helpers shared by the theory modules."""
from __future__ import annotations

import math
import re
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
    #: the printed verdict when the row's module or :func:`judge` decided it (one of :data:`VERDICTS`);
    #: "" leaves it to the table (met / not met for a condition, the plain comparison elsewhere)
    verdict: str = ""
    #: ``certified`` when every constant the row uses is a closed form or a proven bound, ``estimated`` when
    #: one is a measurement along the run (a lower estimate of a uniform bound), "" when it uses none
    provenance: str = ""


#: The verdict words of a theorem's rows, one meaning each (printed under every ``fedsim check`` table and
#: in docs/guide.md#analysis).
VERDICTS: dict[str, str] = {
    "holds": "the measurement is at or under a bound computed from certified constants, every condition met "
             "on certified values, the left side measured at every version, and the bound is informative",
    "refuted": "the measurement is above a bound computed from certified constants with every condition met: "
               "a bug in fedsim or in the algorithm (the theorem is proven)",
    "consistent with estimated constants": "the measurement is under the bound, but a constant (or the left "
               "side) is an estimate along the run: no proof either way",
    "above the estimated bound (not a refutation)": "the measurement is above a bound that uses an estimate "
               "from below of a constant the theorem takes as a uniform bound: the true bound may be larger",
    "uninformative": "the bound is at or above the value at the start (a run that applies no update would "
                     "pass it): it cannot tell training from none",
    "insufficient evidence": "too few probed versions, or an empty comparison (nothing to compare)",
    "not applicable": "a condition of the theorem is not met (measured against required value shown)",
    "vacuous": "the bound is infinite (or not a number) at these constants: it says nothing",
    "met / not met / unverified": "a condition: met on certified values (or where the estimate's direction "
               "makes it safe), not met, or unverified (met only by an estimate from below)",
    "run status": "a run that diverged, was interrupted or left no summary gets its status and no learning verdict",
}

#: the provenance of a row's constants (:mod:`analysis.constants`)
CERT, EST = "certified", "estimated"

#: Probed versions below T a bound needs before it is judged at all (fewer: "insufficient evidence").
MIN_PROBED_VERSIONS = 3


def verdict_legend(width: int = 100) -> str:
    """The verdict table as text no wider than ``width`` (what ``fedsim check`` prints under its table)."""
    import textwrap

    lines = []
    for k, v in VERDICTS.items():
        lines.extend(textwrap.wrap(f"{k}: {v}", width, initial_indent="  ", subsequent_indent="      "))
    return "\n".join(lines)


def checks_frame(checks: Sequence[Check]) -> pd.DataFrame:
    """Checks as a DataFrame with columns quantity, measured, bound_or_expectation, holds, note, role."""
    cols = ["quantity", "measured", "bound_or_expectation", "holds", "note", "role", "verdict", "provenance"]
    return pd.DataFrame([asdict(c) for c in checks], columns=cols)


def condition(quantity: str, measured: Any, required: Any, holds: bool | None, note: str = "",
              provenance: str = "") -> Check:
    """An assumption of a theorem, read off the run (a setting or a measured constant)."""
    return Check(quantity, measured, required, None if holds is None else bool(holds), note, "condition",
                 provenance=provenance)


#: relative slack of a condition on a certified value: the data are stored in float32 (relative error ~1e-7),
#: so a step size set at exactly 1/(8LK) of the stored problem is not refused for its rounding
ROUNDING_RTOL = 1e-6


def condition_by_bounds(quantity: str, measured: Any, required: Any, *, ok_at_upper: bool | None,
                        ok_at_lower: bool | None, exact: bool = False, note: str = "") -> Check:
    """A condition that gets harder as a constant grows (a step-size limit 1/(cL), c = 1/2 − 15K²η²L² > 0),
    judged from what is known of the constant: ``ok_at_upper`` the condition at a certified upper bound of it
    (None: none), ``exact`` when that bound is the constant itself, ``ok_at_lower`` the condition at an
    estimate from below (None: none).  Met at an upper bound: met.  Failed at the exact value, or even at
    an estimate from below: not met.  Otherwise "unverified": met only at an estimate from below, or failed
    only at an upper bound that may be loose."""
    if ok_at_upper:
        return condition(quantity, measured, required, True, note, CERT)
    if (ok_at_upper is False and exact) or ok_at_lower is False:
        return condition(quantity, measured, required, False, note, CERT if exact and ok_at_upper is False else EST)
    why = ("fails at the certified upper bound of the constant, which may be loose, and holds at the estimate from below"
           if ok_at_upper is False else
           "met only at an estimate from below of the constant, whose true value may make it fail")
    return Check(quantity, measured, required, None, "; ".join(s for s in (f"unverified: {why}", note) if s),
                 "condition", "unverified", EST)


def condition_upper(quantity: str, measured: float, limit: float, *, certified: bool, note: str = "") -> Check:
    """``measured <= limit`` where ``limit`` falls as a constant estimated from below rises (a step-size
    limit 1/(cL)): with a certified constant it is met or not met; with an estimate, exceeding the estimated
    limit is "not met" (the true limit is lower still) and staying under it is only "unverified"."""
    ok = measured <= limit
    if certified or not ok:
        return condition(quantity, measured, limit, ok, note, CERT if certified else EST)
    return Check(quantity, measured, limit, None,
                 "; ".join(s for s in ("unverified: met only at an estimate from below of the constant, whose true "
                                       "value may make the limit lower", note) if s),
                 "condition", "unverified", EST)



def bound_row(quantity: str, lhs: float, rhs: float, *, certified: bool, start: float | None = None,
              evidence: str = "", note: str = "") -> Check:
    """A theorem's inequality lhs ≤ rhs with its verdict (see :data:`VERDICTS`): ``certified`` when every
    constant of rhs is certified and lhs is measured exactly (every version); ``start``: the left side's
    value at the start (a run applying no update), for "uninformative"; ``evidence``: a reason the evidence
    is insufficient ("" when it suffices).  :func:`judge` then weighs the theorem's conditions."""
    ratio = lhs / rhs if rhs not in (0, 0.0) and math.isfinite(rhs) else float("nan")
    extra = f"ratio measured/bound = {ratio:.3g}" if math.isfinite(ratio) else ""
    notes = [note]
    if evidence:
        verdict = "insufficient evidence"
        notes.insert(0, f"insufficient evidence: {evidence}")
    elif not math.isfinite(rhs):
        verdict = "vacuous"
    elif lhs > rhs:
        verdict = "refuted" if certified else "above the estimated bound (not a refutation)"
        if certified:
            notes.insert(0, "refuted: the theorem is proven, so this is a bug in fedsim or in the algorithm")
    elif start is not None and math.isfinite(start) and rhs >= start:
        verdict = "uninformative"
        notes.insert(0, f"uninformative: the bound is at or above the start value {start:.4g} (a run applying no "
                        "update would pass it)")
    else:
        verdict = "holds" if certified else "consistent with estimated constants"
    return Check(quantity, float(lhs), float(rhs), bool(lhs <= rhs) if math.isfinite(rhs) else None,
                 "; ".join(s for s in (*notes, extra) if s), "bound", verdict, CERT if certified else EST)


#: the kinds of assumption every theorem module states as rows (:func:`assumption_rows`)
ASSUMPTION_KINDS = ("smoothness", "variance", "dissimilarity")


def assumption_rows(measured: Mapping[str, Any], params: Mapping[str, Any],
                    items: Sequence[tuple[str, str, str]]) -> list[Check]:
    """The smoothness, variance and dissimilarity assumptions of a theorem as condition rows with their
    provenance, one per ``(kind, key, statement)`` of ``items``.  Why rows: a theorem assumes uniform bounds
    (max over clients, sup over the domain), and a reader must see which of them the run certifies and
    which it only estimated along its iterates.  A value certified from the data
    (``measured["certified"][key]``, :mod:`analysis.constants`) makes the row met; a measured value is an
    estimate from below, so the row reads "unverified" (the bound is then at best "consistent"); a key the
    run does not measure gives a note row that says so (the assumption is taken, not checked) and decides
    nothing."""
    out: list[Check] = []
    cert = measured.get("certified") or {}
    for kind, key, statement in items:
        if kind not in ASSUMPTION_KINDS:
            raise ValueError(f"assumption kind must be one of {ASSUMPTION_KINDS}, got {kind!r}")
        q = f"assumption ({kind}): {statement}"
        c = cert.get(key) if isinstance(cert, Mapping) else None
        if isinstance(c, Mapping) and c.get("value") is not None:
            out.append(condition(q, float(c["value"]), "a uniform bound", True,
                                 f"{key} certified from the data" + (f": {c['note']}" if c.get("note") else ""), CERT))
            continue
        v = measured.get(key, params.get(key))
        try:
            v = None if v is None else float(v)
        except (TypeError, ValueError):
            v = None
        if v is None or not math.isfinite(v):
            out.append(Check(q, None, "a uniform bound", None, f"assumed, not measured: the run gives no {key}, so "
                             "the theorem's bound is taken on trust here", "note", "", ""))
        else:
            out.append(Check(q, v, "a uniform bound", None, f"unverified: {key} is estimated along the run (max over "
                             "clients and probed iterates), a lower estimate of the uniform bound", "condition",
                             "unverified", EST))
    return out


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
    out: list[Check] = []
    for c in checks:
        if c.role != "bound":
            out.append(c)
            continue
        conds = [k for k in checks if k.role == "condition" and _scope(k) in ("", _scope(c))]
        failed = [k for k in conds if k.holds is False]
        unverified = [k for k in conds if k.holds is None and k.verdict == "unverified"]
        unknown = [k for k in conds if k.holds is None and k.verdict != "unverified"]
        if failed:
            why = "; ".join(f"{f.quantity}: measured {_cell(f.measured)} against required {_cell(f.bound_or_expectation)}"
                            for f in failed)
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None, f"not applicable: {why}", "bound",
                             "not applicable", c.provenance))
            continue
        try:
            b = float(c.bound_or_expectation)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            b = None
        if c.holds is not None and b is not None and not math.isfinite(b):
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None,
                             "vacuous: the bound is not finite at these constants, so it says nothing", "bound",
                             "vacuous", c.provenance))
            continue
        if c.holds is not None and unknown:
            names = ", ".join(u.quantity for u in unknown)
            out.append(Check(c.quantity, c.measured, c.bound_or_expectation, None,
                             f"not judged: condition(s) not evaluated ({names}); " + (c.note or ""), "bound",
                             "not judged", c.provenance))
            continue
        out.append(_weigh(c, unverified))
    return out


def _scope(c: Check) -> str:
    """The theorem a row belongs to when a module states several ("Theorem A: ..."): a condition so named
    decides only that theorem's bound; an unnamed one (a setting) decides every bound of the module."""
    m = re.match(r"^(Theorem [A-Z]):", c.quantity)
    return m.group(1) if m else ""


def _weigh(c: Check, unverified: Sequence[Check]) -> Check:
    """A bound row's verdict once its conditions are met or unverified: a row that decided none compares
    on estimated constants (every paper module's constants are probes along the run); an unverified
    condition turns "holds" / "refuted" into their estimated forms."""
    verdict = c.verdict
    if not verdict:
        if c.holds is None:
            return c
        verdict = "consistent with estimated constants" if c.holds else "above the estimated bound (not a refutation)"
    if unverified and verdict in ("holds", "refuted"):
        names = ", ".join(u.quantity for u in unverified)
        verdict = "consistent with estimated constants" if verdict == "holds" else \
            "above the estimated bound (not a refutation)"
        return Check(c.quantity, c.measured, c.bound_or_expectation, c.holds,
                     f"condition(s) only unverified ({names}); " + (c.note or ""), "bound", verdict, EST)
    return Check(c.quantity, c.measured, c.bound_or_expectation, c.holds, c.note, "bound", verdict,
                 c.provenance or EST)


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
