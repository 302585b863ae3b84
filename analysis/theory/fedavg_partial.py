"""FedAvg / FedProx (μ = 0) against the verified bounds of :mod:`analysis.theory.partial`.

A run that declares ``local_sgd`` (FedAvg, FedProx) is held against these as well as against Yang, Fang &
Liu's Theorem 1, whose constants no readable source verifies (:mod:`analysis.theory.local_sgd`): only the
bounds here can give "holds" or "refuted".

* **Theorem B** (Jiang & Zhu, UAI 2024, Thm 2 with one cluster) for every run, full participation included
  (n = m: β = 0, the paper's Remark 4), by fedsim's sampling scheme: uniform *without* replacement
  (``Algorithm.sample_clients``: ``rng.choice(..., replace=False)``), so strategy 2.  Its left side is
  min over t < T of E‖∇f(x_t)‖².  The minimum over *probed* versions is at least the minimum over all of
  them, so a probed minimum at or under the bound proves it holds whatever versions were probed, while
  "refuted" needs every version probed.
* **Theorem A** (FedVARP, UAI 2022, Thm 1; without replacement, the average over t), for n ≤ m (its
  participation factor (N−M)/((N−1)M) is 0 at M = N).

Constants and their provenance as in :mod:`analysis.theory.local_sgd` (:mod:`analysis.constants`): the
bound is "holds"/"refuted" only with every constant certified.  The left side is an expectation over the
run's randomness: a single run is one sample of it, so "holds"/"refuted" on one run need a run whose
randomness does not reach the iterates (σ² = 0 certified and every client every round); otherwise the
verdict reads as an estimate and says it rests on one sample (``fedsim check`` on a ``--seeds`` folder
judges the mean over seeds).  The settings neither theorem covers are the condition rows of
:func:`analysis.theory.local_sgd.applies` (momentum, weight decay, clipping, a server optimiser, varying
local steps, FedProx's μ > 0, dropped updates), plus equal aggregation weights.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from analysis.theory import partial
from analysis.theory.base import Check, assumption_rows, bound_row, condition, condition_by_bounds, missing
from analysis.theory.local_sgd import _constant, evidence, gap, setting_conditions

REFERENCE = "verified partial-participation bounds (Jiang & Zhu UAI 2024 Thm 2; FedVARP UAI 2022 Thm 1)"
ONE_SAMPLE = "one run is one sample of the expectation the theorem bounds"


def applies(setting: Mapping[str, Any]) -> list[Check]:
    """The settings the bounds cover (:func:`analysis.theory.local_sgd.setting_conditions`), the server
    step, nothing dropped, equal aggregation weights (``aggregation_samples``: each aggregation's weights,
    :func:`weights_condition`), and fedsim's sampling scheme said as a row."""
    params = setting.get("params") or {}
    out = setting_conditions(setting)
    opt = params.get("server_opt")
    out.append(condition("server step plain (no server_opt)", "none" if opt is None else "set", "none", opt is None,
                         "the theorems' server moves by its rate times the mean update"))
    dropped = setting.get("dropped")
    if dropped is not None:
        out.append(condition("no update dropped (deadline)", float(dropped), 0.0, dropped == 0,
                             "the theorems average every sampled client's update"))
    weights = setting.get("aggregation_samples")
    if weights is not None:
        out.append(weights_condition(weights))
    out.append(Check("client sampling: uniform without replacement, a fresh draw each round", None, None, None,
                     "fedsim's Algorithm.sample_clients; Theorem B's strategy 2, Theorem A's scheme", "note"))
    return out


WEIGHTS_ROW = "aggregation weights equal (1/M), as the theorems' update and 1/N objective"


