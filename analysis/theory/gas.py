"""GAS (generative-activation-aided asynchronous split FL), Lemma 1 and Theorem 1 (spec §4).

Symbols: γ₁/γ₂ smoothness of the server/client losses, η step size, σ² per-sample variance, B batch
size, Q_s buffered batches per server update, B̂ generated rows, κ₁² server-side dissimilarity (straggler
bias of the buffer), κ₂² client-side dissimilarity, τ_max max upload delay (in aggregations), E local
steps, T global iterations.  Theorem 1 is stated in O(·), so its checks are step-size conditions,
Lemma 1 (with vs without generated activations) and shape: the server bound's non-vanishing floor κ₁²
and the client bound's τ_max² term imply monotone trends.

Inputs: ``eta``, ``gamma1``, ``gamma2``, ``tau_max``, ``E``; ``D_with_ga`` and ``D_without_ga`` (mean
server dissimilarity with/without generated rows at the same w_s and buffer), ``B``, ``Q_s``, ``B_hat``;
sweeps ``sweep_kappa1`` [(κ₁², server LHS)] and ``sweep_tau_max`` [(τ_max, client LHS)].
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from analysis.estimators import gas_lemma1_rho
from analysis.theory.base import Check, assumption_rows, condition, le, lookup, missing, sweep, trend

REFERENCE = "GAS Theorem 1"


def server_bound_unit(*, F0_minus_Fstar: float, E: float, T: float, eta: float, sigma2: float, B: float,
                      Q_s: float, B_hat: float, kappa1_sq: float) -> float:
    """Eq. (14) with unit O-constants: (F0 − F*)/(ETη) + ησ²/(BQ_s + B̂) + κ₁² (scale only)."""
    return float(F0_minus_Fstar / (E * T * eta) + eta * sigma2 / (B * Q_s + B_hat) + kappa1_sq)


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "gamma1", "server-side loss gamma_1-smooth"),
               ("smoothness", "gamma2", "client-side loss gamma_2-smooth"),
               ("variance", "sigma2", "per-sample gradient variance <= sigma^2"),
               ("dissimilarity", "kappa1_sq", "server-side dissimilarity (straggler bias of the buffer) <= kappa_1^2"),
               ("dissimilarity", "kappa2_sq", "client-side dissimilarity <= kappa_2^2"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "eta", "gamma1")
    if miss:  # the row stays, unevaluated: the server-side smoothness is not probed
        checks.append(missing("server step eta <= 1/gamma1", miss, role="condition"))
    else:
        checks.append(condition("server step eta <= 1/gamma1", float(v["eta"]), 1.0 / v["gamma1"], v["eta"] <= 1.0 / v["gamma1"], REFERENCE))
    v, miss = lookup(measured, params, "eta", "gamma2", "tau_max")
    if miss:
        checks.append(missing("client step eta <= 1/(20 gamma2 sqrt(tau_max))", miss))
    else:
        lim = 1.0 / (20 * v["gamma2"] * math.sqrt(max(float(v["tau_max"]), 1.0)))
        checks.append(condition("client step eta <= 1/(20 gamma2 sqrt(tau_max))", float(v["eta"]), lim, v["eta"] <= lim,
                            "as stated in Theorem 1 (tau_max < 1 read as 1)"))
        if "E" in measured or "E" in params:
            e = float(measured.get("E", params.get("E")))
            lim_e = lim / e
            checks.append(condition("client step eta <= 1/(20 gamma2 E sqrt(tau_max))", float(v["eta"]), lim_e, v["eta"] <= lim_e,
                                "as used in the proof (App. D); inconsistent with the statement"))
    v, miss = lookup(measured, params, "D_with_ga", "D_without_ga")
    generated = measured.get("B_hat", params.get("B_hat"))
    if miss:
        checks.append(missing("Lemma 1: D with GA <= D without GA", miss))
    elif generated is not None and float(generated) <= 0:  # the two sides are the same buffer: nothing compared
        checks.append(Check("Lemma 1: D with GA <= D without GA", float(v["D_with_ga"]), float(v["D_without_ga"]), None,
                            "insufficient evidence: no activation was generated in any record (B_hat = 0), so both "
                            "sides are the same buffer", "", "insufficient evidence"))
    else:
        checks.append(le("Lemma 1: D with GA <= D without GA", float(v["D_with_ga"]), float(v["D_without_ga"]),
                         "generated activations should shrink the server-side dissimilarity (eq. 13)", role=""))
        w, miss2 = lookup(measured, params, "B", "Q_s", "B_hat")
        if not miss2:
            rho = gas_lemma1_rho(int(w["B"]), int(w["Q_s"]), int(w["B_hat"]))
            checks.append(le("Lemma 1 (eq. 25): D with GA <= rho * D without GA", float(v["D_with_ga"]),
                             rho * float(v["D_without_ga"]),
                             f"rho = {rho:.3g}; needs unbiased generated gradients and a good Gaussian fit", role=""))
    sw = sweep(measured, "sweep_kappa1")
    if sw:
        checks.append(trend("Theorem 1 (server): LHS vs kappa1^2", *sw, expect="nondecreasing", note="kappa1^2 is an additive floor"))
    sw = sweep(measured, "sweep_tau_max")
    if sw:
        checks.append(trend("Theorem 1 (client): LHS vs tau_max", *sw, expect="nondecreasing", note="tau_max^2 term"))
    return checks
