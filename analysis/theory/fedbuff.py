"""FedBuff: Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation" (AISTATS 2022),
Theorem 1 (smooth non-convex).

The algorithm analysed: clients run Q local SGD steps of step η_l from the model they downloaded and send
the delta; the server buffers K deltas and steps by η_g times their mean.  Assumptions: each client
objective is L-smooth; unbiased local gradients of variance at most σ_l²; bounded heterogeneity σ_g²;
bounded gradients (every client's ‖∇F_i(w)‖² ≤ G for every w); staleness at most τ_max.  With
η_g·η_l·Q ≤ 1/L the theorem bounds (1/T) Σ_t E‖∇f(w_t)‖² by a sum whose terms carry σ_l², σ_g², G and
τ_max².

What a run can check: the step-size condition η_g·η_l·Q ≤ 1/L (with the probed L), the setting (Q fixed
plain SGD steps, a plain server step), and the largest staleness recorded.  There is no bound row: G is a
bound on every client's gradient at every model, which a run observes only along its own iterates, and
the bound cannot be evaluated from what the run measures (choice: no bound rather than one built on a
lower estimate of G).

Keys — params: ``eta_l`` (train.lr), ``eta_g`` (algorithm.server_lr), ``Q`` (train.local_steps);
measured: ``L``, ``K_hat`` (max staleness).
"""
from __future__ import annotations

from typing import Any, Mapping

from analysis.theory.base import Check, assumption_rows, condition, lookup, missing
from analysis.theory.local_sgd import setting_conditions

REFERENCE = "Nguyen et al., AISTATS 2022 (FedBuff), Theorem 1"
#: Why this theorem has no bound row (printed under its conditions).
NO_BOUND = ("the bound needs G, a bound on every client's gradient norm at every model, which a run cannot "
            "measure (it sees its own iterates only)")


def applies(setting: Mapping[str, Any]) -> list[Check]:
    """The theorem's setting from the run: Q fixed plain SGD steps on F_i and a plain server step."""
    params = setting.get("params") or {}
    out = setting_conditions(setting, objective_mu=False)
    opt = params.get("server_opt")
    out.append(condition("server step plain (no server_opt)", "none" if opt is None else "set", "none", opt is None,
                         "the theorem's server moves by eta_g times the buffer's mean delta"))
    return out


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "each client objective L-smooth (L = max over clients)"),
               ("variance", "sigma2", "E||g_i - grad F_i||^2 <= sigma_l^2"),
               ("dissimilarity", "zeta2", "||grad F_i - grad f||^2 <= sigma_g^2"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "eta_g", "eta_l", "Q", "L")
    if miss:
        checks.append(missing("step size eta_g * eta_l * Q <= 1/L", miss, role="condition"))
    else:
        lhs = float(v["eta_g"]) * float(v["eta_l"]) * float(v["Q"])
        checks.append(condition("step size eta_g * eta_l * Q <= 1/L", lhs, 1.0 / float(v["L"]), lhs <= 1.0 / float(v["L"]),
                                REFERENCE))
    if measured.get("K_hat") is not None:
        checks.append(Check("bounded staleness tau_max: largest staleness of the run", float(measured["K_hat"]),
                            None, None, "the tau_max this run realised; it enters the bound as tau_max^2"))
    checks.append(Check("Theorem 1: (1/T) sum E||grad f(w_t)||^2", None, None, None, f"no bound row: {NO_BOUND}", "note"))
    return checks
