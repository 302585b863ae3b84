"""Co-S²P (semi-asynchronous training with structured pruning), Theorem 1 and Lemmas 4–5 (spec §4).

Symbols (the paper's): N clients, |K| segments (key ``K``), E local SGD steps, η step size, Q rounds,
N* = min_{q,i} N_q^i (key ``N_star``), τ = (1/Q) Σ_q τ_q² the mean squared maximum delay (key ``tau``; the
trace metric ``tau_bar``), L smoothness, σ² gradient variance, δ² heterogeneity (‖∇F_n − ∇F‖² ≤ δ²),
G the bound on the *squared* stochastic-gradient norm (not squared again), F1 = E[F(w_1)].

Theorem 1, for η ≤ 1/(4LE):

    (1/Q) Σ_q E‖∇F(w_q)‖² ≤ 2 E[F(w_1)]/(EηQ) + 4Lη²E²(N|K|/N*) G (τ N|K|/N* + 16)
                              + 16Lη²E (N|K|/N*) σ² + 64Lη²E² (N|K|/N*) δ².

Optional inputs: ``lemma5`` = [(τ_q, ‖w_q − w_{q−τ_q}‖²), …]; ``lemma4`` = [drift, …] with drift =
(1/E) Σ_e ‖w_{n,e−1} − w_start‖²; sweeps ``sweep_n_star`` [(N*, LHS)], ``sweep_tau`` [(τ, LHS)],
``sweep_NEQ`` [(N*·E·Q, LHS)] for Remarks 1–2 and Corollary 1 (shape only: constants are in C).
"""
from __future__ import annotations

from typing import Any, Mapping

from analysis.theory.base import Check, assumption_rows, condition, le, lookup, missing, slope, sweep, trend

REFERENCE = "Co-S2P Theorem 1"


def theorem1_rhs(*, F1: float, E: float, eta: float, Q: float, L: float, N: float, K: float, N_star: float,
                 G: float, tau: float, sigma2: float, delta2: float) -> float:
    if N_star <= 0:
        return float("inf")
    r = N * K / N_star
    return float(2 * F1 / (E * eta * Q) + 4 * L * eta**2 * E**2 * r * G * (tau * r + 16)
                 + 16 * L * eta**2 * E * r * sigma2 + 64 * L * eta**2 * E**2 * r * delta2)


def lemma5_rhs(*, tau_q: float, eta: float, E: float, N: float, N_star: float, K: float, G: float) -> float:
    """‖w_q − w_{q−τ_q}‖² ≤ τ_q² η² E² (N/N*) |K| G."""
    return float(tau_q**2 * eta**2 * E**2 * (N / N_star) * K * G) if N_star > 0 else float("inf")


def lemma4_rhs(*, eta: float, E: float, sigma2: float, delta2: float, G: float) -> float:
    """(1/E) Σ_e ‖w_{n,e−1} − w_start‖² ≤ 4η²Eσ² + 16η²E²δ² + 16η²E²G (needs η ≤ 1/(2LE))."""
    return float(4 * eta**2 * E * sigma2 + 16 * eta**2 * E**2 * delta2 + 16 * eta**2 * E**2 * G)


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "F_n L-smooth (L = max over clients)"),
               ("variance", "sigma2", "E||grad F_n(w; xi) - grad F_n(w)||^2 <= sigma^2"),
               ("dissimilarity", "delta2", "||grad F_n - grad F||^2 <= delta^2"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    v, miss = lookup(measured, params, "eta", "L", "E")
    if miss:
        checks.append(missing("step size eta <= 1/(4LE)", miss))
    else:
        lim = 1.0 / (4 * v["L"] * v["E"])
        checks.append(condition("step size eta <= 1/(4LE)", float(v["eta"]), lim, v["eta"] <= lim, REFERENCE))
    v, miss = lookup(measured, params, "N_star")
    if not miss:  # not a condition: N* = 0 makes the bound infinite, which judge() reads "vacuous"
        checks.append(Check("N* (strict, as Theorem 1 uses it)", float(v["N_star"]), "> 0 for a finite bound",
                            None, "strict N* = min over all rounds and segments; 0 makes Theorem 1 vacuous"
                            if v["N_star"] <= 0 else "strict N* = min over all rounds and segments", "note"))
    keys = ("F1", "E", "eta", "Q", "L", "N", "K", "N_star", "G", "tau", "sigma2", "delta2", "avg_grad_norm_sq")
    v, miss = lookup(measured, params, *keys)
    if miss:
        checks.append(missing("Theorem 1: (1/Q) sum E||grad F(w_q)||^2", miss))
    else:
        rhs = theorem1_rhs(**{k: float(v[k]) for k in keys if k != "avg_grad_norm_sq"})
        checks.append(le("Theorem 1: (1/Q) sum E||grad F(w_q)||^2", float(v["avg_grad_norm_sq"]), rhs,
                         f"{REFERENCE}; tau = mean squared max delay; N* strict"))
    pairs = measured.get("lemma5")
    if pairs:
        v, miss = lookup(measured, params, "eta", "E", "N", "N_star", "K", "G")
        if miss:
            checks.append(missing("Lemma 5: ||w_q - w_(q-tau_q)||^2", miss))
        else:
            ratios = [(d, lemma5_rhs(tau_q=float(t), **{k: float(v[k]) for k in ("eta", "E", "N", "N_star", "K", "G")}))
                      for t, d in pairs]
            worst = max(ratios, key=lambda p: p[0] / p[1] if p[1] > 0 else float("inf"))
            checks.append(le("Lemma 5: ||w_q - w_(q-tau_q)||^2 (worst round)", float(worst[0]), float(worst[1]),
                             "staleness drift of the global model"))
    drifts = measured.get("lemma4")
    if drifts:
        v, miss = lookup(measured, params, "eta", "E", "sigma2", "delta2", "G")
        if miss:
            checks.append(missing("Lemma 4: client drift", miss))
        else:
            checks.append(le("Lemma 4: client drift (max over clients)", float(max(drifts)),
                             lemma4_rhs(**{k: float(v[k]) for k in ("eta", "E", "sigma2", "delta2", "G")})))
    sw = sweep(measured, "sweep_n_star")
    if sw:
        checks.append(trend("Remark 2: LHS vs N*", *sw, expect="nonincreasing", note="larger N* converges faster"))
    sw = sweep(measured, "sweep_tau")
    if sw:
        checks.append(trend("Remark 1: LHS vs tau", *sw, expect="nondecreasing", note="larger delay converges slower"))
    sw = sweep(measured, "sweep_NEQ")
    if sw:
        tol = float(params.get("slope_tol", 0.1))
        checks.append(slope("Corollary 1: slope of log LHS vs log(N* E Q)", *sw, at_most=-0.5 + tol,
                            note=f"eta ~ sqrt(N*/(EQ)) gives rate -1/2 (tolerance {tol})"))
    return checks
