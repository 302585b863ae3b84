"""FedAvg / local SGD, full participation, non-convex: Yang, Fang & Liu (ICLR 2021), Theorem 1.

"Achieving Linear Speedup with Partial Worker Participation in Non-IID Federated Learning".  m clients
each run K local SGD steps with step η_L from the global model; the server moves by η times the average
update (η = 1 is plain FedAvg).  Assumptions: each F_i is L-smooth; E‖g_i − ∇F_i‖² ≤ σ_L²;
‖∇F_i(x) − ∇f(x)‖² ≤ σ_G².  With η_L ≤ 1/(8LK) and η·η_L ≤ 1/(KL), for any constant c with
0 < c < 1/2 − 15K²η_L²L²:

    (1/T) Σ_{t<T} E‖∇f(x_t)‖²  ≤  (f(x_0) − f*) / (c η η_L K T)  +  Φ,
    Φ = (1/c) [ (5 η_L² K L² / 2)(σ_L² + 6K σ_G²)  +  (η η_L L / (2m)) σ_L² ].

(The paper states the bound for min_t; its proof bounds the average, which is what is checked.)  The
bound is continuous in c, so it also holds at the supremum c = 1/2 − 15K²η_L²L², used here.

The setting the theorem is written for, checked from the run (:func:`applies`) before any bound is
judged: every client in every round (full participation: the clients of every recorded round against
``data.num_clients``), K plain SGD steps (``train.local_steps`` fixed, ``train.momentum`` 0,
``train.weight_decay`` 0), the local objective F_i itself (FedProx's ``mu`` 0), the server's plain step η
(no ``server_opt``), no update dropped at a deadline, and a model that trains (not ``systems_only``).
Partial participation is the paper's Theorem 2, whose constants are not evaluated here: a FedAvg round of
fewer than m clients gets this module's conditions and a "not applicable" bound row.

Keys — params: ``eta_l``, ``K``, ``m``, ``T``, optional ``eta`` (default 1); measured: ``L``, ``sigma2``
(σ_L²), ``zeta2`` (σ_G²; a run can only measure it along its iterates — say so), ``F0_minus_Fstar``
(or ``F0`` and ``F_star``), and the left side ``avg_grad_norm_sq``.
"""
from __future__ import annotations

from typing import Any, Mapping

from analysis.theory.base import Check, condition, le, lookup, missing

REFERENCE = "Yang, Fang & Liu, ICLR 2021, Theorem 1 (full participation)"


def c_max(eta_l: float, K: float, L: float) -> float:
    """Supremum of the admissible constant c: 1/2 − 15 K² η_L² L²."""
    return 0.5 - 15.0 * K * K * eta_l * eta_l * L * L


def bound(*, eta_l: float, K: float, m: float, T: float, L: float, sigma2: float, zeta2: float,
          F0_minus_Fstar: float, eta: float = 1.0) -> float:
    """Right-hand side of Theorem 1 at c = c_max (inf when c_max ≤ 0)."""
    c = c_max(eta_l, K, L)
    if c <= 0:
        return float("inf")
    first = F0_minus_Fstar / (c * eta * eta_l * K * T)
    phi = (2.5 * eta_l**2 * K * L**2 * (sigma2 + 6.0 * K * zeta2) + eta * eta_l * L * sigma2 / (2.0 * m)) / c
    return float(first + phi)


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = []
    vals, miss = lookup(measured, params, "eta_l", "K", "L")
    eta = float(measured.get("eta", params.get("eta", 1.0)))
    if miss:
        checks.append(missing("step size eta_l <= 1/(8LK)", miss, role="condition"))
    else:
        eta_l, K, L = float(vals["eta_l"]), float(vals["K"]), float(vals["L"])
        checks.append(condition("step size eta_l <= 1/(8LK)", eta_l, 1.0 / (8 * L * K), eta_l <= 1.0 / (8 * L * K), REFERENCE))
        checks.append(condition("step size eta*eta_l <= 1/(KL)", eta * eta_l, 1.0 / (K * L), eta * eta_l <= 1.0 / (K * L), REFERENCE))
        checks.append(condition("c = 1/2 - 15K^2 eta_l^2 L^2 > 0", c_max(eta_l, K, L), 0.0, c_max(eta_l, K, L) > 0, REFERENCE))
    gap = measured.get("F0_minus_Fstar", params.get("F0_minus_Fstar"))
    if gap is None and "F0" in measured:
        gap = float(measured["F0"]) - float(measured.get("F_star", 0.0))
    vals, miss = lookup(measured, params, "eta_l", "K", "m", "T", "L", "sigma2", "zeta2", "avg_grad_norm_sq")
    if gap is None:
        miss.append("F0_minus_Fstar")
    if miss:
        checks.append(missing("Theorem 1: (1/T) sum E||grad f(x_t)||^2", miss, role="bound"))
        return checks
    rhs = bound(eta_l=float(vals["eta_l"]), K=float(vals["K"]), m=float(vals["m"]), T=float(vals["T"]),
                L=float(vals["L"]), sigma2=float(vals["sigma2"]), zeta2=float(vals["zeta2"]),
                F0_minus_Fstar=float(gap), eta=eta)
    checks.append(le("Theorem 1: (1/T) sum E||grad f(x_t)||^2", float(vals["avg_grad_norm_sq"]), rhs,
                     f"{REFERENCE}; c at its supremum"))
    return checks


