"""Theorems A and B assume the server averages the sampled clients with equal weights 1/M; fedsim's FedAvg
weights by samples processed.  The condition row is met exactly when every aggregation's weights are equal
(equal client sizes, or unequal sizes that each process local_steps x batch_size samples) and not met when
unequal sizes make the weights differ, which leaves Theorems A and B "not applicable"."""
from __future__ import annotations

import pytest

from analysis.report import check_run
from analysis.theory.fedavg_partial import WEIGHTS_ROW, weights_condition
from fedsim import load_scenario, scenario_from_mapping
from fedsim.runner import run_scenario

from test_check_clipping import CERTIFIED


def test_the_row_on_hand_made_aggregations():
    assert weights_condition([[16.0] * 4, [8.0, 8.0]]).holds is True
    bad = weights_condition([[16.0] * 4, [4.0, 6.0, 10.0]])  # worst: (10 - 4)/10 = 0.6
    assert bad.holds is False and bad.measured == pytest.approx(0.6) and "1 of 2" in bad.note
    assert weights_condition([]).holds is None


def _digits(batch_size: int, local_steps: int):
    """FedAvg on digits/logreg over 4 Dirichlet(0.3) clients of unequal sizes, every client every round."""
    return scenario_from_mapping({
        "name": "weights", "seed": 1,
        "data": {"name": "digits", "num_clients": 4, "partition": {"method": "dirichlet", "alpha": 0.3,
                                                                  "min_size": 20}},
        "model": {"name": "logreg"},
        "train": {"lr": 0.001, "batch_size": batch_size, "local_steps": local_steps},
        "devices": {"mix": [{"profile": "jetson-agx-orin-32gb"}]},
        "algorithm": {"name": "fedavg", "clients_per_round": 4},
        "stop": {"max_versions": 4}, "eval": {"every_versions": 4},
        "output": {"figures": False, "checkpoints": 1}})


def _rows(table, text):
    return table[table["quantity"].astype(str).str.contains(text, regex=False, na=False)]


@pytest.mark.parametrize("case", ["unequal", "unequal sizes, equal samples", "equal sizes"])
def test_a_run_with_unequal_weights_is_not_applicable_and_equal_ones_are_met(case, tmp_path):
    if case == "unequal":  # one full-data step per client: weights = client sizes, which differ
        scenario = _digits(batch_size=2000, local_steps=1)
    elif case == "unequal sizes, equal samples":  # 2 steps of 8 samples each, every client has >= 20
        scenario = _digits(batch_size=8, local_steps=2)
    else:  # the certified quadratic: every client holds 8 rows and takes them all
        scenario = load_scenario("quadratic", CERTIFIED[:-5] + ["stop.max_versions=6", "output.checkpoints=1",
                                                             "output.figures=false", "eval.every_versions=6",
                                                             "algorithm.clients_per_round=4"])
    run_scenario(scenario, tmp_path, progress=False)
    table = check_run(tmp_path, figures=False, progress=False)
    row = _rows(table, WEIGHTS_ROW).iloc[0]
    bounds = table[(table["role"] == "bound") & table["quantity"].astype(str).str.startswith("[fedavg_partial]")]
    assert len(bounds) >= 2
    if case == "unequal":
        assert row["holds"] == False and row["measured"] > 0.05  # noqa: E712
        assert (bounds["verdict"] == "not applicable").all()
        assert bounds["note"].str.contains("aggregation weights equal").all()
    else:
        assert row["holds"] == True and row["measured"] == 0.0  # noqa: E712
        assert not bounds["note"].str.contains("aggregation weights equal").any()
