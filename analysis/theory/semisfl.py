"""SemiSFL (semi-supervised split FL), Theorem 1 and Lemmas 3–4 (spec §4).

    min_{h,k} E‖∇F(w^{h,k})‖² ≤ 2(F(w⁰) − F(w*))/(η₁ H K_s) + Φ,
    Φ = (L²(K_u − 1)(2K_u − 1)η₁²/(3K_s) + L K_u² η₁^p / K_s + 1) G_u² + (Lη₁ + 2K_u/K_s) G_s²,

with p = 3 as printed and p = 1 as the proof derives; both are evaluated.  G_s², G_u² bound the
per-sample squared gradient norms of the supervised / unsupervised losses.  F* is unknown: with
F* = 0 (the losses are non-negative) the right side can only grow, so the check stays valid.

Inputs: ``eta1``, ``H``, ``K_s``, ``K_u``, ``L``, ``Gs2``, ``Gu2``, ``F0`` (and optional ``F_star``),
``min_grad_norm_sq``; ``minibatch_sq_norm`` with ``max_per_sample_sq_norm`` (Lemma 3); ``drift`` =
[(k, ‖w^k − w^0‖²), …] with ``eta`` and ``G_max_sq`` (largest observed minibatch ‖g‖², Lemma 4's
deterministic form ‖w^k − w^0‖² ≤ (kη G_max)²); ``Gs2_after_sup``/``Gs2_after_semi`` and
``Gu2_after_sup``/``Gu2_after_semi`` sequences for the seesaw.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from analysis.theory.base import Check, assumption_rows, le, lookup, missing

REFERENCE = "SemiSFL Theorem 1"


def phi(*, K_s: float, K_u: float, eta1: float, L: float, Gs2: float, Gu2: float, power: int = 3) -> float:
    return float((L**2 * (K_u - 1) * (2 * K_u - 1) * eta1**2 / (3 * K_s) + L * K_u**2 * eta1**power / K_s + 1) * Gu2
                 + (L * eta1 + 2 * K_u / K_s) * Gs2)


def theorem1_rhs(*, F0_minus_Fstar: float, eta1: float, H: float, K_s: float, K_u: float, L: float,
                 Gs2: float, Gu2: float, power: int = 3) -> float:
    return float(2 * F0_minus_Fstar / (eta1 * H * K_s) + phi(K_s=K_s, K_u=K_u, eta1=eta1, L=L, Gs2=Gs2, Gu2=Gu2, power=power))


#: the theorem's uniform assumptions as rows (:func:`analysis.theory.base.assumption_rows`)
ASSUMPTIONS = (("smoothness", "L", "F L-smooth"),
               ("variance", "Gs2", "per-sample ||grad f_s||^2 <= G_s^2 (bounds the supervised gradients' variance)"),
               ("dissimilarity", "Gu2", "per-sample ||grad f_u||^2 <= G_u^2 (bounds the unsupervised clients' "
                                        "gradients, hence their dissimilarity from the supervised objective)"))


def evaluate(measured: Mapping[str, Any], params: Mapping[str, Any]) -> list[Check]:
    checks: list[Check] = assumption_rows(measured, params, ASSUMPTIONS)
    keys = ("eta1", "H", "K_s", "K_u", "L", "Gs2", "Gu2", "F0", "min_grad_norm_sq")
    v, miss = lookup(measured, params, *keys)
    if miss:
        checks.append(missing("Theorem 1: min E||grad F||^2", miss))
    else:
        gap = float(v["F0"]) - float(measured.get("F_star", params.get("F_star", 0.0)))
        args = {k: float(v[k]) for k in ("eta1", "H", "K_s", "K_u", "L", "Gs2", "Gu2")}
        for power, label in ((3, "as printed, eta1^3"), (1, "as derived, eta1^1")):
            checks.append(le(f"Theorem 1 ({label}): min E||grad F||^2", float(v["min_grad_norm_sq"]),
                             theorem1_rhs(F0_minus_Fstar=gap, power=power, **args), f"{REFERENCE}; F* taken as "
                             f"{measured.get('F_star', params.get('F_star', 0.0))}"))
    v, miss = lookup(measured, params, "minibatch_sq_norm", "max_per_sample_sq_norm")
    if not miss:
        checks.append(le("Lemma 3: minibatch ||g||^2 <= max per-sample ||g||^2", float(v["minibatch_sq_norm"]),
                         float(v["max_per_sample_sq_norm"]), "Jensen; holds deterministically", role=""))
    drift = measured.get("drift")
    if drift:
        v, miss = lookup(measured, params, "eta", "G_max_sq")
        if miss:
            checks.append(missing("Lemma 4: client drift", miss))
        else:
            worst = max(drift, key=lambda p: p[1] / max((p[0] * float(v["eta"])) ** 2 * float(v["G_max_sq"]), 1e-300))
            k, d = worst
            checks.append(le("Lemma 4: ||w^k - w^0||^2 <= (k eta G_max)^2 (worst k)", float(d),
                             float((k * float(v["eta"])) ** 2 * float(v["G_max_sq"])),
                             "holds deterministically for SGD (eta = lr / (1 - momentum) for heavy-ball SGD)", role=""))
    for g, phase_low, phase_high in (("Gs2", "sup", "semi"), ("Gu2", "semi", "sup")):
        lo, hi = measured.get(f"{g}_after_{phase_low}"), measured.get(f"{g}_after_{phase_high}")
        if lo is not None and hi is not None and len(lo) and len(hi):
            a, b = float(np.mean(lo)), float(np.mean(hi))
            checks.append(Check(f"seesaw: {g} lower after the {phase_low} phase", a, b, bool(a < b),
                                f"mean {g} after {phase_low} vs after {phase_high}; qualitative"))
    return checks
