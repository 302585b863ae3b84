"""FedAsync: Xie, Koyejo & Gupta, "Asynchronous Federated Optimization" (arXiv:1903.03934, 2019), Theorem 1.

The algorithm analysed: a client downloads x_τ, runs H ∈ [H_min, H_max] local SGD steps of step γ on the
regularised local objective g_{x_τ}(x) = f(x; z) + (ρ/2)‖x − x_τ‖², and the server mixes the result in as
x_t = (1 − α_t) x_{t−1} + α_t x_new with α_t = α·s(t − τ) ≤ α ≤ 1.  Assumptions: F is L-smooth and
μ-weakly convex; E‖∇f(x; z)‖² ≤ V₁ and ‖∇g_x(y; z)‖² ≤ V₂ for all x, y; the staleness is bounded,
t − τ ≤ K; ρ > μ (ρ large enough); γ < 1/L.  Under these the minimum over t < T of E‖∇F(x_t)‖² decreases
as stated in Theorem 1, whose rate hides V₁, V₂, ρ, L and K in O(·).

What a run can check is therefore the setting: ρ > μ ≥ 0 needs the proximal term (fedsim's ``fedasync``
trains plain local SGD, ρ = 0, so the theorem does not apply to it), γ < 1/L with the probed L, and the
largest staleness recorded (the K a run realised).  There is no bound row: the rate has no constants to
evaluate (choice: report the conditions and say so, rather than a shape check over one run).

Keys — params: ``gamma`` (train.lr), ``rho`` (the proximal weight; 0 when the run has none);
measured: ``L``, ``K_hat`` (max staleness).
"""
from __future__ import annotations

from typing import Any, Mapping

from analysis.theory.base import Check, assumption_rows, condition, lookup, missing
from analysis.theory.local_sgd import setting_conditions

REFERENCE = "Xie, Koyejo & Gupta 2019 (asynchronous federated optimization), Theorem 1"
#: Why this theorem has no bound row (printed under its conditions).
NO_BOUND = "its rate hides V1, V2, rho, L and K in O(.), so there is no bound to evaluate; the conditions are what a run can check"


def applies(setting: Mapping[str, Any]) -> list[Check]:
    """The theorem's setting from the run: the proximal local objective (ρ > μ ≥ 0) and plain local SGD."""
    params = setting.get("params") or {}
    rho = float(params.get("rho") or params.get("mu") or 0.0)
    if rho == 0.0:  # rho > mu >= 0 fails whatever mu is
        out = [condition("proximal local objective rho > mu >= 0", rho, "> mu >= 0", False,
                         "the theorem trains f + rho/2 ||x - x_tau||^2 with rho > mu, mu >= 0 the weak-convexity "
                         "constant; plain local SGD has rho = 0")]
    else:
        out = [condition("proximal local objective rho > mu >= 0", rho, "> mu >= 0", None,
                         "not evaluated: mu (weak convexity) is not measured")]
    train = setting.get("train") or {}
    mom = float(train.get("momentum") or 0.0)
    out.append(condition("plain local SGD (train.momentum = 0)", mom, 0.0, mom == 0.0,
                         "the proof bounds plain SGD steps; heavy-ball momentum is another method"))
    out.extend(c for c in setting_conditions(setting, objective_mu=False) if c.quantity.startswith("trains"))
    return out


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "F L-smooth"),
               ("variance", "V1", "E||grad f(x; z)||^2 <= V1 (a second-moment bound, which bounds the variance)"),
               ("dissimilarity", "V2", "no separate assumption: ||grad g_x(y; z)||^2 <= V2 on every client's data "
                                      "bounds each client's gradient, hence their dissimilarity"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "gamma", "L")
    if miss:
        checks.append(missing("step size gamma < 1/L", miss, role="condition"))
    else:
        checks.append(condition("step size gamma < 1/L", float(v["gamma"]), 1.0 / float(v["L"]),
                                float(v["gamma"]) < 1.0 / float(v["L"]), REFERENCE))
    if measured.get("K_hat") is not None:
        checks.append(Check("bounded staleness t - tau <= K: largest staleness of the run", float(measured["K_hat"]),
                            None, None, "the K this run realised; the theorem's K is any bound on it"))
    checks.append(Check("Theorem 1: min_t E||grad F(x_t)||^2", None, None, None, f"no bound row: {NO_BOUND}", "note"))
    return checks