def weights_condition(aggregations: Sequence[Sequence[float]]) -> Check:
    """Theorems A and B average the sampled clients' models with weight 1/M; fedsim's FedAvg weights each
    by the samples it processed (``aggregations``: per aggregation, each applied client's samples).  The row is
    :func:`analysis.theory.partial.equal_weights_condition` on the aggregation whose weights differ most:
    met only when every aggregation's weights are equal (a closed-form fact of the run, so certified)."""
    aggs = [list(map(float, w)) for w in aggregations if len(w)]
    if not aggs or not all(math.isfinite(x) for w in aggs for x in w):
        return condition(WEIGHTS_ROW, None, 0.0, None, "not evaluated: the run recorded no aggregation")
    spread = [partial.equal_weights_condition(w).measured for w in aggs]
    i = max(range(len(aggs)), key=spread.__getitem__)
    cd = partial.equal_weights_condition(aggs[i])
    unequal = sum(s > 0 for s in spread)
    note = (f"(max - min)/max of the weights in each of {len(aggs)} aggregation(s): all equal" if cd.holds else
            f"{unequal} of {len(aggs)} aggregation(s) weight clients unequally (by samples processed; worst "
            f"{min(aggs[i]):.4g} to {max(aggs[i]):.4g} samples): the update is not the theorems' 1/M average")
    return condition(WEIGHTS_ROW, cd.measured, cd.required, cd.holds, note, "certified")


