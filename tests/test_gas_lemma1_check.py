"""GAS Lemma 1 end to end: a small GAS run long enough that activations ARE generated gets a real comparison on
the Lemma-1 rows (measured from the run's own dissimilarity records, ρ from the batch size), a run too short to
generate any gets "insufficient evidence", and the η ≤ 1/γ₁ row is printed either way."""
from __future__ import annotations

import pytest

from analysis.estimators import gas_lemma1_rho
from analysis.report import check_run
from analysis.theory import gas
from fedsim import load_scenario
from fedsim.runner import run_scenario
from fedsim.sim.trace import load_trace, trace_path

LEMMA = "[gas] Lemma 1: D with GA <= D without GA"
EQ25 = "[gas] Lemma 1 (eq. 25): D with GA <= rho * D without GA"
STEP = "[gas] server step eta <= 1/gamma1"


def _run(tmp_path, versions: int):
    run_scenario(load_scenario("gas", [f"stop.max_versions={versions}", "output.figures=false",
                                       "algorithm.measure_every=1"]), tmp_path, progress=False)
    return check_run(tmp_path, figures=False, progress=False).set_index("quantity")


def test_generated_activations_give_lemma1_a_real_comparison(tmp_path):
    table = _run(tmp_path, 12)  # every label seen after a few server steps: generation starts (measured: ~17 steps)
    dis = load_trace(trace_path(tmp_path))
    dis = dis[dis["kind"] == "dissimilarity"]
    assert dis["n_generated"].astype(float).max() > 0, "the run is too short to generate activations"
    d_with, d_without = dis["with_generation"].astype(float).mean(), dis["without_generation"].astype(float).mean()
    lemma, eq25 = table.loc[LEMMA], table.loc[EQ25]
    assert lemma["verdict"] != "insufficient evidence" and lemma["holds"] in (True, False)
    assert lemma["measured"] == pytest.approx(d_with) and lemma["bound_or_expectation"] == pytest.approx(d_without)
    # rho from GAS's batch size B = 16 (train.batch_size), never a measured.json key
    q_s = max(1, round(dis["n_real"].astype(float).mean() / 16))
    b_hat = max(1, round(dis["n_generated"].astype(float).mean()))
    rho = gas_lemma1_rho(16, q_s, b_hat)
    assert 0.5 <= rho < 1.0
    assert eq25["bound_or_expectation"] == pytest.approx(rho * d_without) and eq25["holds"] in (True, False)
    assert STEP in table.index and table.loc[STEP, "role"] == "condition"


def test_no_generated_activation_is_insufficient_evidence(tmp_path):
    table = _run(tmp_path, 3)
    assert table.loc[LEMMA, "verdict"] == "insufficient evidence"
    assert EQ25 not in table.index  # no rho row on an empty comparison
    assert STEP in table.index


def test_a_generation_that_raises_the_dissimilarity_fails_the_lemma():
    """The deliberately broken direction: with generated rows making the buffer worse, the row fails."""
    rows = {r.quantity: r for r in gas.evaluate({"D_with_ga": 0.9, "D_without_ga": 0.5, "B": 16, "Q_s": 1,
                                                 "B_hat": 16}, {})}
    assert rows["Lemma 1: D with GA <= D without GA"].holds is False
    assert rows["Lemma 1 (eq. 25): D with GA <= rho * D without GA"].bound_or_expectation == pytest.approx(0.25)
