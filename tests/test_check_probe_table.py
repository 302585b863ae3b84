"""The probe table of issue "fedsim check that can fail": each run a sceptical referee tried, as the verdict
its "why it is wrong" column implies.  Pure functions where the theorem module decides alone; one tiny GAS
run for the inputs read off the run.  (The runs of the table's FedAvg cases, and the broken subclasses, are
the discrimination suite: tests/test_check_discrimination.py.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.theory import fedavg_partial, fedraa, local_sgd
from analysis.theory.base import judge
from fedsim.algorithms import FedAvg
from fedsim.learn.data import quadratic_problem
from fedsim.runner import overridden_decisions


def _cert(**values):
    return {k: {"value": v, "provenance": "certified", "exact": True} for k, v in values.items()}


@pytest.fixture(scope="module")
def readme():
    """The README quadratic's exact constants, from its construction (fedsim/scenarios/quadratic.yaml)."""
    prob = quadratic_problem(np.random.default_rng(0), 8, {"builder": "heterogeneous", "dim": 10, "L": 1.0,
                                                           "mu": 0.1, "hessian_spread": 0.5, "center_spread": 2.0})
    return prob


def _theorem1(measured, params):
    rows = judge(local_sgd.applies({"train": {"local_steps": 5}, "params": {}, "num_clients": 8,
                                    "round_clients": [8]}) + local_sgd.evaluate(measured, params))
    return {r.quantity: r for r in rows}


def _base(prob, **extra):
    # the quadratic's measured sigma^2 and zeta^2 (estimates) and a left side; L and F* certified
    return {"L": prob.constants.L_global, "sigma2": 311.8, "zeta2": 27.55, "F0": 11.5, "avg_grad_norm_sq": 0.57,
            "start_grad_norm_sq": 2.834, "T": 60, "probe_versions": list(range(0, 61, 2)),
            "certified": _cert(L=prob.constants.L, F_star=11.5 - 3.565)} | extra


PARAMS = {"eta_l": 0.025, "K": 5, "m": 8, "T": 60}


def test_readme_quadratic_uses_each_clients_smoothness_and_is_uninformative(readme):
    assert readme.constants.L == pytest.approx(1.0) and readme.constants.L_global < 0.7
    rows = _theorem1(_base(readme), PARAMS)
    thm = rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"]
    assert thm.bound_or_expectation == pytest.approx(37.1, abs=0.05)  # the value at L = 1, gap 3.565
    assert thm.verdict == "uninformative"  # Phi alone is above ||grad F(w0)||^2: the untrained model passes


def test_a_step_over_the_certified_limit_is_not_applicable(readme):
    rows = _theorem1(_base(readme), PARAMS | {"eta_l": 0.035})
    step = rows["step size eta_l <= 1/(8LK)"]
    assert step.holds is False and step.bound_or_expectation == pytest.approx(0.025)
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].verdict == "not applicable"


def test_a_step_met_only_at_an_estimated_smoothness_is_unverified(readme):
    m = _base(readme)
    m.pop("certified")
    rows = _theorem1(m, PARAMS | {"eta_l": 0.035})
    assert rows["step size eta_l <= 1/(8LK)"].verdict == "unverified"
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].verdict not in ("holds", "refuted")


def test_a_run_that_barely_moves_is_uninformative_with_the_certified_gap(readme):
    rows = _theorem1(_base(readme, avg_grad_norm_sq=2.833), PARAMS | {"eta_l": 1e-6})
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].verdict == "uninformative"