def _min_below_T(measured: Mapping[str, Any]) -> float | None:
    g = measured.get("grad_norm_sq_by_version")
    T = measured.get("T")
    if not g or T is None:
        return None
    vals = [float(v) for k, v in g.items() if int(k) < int(T)]
    return min(vals) if vals else None


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "each f_i L-smooth (L = max over clients)"),
               ("variance", "sigma2", "E||g_i - grad f_i||^2 <= sigma^2"),
               ("dissimilarity", "zeta2", "||grad f_i - grad f||^2 <= sigma_g^2"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    """Theorem B (and Theorem A where n < m) at the run's constants, each with its provenance."""
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    L, L_cert = _constant(measured, "L")
    sigma2, s_cert = _constant(measured, "sigma2")
    zeta2, z_cert = _constant(measured, "zeta2")
    g, g_cert, g_how = gap(measured, params)
    need = {k: measured.get(k, params.get(k)) for k in ("eta_l", "K", "T", "m")}
    n_clients = measured.get("num_clients", params.get("num_clients"))
    miss = [k for k, v in (*need.items(), ("num_clients", n_clients), ("L", L), ("sigma2", sigma2),
                           ("zeta2", zeta2), ("F0_minus_Fstar", g)) if v is None]
    if miss:
        return checks + [missing("Theorem B: min_t E||grad f(x_t)||^2", miss, role="bound")]
    eta_l, K, T = float(need["eta_l"]), int(round(float(need["K"]))), int(float(need["T"]))
    n, m = int(round(float(need["m"]))), int(n_clients)
    eta_g = float(params.get("eta_g", 1.0) or 1.0)
    L_est = measured.get("L")
    L_est = None if L_est is None else float(L_est)
    exact = bool(((measured.get("certified") or {}).get("L") or {}).get("exact")) if L_cert else False
    if T < 1 or K < 1 or n < 1 or m < n:
        return checks + [missing("Theorem B: min_t E||grad f(x_t)||^2", ["T, K, n <= m"], role="bound")]

    if not (L > 0 and eta_l > 0 and eta_g > 0 and float(sigma2) >= 0 and float(zeta2) >= 0 and float(g) >= 0):
        return checks + [Check("Theorem B: min_t E||grad f(x_t)||^2", None, None, None,
                      f"not evaluated: the theorems need L, the step sizes > 0 and sigma^2, zeta^2, the gap >= 0 (got L "
                      f"{L:.4g}, lr {eta_l:.4g}, server_lr {eta_g:.4g}, sigma^2 {float(sigma2):.4g}, zeta^2 "
                      f"{float(zeta2):.4g}, gap {float(g):.4g})", "bound")]

    def b_at(x: float) -> Any:
        return partial.theorem_b(L=x, sigma2=float(sigma2), sigma_g2=float(zeta2), gap=float(g), eta=eta_l,
                                 eta_g=eta_g, tau=K, T=T, n=n, m=m, with_replacement=False)

    b_up, b_lo = (b_at(L) if L_cert else None), (None if L_est is None or L_est <= 0 else b_at(L_est))
    main = b_up if b_up is not None else b_lo
    if main is None:
        main = b_at(L)
    # conditions: met at a certified L, not met at the exact L or even at an estimate from below
    for i, cd in enumerate(main.conditions):
        up = None if b_up is None else bool(b_up.conditions[i].holds)
        lo = None if b_lo is None else bool(b_lo.conditions[i].holds)
        if b_up is None and b_lo is None:
            up = bool(cd.holds)
        checks.append(condition_by_bounds(f"Theorem B: {cd.name}", cd.measured, cd.required, ok_at_upper=up,
                                          ok_at_lower=lo, exact=exact, note=partial.THEOREM_B))
    use_cert = L_cert and b_up is not None and all(c.holds for c in b_up.conditions)
    bnd = b_up if use_cert else (b_lo if b_lo is not None else main)
    lhs = _min_below_T(measured)
    why, every = evidence(measured)
    deterministic = s_cert and float(sigma2) == 0.0 and n == m
    certified = use_cert and s_cert and z_cert and g_cert
    start = measured.get("start_grad_norm_sq")
    notes = [partial.THEOREM_B, f"gap {g:.4g} = {g_how}",
             "constants: " + ", ".join(f"{k} {'certified' if c else 'estimated'}" for k, c in
                                       (("L", use_cert), ("sigma2", s_cert), ("zeta2", z_cert), ("gap", g_cert))),
             "; ".join(bnd.notes[:1])]
    if lhs is None:
        checks.append(missing("Theorem B: min_t E||grad f(x_t)||^2", ["grad_norm_sq_by_version"], role="bound"))
    else:
        row = bound_row("Theorem B: min_t E||grad f(x_t)||^2 (min over probed t < T)", lhs, bnd.value,
                        certified=certified, start=None if start is None else float(start), evidence=why,
                        note="; ".join(s for s in notes if s))
        row = _sample_caveats(row, every=every, deterministic=deterministic, seeds=measured.get("seeds"))
        checks.append(row)
    if n <= m:  # Theorem A at M = N too: its participation factor is 0 there (FedVARP's statement)
        a = partial.theorem_a(L=float(L), sigma2=float(sigma2), sigma_g2=float(zeta2), gap=float(g), eta_c=eta_l,
                              eta_s=eta_g, tau=K, T=T, M=n, N=m)
        for cd in a.conditions:
            checks.append(condition_by_bounds(f"Theorem A: {cd.name}", cd.measured, cd.required,
                                              ok_at_upper=bool(cd.holds) if L_cert else None,
                                              ok_at_lower=None if L_cert else bool(cd.holds), exact=exact,
                                              note=partial.THEOREM_A))
        avg = measured.get("avg_grad_norm_sq")
        if avg is not None:
            row = bound_row("Theorem A: (1/T) sum_t E||grad f(w_t)||^2", float(avg), a.value,
                            certified=L_cert and s_cert and z_cert and g_cert and every,
                            start=None if start is None else float(start), evidence=why,
                            note="; ".join((partial.THEOREM_A, f"gap {g:.4g} = {g_how}")))
            checks.append(_sample_caveats(row, every=True, deterministic=deterministic, seeds=measured.get("seeds")))
    return checks


def _sample_caveats(row: Check, *, every: bool, deterministic: bool, seeds: Any) -> Check:
    """Weakens a certified verdict the evidence cannot carry: "refuted" on a minimum over a sample of the
    versions (the true minimum may be lower), and either on one sample of a random run."""
    verdict, note = row.verdict, row.note
    if verdict == "refuted" and not every:
        verdict, note = "above the estimated bound (not a refutation)", \
            "the minimum over probed versions only (the true minimum may be lower); " + note
    if verdict in ("holds", "refuted") and not deterministic and not seeds:
        verdict = "consistent with estimated constants" if verdict == "holds" else \
            "above the estimated bound (not a refutation)"
        note = f"{ONE_SAMPLE}: run seeds (--seeds) for a verdict on the mean; " + note
    elif verdict in ("holds", "refuted") and deterministic:
        note = "a run whose iterates no randomness reaches (sigma^2 = 0, every client every round): its value is " \
               "its expectation; " + note
    if verdict == row.verdict and note == row.note:
        return row
    return Check(row.quantity, row.measured, row.bound_or_expectation, row.holds, note, "bound", verdict,
                 row.provenance)

