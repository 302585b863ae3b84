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
Partial participation is the paper's Theorem 2, whose text is not available: a FedAvg round of fewer than m
clients gets this module's conditions and a "not applicable" bound row here, and is held against the verified
bounds of :mod:`analysis.theory.fedavg_partial` instead.  This module's own statement is marked unverified
(:data:`UNVERIFIED`): no readable source verifies its constants, so it never gives "holds" or "refuted".

Keys — params: ``eta_l``, ``K``, ``m``, ``T``, optional ``eta`` (default 1); measured: ``L``, ``sigma2``
(σ_L²), ``zeta2`` (σ_G²; a run can only measure it along its iterates — say so), ``F0_minus_Fstar``
(or ``F0`` and ``F_star``), and the left side ``avg_grad_norm_sq``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from analysis.theory.base import (MIN_PROBED_VERSIONS, ROUNDING_RTOL, Check, assumption_rows, bound_row,
                                  condition, condition_by_bounds, lookup, missing)

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


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "each F_i L-smooth (L = max over clients)"),
               ("variance", "sigma2", "E||g_i - grad F_i||^2 <= sigma_L^2"),
               ("dissimilarity", "zeta2", "||grad F_i - grad f||^2 <= sigma_G^2"))

UNVERIFIED = ("unverified: no readable source verifies this theorem's constants (the paper's text was not "
              "available to check them), so it is never the only basis of a holds or refuted")


def _constant(measured: Mapping[str, Any], key: str) -> tuple[float | None, bool]:
    """(value, certified) of a constant: ``measured["certified"][key]`` when the run's data certify it
    (:mod:`analysis.constants`), else the probe's estimate ``measured[key]`` (not certified)."""
    cert = (measured.get("certified") or {}).get(key)
    if isinstance(cert, Mapping) and cert.get("value") is not None:
        return float(cert["value"]), True
    v = measured.get(key)
    return (None, False) if v is None else (float(v), False)


def gap(measured: Mapping[str, Any], params: Mapping[str, Any]) -> tuple[float | None, bool, str]:
    """F(w0) − F* for the bound: F(w0) (measured exactly at version 0) minus a certified lower bound of F*
    (an upper bound of the gap, which the bound grows with) when there is one; else the run's own
    F(w0) − min F (an estimate from below).  Returns (value, certified, how)."""
    f_star = (measured.get("certified") or {}).get("F_star")
    if measured.get("F0") is not None and isinstance(f_star, Mapping):
        return (max(float(measured["F0"]) - float(f_star["value"]), 0.0), True,
                f"F(w0) - F*, F* {'=' if float(f_star['value']) > 0 else '>='} {float(f_star['value']):.4g} certified")
    g = measured.get("F0_minus_Fstar", params.get("F0_minus_Fstar"))
    if g is None and "F0" in measured and "F_star" in measured:
        g = float(measured["F0"]) - float(measured["F_star"])
    return (None if g is None else float(g)), False, "F(w0) - min F along the run (an estimate from below)"