def setting_conditions(setting: Mapping[str, Any], *, objective_mu: bool = True) -> list[Check]:
    """The local-SGD assumptions shared by the FedAvg-family theorems: K fixed plain SGD steps on F_i."""
    train = setting.get("train") or {}
    params = setting.get("params") or {}
    out = []
    steps = train.get("local_steps")
    out.append(condition("K fixed local steps (train.local_steps set)", steps, "an integer", steps is not None,
                         "local epochs give every client its own K; the theorem runs the same K everywhere"))
    mom = float(train.get("momentum") or 0.0)
    out.append(condition("plain local SGD (train.momentum = 0)", mom, 0.0, mom == 0.0,
                         "the proof bounds plain SGD steps; heavy-ball momentum is another method"))
    wd = float(train.get("weight_decay") or 0.0)
    out.append(condition("no weight decay (train.weight_decay = 0)", wd, 0.0, wd == 0.0,
                         "weight decay changes the objective the steps descend"))
    if objective_mu:
        mu = float(params.get("mu") or 0.0)
        out.append(condition("local objective F_i itself (proximal mu = 0)", mu, 0.0, mu == 0.0,
                             "a proximal term makes the local steps descend another objective"))
    if train.get("systems_only"):
        out.append(condition("trains a model (not train.systems_only)", True, False, False))
    return out


def applies(setting: Mapping[str, Any]) -> list[Check]:
    """Theorem 1's setting, read from the run: full participation, K plain SGD steps, plain server step,
    nothing dropped.  ``setting``: ``train`` and ``params`` (the scenario's sections), ``num_clients``,
    ``round_clients`` (clients of each recorded round), ``dropped`` (updates dropped, summary.json)."""
    params = setting.get("params") or {}
    out = setting_conditions(setting)
    m = setting.get("num_clients")
    rounds = setting.get("round_clients") or []
    n = min(rounds) if rounds else params.get("clients_per_round")
    if m is not None and n is not None:
        out.append(condition("full participation: every client every round (n = m)", float(n), float(m), n >= m,
                             "n = fewest clients in a round; with n < m the paper's Theorem 2 (partial "
                             "participation) is the statement, and fedsim check does not hold runs against it"))
    else:
        out.append(condition("full participation: every client every round (n = m)", n, m, None,
                             "not evaluated: the run records no rounds"))
    opt = params.get("server_opt")
    out.append(condition("server step plain (no server_opt)", "none" if opt is None else "set", "none", opt is None,
                         "the theorem's server moves by eta times the mean update"))
    dropped = setting.get("dropped")
    if dropped is not None:
        out.append(condition("no update dropped (deadline)", float(dropped), 0.0, dropped == 0,
                             "the theorem averages every sampled client's update"))
    return out
