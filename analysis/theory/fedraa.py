"""Fed-RAA (resource-adaptive asynchronous FL with model fragments), Theorem 1 and Corollary 1 (spec §4).

Symbols: K the staleness bound (t − τ ≤ K), I_min/I_max local iterations per push, δ = I_max/I_min,
T = Q·M server epochs, α mixing weight, γ local step, ρ proximal weight, μ weak-convexity constant,
L smoothness, V₁/V₂ gradient-norm bounds, ε the small constant.  The theorem's rate hides V₁, V₂, ρ, L
in O(·), so the checks are (i) the assumptions that can be read off a run (bounded delay, γ < 1/L,
ρ > μ, equal fragment update counts) and (ii) shape: Corollary 1's dominant term
(δ³ + Kδ)/T^{1/10} + K²δ²/T^{3/10} against the measured min_q ‖∇F(θ_q)‖².

Inputs: ``K`` (scheduler bound) and ``K_hat`` (max measured staleness), ``gamma``, ``L``, ``rho``, ``mu``,
``I_min``, ``I_max``, ``fragment_updates`` (q(j) per fragment), sweeps ``sweep_K`` [(K̂, min‖∇F‖²)],
``sweep_delta`` [(δ, min‖∇F‖²)], ``sweep_T`` [(T, min‖∇F‖²)] with ``delta`` and ``K`` fixed.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from analysis.theory.base import Check, assumption_rows, condition, lookup, missing, sweep, trend

REFERENCE = "Fed-RAA Theorem 1 / Corollary 1"


def corollary1_shape(*, T: float, K: float, delta: float) -> float:
    """Dominant term of Corollary 1 with unit constants: (δ³ + Kδ)/T^{1/10} + K²δ²/T^{3/10}."""
    return float((delta**3 + K * delta) / T**0.1 + K**2 * delta**2 / T**0.3)


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "F L-smooth"),
               ("variance", "V1", "E||grad f(x; z)||^2 <= V1 (a second-moment bound, which bounds the variance)"),
               ("dissimilarity", "V1", "no separate assumption: E||grad f(x; z)||^2 <= V1 over every client's data "
                                      "bounds each client's gradient, hence their dissimilarity"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "K_hat", "K")
    if miss:
        checks.append(missing("bounded delay t - tau <= K", miss))
    else:
        checks.append(condition("bounded delay t - tau <= K", float(v["K_hat"]), float(v["K"]), v["K_hat"] <= v["K"],
                            "max measured staleness against the scheduler's bound"))
    v, miss = lookup(measured, params, "gamma", "L")
    if not miss:
        checks.append(condition("step size gamma < 1/L", float(v["gamma"]), 1.0 / v["L"], v["gamma"] < 1.0 / v["L"], REFERENCE))
    # the same row FedAsync prints: rho = 0 (no proximal term) fails rho > mu >= 0 whatever mu is, and an
    # unmeasured mu leaves a positive rho unevaluated (never a silently dropped row)
    rho = measured.get("rho", params.get("rho"))
    rho = float(rho) if rho is not None else 0.0
    mu = measured.get("mu", params.get("mu"))
    if mu is not None:
        checks.append(condition("proximal weight rho > mu", rho, float(mu), rho > float(mu), REFERENCE))
    elif rho <= 0.0:
        checks.append(condition("proximal weight rho > mu", rho, "> mu >= 0", False,
                                "rho = 0: no proximal term, so rho > mu >= 0 fails whatever mu is"))
    else:
        checks.append(condition("proximal weight rho > mu", rho, "> mu >= 0", None,
                                "not evaluated: mu (weak convexity) is not measured"))
    v, miss = lookup(measured, params, "I_min", "I_max")
    if not miss:
        checks.append(Check("imbalance delta = I_max/I_min", float(v["I_max"]) / float(v["I_min"]), None, None,
                            "enters the bound as delta^3 and K*delta; reported, not bounded"))
    q = measured.get("fragment_updates")
    if q is not None and len(q):
        a = np.asarray(q, dtype=float)
        cv = float(a.std() / a.mean()) if a.mean() > 0 else float("nan")
        checks.append(Check("fragment updates equal (T = Q*M)", cv, 0.0, bool(a.min() == a.max()),
                            f"coefficient of variation of q(j); min {a.min():g}, max {a.max():g}"))
    sw = sweep(measured, "sweep_K")
    if sw:
        checks.append(trend("Remark 1: min ||grad F||^2 vs K", *sw, expect="nondecreasing", note="smaller delay bound converges faster"))
    sw = sweep(measured, "sweep_delta")
    if sw:
        checks.append(trend("min ||grad F||^2 vs delta", *sw, expect="nondecreasing", note="error floor should not improve with imbalance"))
    sw = sweep(measured, "sweep_T")
    if sw:
        v, miss = lookup(measured, params, "K", "delta")
        if miss:
            checks.append(missing("Corollary 1: measured / rate shape vs T", miss))
        else:
            ts, ys = sw
            ratio = [y / corollary1_shape(T=t, K=float(v["K"]), delta=float(v["delta"])) for t, y in zip(ts, ys)]
            checks.append(trend("Corollary 1: measured / rate shape vs T", ts, ratio, expect="nonincreasing",
                                note="empirical rate at least as fast as (d^3+Kd)/T^0.1 + K^2 d^2/T^0.3"))
    return checks