def evidence(measured: Mapping[str, Any]) -> tuple[str, bool]:
    """(why the left side is insufficient evidence or "", whether it was measured at every version < T)."""
    versions = measured.get("probe_versions")
    T = measured.get("T")
    if versions is None or T is None:
        return "", False
    below = sorted(int(v) for v in versions if int(v) < int(T))
    if len(below) < MIN_PROBED_VERSIONS:
        return (f"the left side is the mean over {len(below)} probed version(s) below T = {int(T)}, fewer than "
                f"{MIN_PROBED_VERSIONS} (save checkpoints more often: output.checkpoints)"), False
    return "", below == list(range(int(T)))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    """Theorem 1's conditions and bound, each constant with its provenance (:mod:`analysis.constants`).

    The theorem assumes each client's F_i L-smooth with uniform σ², σ_G²: ``L``, ``sigma2``, ``zeta2`` are
    taken certified where the run's data certify them, else the probes' (max over clients and probed
    iterates: estimates from below).  The bound is judged "holds"/"refuted" only when every constant is
    certified and the left side was probed at every version; this module's own constants are unverified
    (see :data:`UNVERIFIED`), so :func:`analysis.report.theory_rows` keeps it from ever being the only basis of
    either."""
    checks: list[Check] = [Check("statement unverified (no readable source)", None, None, None, UNVERIFIED, "note")]
    L, L_cert = _constant(measured, "L")
    sigma2, s_cert = _constant(measured, "sigma2")
    zeta2, z_cert = _constant(measured, "zeta2")
    vals, miss = lookup(measured, params, "eta_l", "K")
    eta = float(measured.get("eta", params.get("eta", 1.0)))
    checks += assumption_rows(measured, params, ASSUMPTIONS)
    L_est = measured.get("L")  # the probes' estimate from below (None without probes)
    L_est = None if L_est is None else float(L_est)
    exact = bool(((measured.get("certified") or {}).get("L") or {}).get("exact")) if L_cert else False
    if miss or L is None:
        checks.append(missing("step size eta_l <= 1/(8LK)", miss + ([] if L is not None else ["L"]), role="condition"))
    else:
        eta_l, K = float(vals["eta_l"]), float(vals["K"])
        tol = 1.0 + ROUNDING_RTOL

        def at(fn: Any) -> tuple[bool | None, bool | None]:
            return (fn(L) if L_cert else None), (None if L_est is None else fn(L_est))

        up, lo = at(lambda x: eta_l <= tol / (8 * x * K))
        checks.append(condition_by_bounds("step size eta_l <= 1/(8LK)", eta_l, 1.0 / (8 * L * K), ok_at_upper=up,
                                          ok_at_lower=lo, exact=exact, note=REFERENCE))
        up, lo = at(lambda x: eta * eta_l <= tol / (K * x))
        checks.append(condition_by_bounds("step size eta*eta_l <= 1/(KL)", eta * eta_l, 1.0 / (K * L), ok_at_upper=up,
                                          ok_at_lower=lo, exact=exact, note=REFERENCE))
        up, lo = at(lambda x: c_max(eta_l, K, x) > 0)
        checks.append(condition_by_bounds("c = 1/2 - 15K^2 eta_l^2 L^2 > 0", c_max(eta_l, K, L), 0.0, ok_at_upper=up,
                                          ok_at_lower=lo, exact=exact, note=REFERENCE))
        if L_cert and not exact and L_est is not None and any(c.holds is None and c.verdict == "unverified"
                                                              for c in checks[-3:]):
            # the certified L is an upper bound too loose for the step-size conditions: the bound is evaluated
            # at the estimate from below instead (and is then an estimate itself)
            L, L_cert = L_est, False
    g, g_cert, g_how = gap(measured, params)
    vals, miss = lookup(measured, params, "eta_l", "K", "m", "T", "avg_grad_norm_sq")
    miss += [k for k, v in (("L", L), ("sigma2", sigma2), ("zeta2", zeta2)) if v is None]
    if g is None:
        miss.append("F0_minus_Fstar")
    if miss:
        checks.append(missing("Theorem 1: (1/T) sum E||grad f(x_t)||^2", miss, role="bound"))
        return checks
    rhs = bound(eta_l=float(vals["eta_l"]), K=float(vals["K"]), m=float(vals["m"]), T=float(vals["T"]),
                L=float(L), sigma2=float(sigma2), zeta2=float(zeta2), F0_minus_Fstar=float(g), eta=eta)
    why, every = evidence(measured)
    certified = L_cert and s_cert and z_cert and g_cert and every
    start = measured.get("start_grad_norm_sq")
    parts = [f"{REFERENCE}; c at its supremum", f"gap {g:.4g} = {g_how}",
             "constants: " + ", ".join(f"{k} {'certified' if c else 'estimated'}" for k, c in
                                       (("L", L_cert), ("sigma2", s_cert), ("zeta2", z_cert), ("gap", g_cert))),
             "left side at every version < T" if every else "left side: mean over the probed versions (a sample)"]
    row = bound_row("Theorem 1: (1/T) sum E||grad f(x_t)||^2", float(vals["avg_grad_norm_sq"]), rhs,
                    certified=certified, start=None if start is None else float(start), evidence=why,
                    note="; ".join(parts))
    if row.verdict in ("holds", "refuted"):  # certified inputs, but the theorem's own constants are unverified
        row = Check(row.quantity, row.measured, row.bound_or_expectation, row.holds,
                    "constants certified, but Theorem 1 itself is unverified: "
                    + ("would hold" if row.verdict == "holds" else "would be refuted") + "; " + row.note, "bound",
                    "consistent with estimated constants" if row.verdict == "holds"
                    else "above the estimated bound (not a refutation)", "certified")
    return checks + [row]


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
    out.append(clipping_condition(train.get("clip_norm"), setting.get("clipping")))
    if objective_mu:
        mu = float(params.get("mu") or 0.0)
        out.append(condition("local objective F_i itself (proximal mu = 0)", mu, 0.0, mu == 0.0,
                             "a proximal term makes the local steps descend another objective"))
    if train.get("systems_only"):
        out.append(condition("trains a model (not train.systems_only)", True, False, False))
    return out


CLIP_ROW = "no gradient clipping binds"


def clipping_condition(clip_norm: Any, record: Mapping[str, Any] | None) -> Check:
    """Whether clipping changed the steps the proof bounds.  Clipping is part of the algorithm only where
    it binds: with ``train.clip_norm`` unset, or set but never reached (``record``: the ``apply`` records'
    clipped steps, :func:`analysis.report.clipping_record`), the steps are plain SGD's (met); a step it
    scaled down is another method (not met, with the count).  A set clip_norm with no record is taken to
    bind (not met): the trainer did not say."""
    if clip_norm is None:
        return condition(CLIP_ROW, "none", "none", True, "train.clip_norm unset; clipping would change the step "
                         "the proof bounds")
    clip = float(clip_norm)
    if not record:
        return condition(CLIP_ROW, clip, "none", False, f"train.clip_norm = {clip:g} and the run does not record "
                         "whether it bound, so it is taken to bind; clipping changes the step the proof bounds")
    n, steps = int(record.get("clipped_steps") or 0), int(record.get("steps") or 0)
    g = record.get("max_grad_norm")
    top = f"; largest gradient norm before clipping {float(g):.4g}" if g is not None and math.isfinite(float(g)) else ""
    if n == 0:
        return condition(CLIP_ROW, 0.0, 0.0, True, f"train.clip_norm = {clip:g} never bound: 0 of {steps} local "
                         f"steps clipped{top}, so every step is plain SGD's")
    return condition(CLIP_ROW, float(n), 0.0, False, f"train.clip_norm = {clip:g} bound in {n} of {steps} local "
                     f"steps{top}: a clipped step is not the step the proof bounds")


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
                             "n = fewest clients in a round; with n < m the run is held against the verified "
                             "partial-participation bounds (Theorems A and B, analysis.theory.fedavg_partial)"))
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
