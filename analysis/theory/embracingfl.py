"""EmbracingFL (partial model training for weak clients), Theorem 1 and Lemmas 2–3 (spec §4).

x = (y, z): y the input-side layers trained by the s strong clients only, z the output-side layers
trained by all m clients; τ local steps per round, η step size, T rounds; L_y, L_z per-partition
smoothness; σ_y², σ_z² stochastic variance; σ̄_y², σ̄_z² dissimilarity.  For
η ≤ min{1/(τ L_max), 1/(4 L_max sqrt(τ(τ−1)))}:

    (1/T) Σ_t E‖∇F(x_t)‖² ≤ 14/(3Tητ)(F(x_0) − F(x_*))
        + (7L_yη/(3s) + 16L_y²η²(τ−1)/3) σ_y² + (14/(3s) + 64L_y²η²τ(τ−1)/3) σ̄_y²
        + (7L_zη/(3m) + 8L_z²η²(τ−1)/3) σ_z² + (32L_z²η²τ(τ−1)/3) σ̄_z².

Inputs: ``T``, ``eta``, ``tau``, ``s``, ``m``, ``L_y``, ``L_z``, ``sigma_y2``, ``sigma_z2``,
``sigma_bar_y2``, ``sigma_bar_z2``, ``F0_minus_Fstar``, ``avg_grad_norm_sq``; ``strong_subset_dev``
(‖∇_y F_s − ∇_y F‖², Lemma 3 predicts ≈ σ̄_y²/s); sweeps ``sweep_s`` [(s, late ‖∇F‖²)] and
``svcca_by_depth`` [(layer depth, max-pairwise SVCCA)] (Fig. 1: input-side layers agree more).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from analysis.theory.base import Check, assumption_rows, condition, le, lookup, missing, sweep, trend

REFERENCE = "EmbracingFL Theorem 1"


def theorem1_rhs(*, T: float, eta: float, tau: float, s: float, m: float, L_y: float, L_z: float,
                 sigma_y2: float, sigma_z2: float, sigma_bar_y2: float, sigma_bar_z2: float, F0_minus_Fstar: float) -> float:
    return float(14 / (3 * T * eta * tau) * F0_minus_Fstar
                 + (7 * L_y * eta / (3 * s) + 16 * L_y**2 * eta**2 * (tau - 1) / 3) * sigma_y2
                 + (14 / (3 * s) + 64 * L_y**2 * eta**2 * tau * (tau - 1) / 3) * sigma_bar_y2
                 + (7 * L_z * eta / (3 * m) + 8 * L_z**2 * eta**2 * (tau - 1) / 3) * sigma_z2
                 + (32 * L_z**2 * eta**2 * tau * (tau - 1) / 3) * sigma_bar_z2)


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L_y", "F L_y-smooth in the input-side layers y"),
               ("smoothness", "L_z", "F L_z-smooth in the output-side layers z"),
               ("variance", "sigma_y2", "E||g_y - grad_y F_i||^2 <= sigma_y^2"),
               ("variance", "sigma_z2", "E||g_z - grad_z F_i||^2 <= sigma_z^2"),
               ("dissimilarity", "sigma_bar_y2", "||grad_y F_i - grad_y F||^2 <= sigma_bar_y^2"),
               ("dissimilarity", "sigma_bar_z2", "||grad_z F_i - grad_z F||^2 <= sigma_bar_z^2"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "eta", "tau", "L_y", "L_z")
    if miss:
        checks.append(missing("step size eta <= 1/(tau L_max)", miss))
    else:
        lmax, eta, tau = max(float(v["L_y"]), float(v["L_z"])), float(v["eta"]), float(v["tau"])
        checks.append(condition("step size eta <= 1/(tau L_max)", eta, 1 / (tau * lmax), eta <= 1 / (tau * lmax), REFERENCE))
        a_max = 2 * eta**2 * lmax**2 * tau * (tau - 1)
        checks.append(condition("A_max = 2 eta^2 L_max^2 tau(tau-1) <= 1/8", a_max, 0.125, a_max <= 0.125,
                            f"i.e. eta <= {1 / (4 * lmax * math.sqrt(max(tau * (tau - 1), 1e-300))):.4g}" if tau > 1 else ""))
    keys = ("T", "eta", "tau", "s", "m", "L_y", "L_z", "sigma_y2", "sigma_z2", "sigma_bar_y2", "sigma_bar_z2",
            "F0_minus_Fstar", "avg_grad_norm_sq")
    v, miss = lookup(measured, params, *keys)
    if miss:
        checks.append(missing("Theorem 1: (1/T) sum E||grad F(x_t)||^2", miss))
    else:
        rhs = theorem1_rhs(**{k: float(v[k]) for k in keys if k != "avg_grad_norm_sq"})
        checks.append(le("Theorem 1: (1/T) sum E||grad F(x_t)||^2", float(v["avg_grad_norm_sq"]), rhs, REFERENCE))
    v, miss = lookup(measured, params, "strong_subset_dev", "sigma_bar_y2", "s")
    if not miss:
        checks.append(le("Lemma 3: ||grad_y F_s - grad_y F||^2 vs sigma_bar_y^2/s", float(v["strong_subset_dev"]),
                         float(v["sigma_bar_y2"]) / float(v["s"]),
                         "an expectation over strong subsets under independent client deviations; one draw may exceed it", role=""))
    sw = sweep(measured, "sweep_s")
    if sw:
        checks.append(trend("Remark 2: error floor vs s", *sw, expect="nonincreasing", note="floor ~ sigma_bar_y^2/s"))
    sw = sweep(measured, "svcca_by_depth")
    if sw:
        checks.append(trend("Fig. 1: max-pairwise SVCCA vs layer depth", *sw, expect="nonincreasing",
                            note="input-side layers stay more similar across clients"))
    return checks
