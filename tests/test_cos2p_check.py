"""fedsim check on a Co-S²P run: N*, τ̄, RU, |K| from the trace and the Theorem 1 row with those values."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from analysis.report import check_run
from analysis.theory.cos2p import theorem1_rhs
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping


def test_check_prints_n_star_tau_ru_and_theorem1(tiny, tmp_path):
    sc = copy.deepcopy(tiny)
    sc["data"] = {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}}
    sc["model"] = {"name": "vit", "depth": 2, "options": {"embed_dim": 16, "heads": 2, "patch": 4}}
    sc["devices"] = {"mix": [{"profile": "jetson-xavier-nx-8gb", "count": 2}, {"profile": "jetson-agx-orin-64gb", "count": 2}]}
    sc["train"] = {"lr": 0.05, "batch_size": 16, "local_steps": 3}
    sc["algorithm"] = {"name": "cos2p", "mu": 0.5, "t_clk": 0.0, "rate_rule": "table7",
                       "rates": {"jetson-xavier-nx-8gb": 0.25}}
    sc["stop"] = {"max_versions": 5}
    run_scenario(scenario_from_mapping(sc), tmp_path, progress=False)
    measured = {"F0": 2.3, "zeta2": 0.7, "L": 3.0, "sigma2": 1.5, "avg_grad_norm_sq": 0.9, "G": 4.0}
    (tmp_path / "measured.json").write_text(json.dumps(measured))
    table = check_run(tmp_path, figures=False, progress=False).set_index("quantity")
    rounds = [json.loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines() if '"cos2p_round"' in x]
    n_star = min(r["n_star_trained"] for r in rounds)
    strict = int(table.loc["N* strict (Co-S2P segments: neurons, heads, channels)", "measured"])
    tau = float(np.mean([max(r["tau"]) ** 2 for r in rounds]))
    ru = float(np.mean([sum(r["busy"]) / (len(r["busy"]) * max(r["busy"])) for r in rounds]))
    assert table.loc["N* over the segments trained in each round", "measured"] == n_star
    assert table.loc["tau_bar = mean_q tau_q^2 (recorded per round)", "measured"] == pytest.approx(tau)
    assert table.loc["RU from the recorded busy times (Eq. 17)", "measured"] == pytest.approx(ru)
    assert table.loc["RU (Co-S2P Eq. 17)", "measured"] == pytest.approx(ru, rel=1e-6)
    K = rounds[0]["n_segments"]
    # Theorem 1 uses the paper's strict N* (0 when a segment goes untrained in a round: then infinite)
    rhs = theorem1_rhs(F1=2.3, E=3, eta=0.05, Q=len(rounds), L=3.0, N=4, K=K, N_star=strict, G=4.0, tau=tau,
                       sigma2=1.5, delta2=0.7)
    row = table.loc["[cos2p] Theorem 1: (1/Q) sum E||grad F(w_q)||^2"]
    assert row["measured"] == pytest.approx(0.9) and float(row["bound_or_expectation"]) == pytest.approx(rhs)
    assert strict <= n_star
    # eta = 0.05 > 1/(4LE) = 1/36: Theorem 1's step-size condition fails, so its bound is not judged
    assert row["holds"] is None
    assert row["note"].startswith("not applicable: step size eta <= 1/(4LE): measured 0.05 against required 0.02778")
    assert "server Top-1" in table.index and "client Top-1 (size-weighted)" in table.index