def test_a_float_noise_gap_is_never_a_refutation():
    """default, FedAvg on all clients, lr 1e-9: F* >= 0 certifies the gap F(w0) - 0, so the bound is huge
    (uninformative); with only the run's own gap (1.6e-9) the row can at worst read 'above the estimated'."""
    m = {"L": 40.0, "sigma2": 3.0, "zeta2": 1.0, "F0": 2.3, "avg_grad_norm_sq": 0.0528, "start_grad_norm_sq": 0.0528,
         "T": 20, "probe_versions": list(range(21)), "F0_minus_Fstar": 1.61e-9}
    p = {"eta_l": 1e-9, "K": 5, "m": 20, "T": 20}
    with_f_star = _theorem1(m | {"certified": _cert(F_star=0.0)}, p)["Theorem 1: (1/T) sum E||grad f(x_t)||^2"]
    assert with_f_star.verdict == "uninformative"
    alone = _theorem1(m, p)["Theorem 1: (1/T) sum E||grad f(x_t)||^2"]
    assert alone.verdict == "above the estimated bound (not a refutation)"
    b = [r for r in judge(fedavg_partial.evaluate(m | {"num_clients": 20, "grad_norm_sq_by_version":
                                                        {str(v): 0.0528 for v in range(21)}}, p))
         if r.role == "bound"]
    assert b and all(r.verdict != "refuted" for r in b)


def test_theorem1_is_never_the_basis_of_holds_or_refuted():
    """Every constant certified and the bound informative: Theorem 1 still reads as an estimate."""
    m = {"F0": 1.0, "avg_grad_norm_sq": 5.0, "start_grad_norm_sq": 10.0, "T": 50, "probe_versions": list(range(51)),
         "certified": _cert(L=1.0, sigma2=0.0, zeta2=0.0, F_star=0.0)}
    thm = _theorem1(m, {"eta_l": 0.02, "K": 1, "m": 8, "T": 50})["Theorem 1: (1/T) sum E||grad f(x_t)||^2"]
    assert thm.measured > thm.bound_or_expectation
    assert thm.verdict == "above the estimated bound (not a refutation)" and "unverified" in thm.note


def test_overriding_a_covered_decision_withholds_the_inherited_theorem():
    class DoesNothing(FedAvg):
        def server_rule(self, updates, base):
            return dict(base), [1.0 / len(updates)] * len(updates)

    class Renamed(FedAvg):
        name = "renamed"

    class Redeclared(DoesNothing):
        theorems = ("local_sgd",)

    assert overridden_decisions(DoesNothing, FedAvg) == ["test_overriding_a_covered_decision_withholds_the_"
                                                         "inherited_theorem.<locals>.DoesNothing.server_rule"]
    assert overridden_decisions(Renamed, FedAvg) == []
    assert overridden_decisions(Redeclared, Redeclared) == []


def test_clipping_is_a_condition():
    rows = local_sgd.setting_conditions({"train": {"local_steps": 5, "clip_norm": 0.05}, "params": {}})
    clip = [r for r in rows if "clip" in r.quantity][0]
    assert clip.holds is False and clip.measured == 0.05


def test_too_few_probed_versions_is_insufficient_evidence(readme):
    rows = _theorem1(_base(readme, probe_versions=[0, 30, 60]), PARAMS)
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].verdict == "insufficient evidence"


def test_fedraa_prints_rho_gt_mu_without_a_proximal_term():
    rows = fedraa.evaluate({"K_hat": 2, "K": 3}, {"rho": 0.0})
    rho = [r for r in rows if r.quantity == "proximal weight rho > mu"]
    assert rho and rho[0].holds is False


def test_gas_run_inputs_cannot_be_overwritten_and_lemma1_needs_generated_activations(tmp_path):
    from analysis.report import check_run
    from fedsim import load_scenario
    from fedsim.runner import run_scenario

    run_scenario(load_scenario("gas", ["stop.max_versions=3", "output.figures=false"]), tmp_path, progress=False)
    (tmp_path / "measured.json").write_text(json.dumps({"B": 2.673, "B_hat": 5}))  # a fit's B; a claimed B_hat
    table = check_run(tmp_path, figures=False, progress=False).set_index("quantity")
    lemma = table.loc["[gas] Lemma 1: D with GA <= D without GA"]
    assert lemma["verdict"] == "insufficient evidence"  # no record generated any activation, whatever the file says
    assert "[gas] server step eta <= 1/gamma1" in table.index


def test_the_guide_lists_every_verdict_with_its_meaning():
    from pathlib import Path

    from analysis.theory.base import VERDICTS

    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text(encoding="utf-8").split())
    for word, meaning in VERDICTS.items():
        assert f"*{word}*: {' '.join(meaning.split())}" in guide, word
