"""check_run on hand-made run directories."""
import json

import pandas as pd
import pytest
import yaml

from analysis.report import check_run
from fedsim.errors import ConfigError
from fedsim.sim.trace import Trace


def _write_run(path, algorithm, extra=None, out_of_order=False, theorems=("local_sgd",), status="ok"):
    tr = Trace(path / "trace.jsonl")
    # Two synchronous rounds, two clients; client 1 is stale by one version in round 2.
    tr.emit(1.0, "download", client=0, start=0.0, end=1.0, bytes=400, wait=0.0, version=0)
    tr.emit(1.0, "download", client=1, start=0.0, end=1.0, bytes=400, wait=0.0, version=0)
    tr.emit(3.0, "compute", client=0, start=1.0, end=3.0, flops=1e6, steps=10, what="train")
    tr.emit(4.0, "upload", client=0, start=3.0, end=4.0, bytes=400, wait=0.0)
    tr.emit(4.0, "apply", client=0, base_version=0, version=1, staleness=0, staleness_s=4.0, weight=1.0, round=1)
    tr.emit(4.0, "round", round=1, start=0.0, end=4.0, clients=[0], dropped=0)
    tr.emit(4.0, "eval", version=1, round=1, accuracy=0.4, loss=1.2)
    tr.emit(8.0, "compute", client=1, start=1.0, end=8.0, flops=1e6, steps=10, what="train")
    tr.emit(9.0, "upload", client=1, start=8.0, end=9.0, bytes=400, wait=0.0)
    tr.emit(9.0, "apply", client=1, base_version=0, version=2, staleness=1, staleness_s=9.0, weight=1.0, round=2)
    if out_of_order:
        tr.emit(5.0, "eval", version=2, round=2, accuracy=0.6, loss=0.9)
    tr.emit(9.0, "round", round=2, start=4.0, end=9.0, clients=[1], dropped=0)
    tr.close()
    pd.DataFrame({"t": [4.0, 9.0], "round": [1, 2], "version": [1, 2], "accuracy": [0.4, 0.6],
                  "loss": [1.2, 0.9]}).to_csv(path / "metrics.csv", index=False)
    (path / "scenario.yaml").write_text(yaml.safe_dump({"algorithm": algorithm, "stop": {"target_accuracy": 0.5},
                                                        "data": {"num_clients": 2},
                                                        "train": {"lr": 0.025, "local_steps": 5}}))
    if theorems is not None:
        (path / "summary.json").write_text(json.dumps({"status": status, "stop_reason": "max_versions", "versions": 2,
                                                       "virtual_time_s": 9.0, "dropped": 0,
                                                       "theorems": list(theorems)}))
    if extra is not None:
        (path / "measured.json").write_text(json.dumps(extra))


def test_check_run_fedavg_with_measured_constants(tmp_path):
    measured = {"L": 1.0, "sigma2": 0.05, "zeta2": 2.0, "F0_minus_Fstar": 1.0, "avg_grad_norm_sq": 0.3,
                "params": {"m": 2, "T": 2}}
    _write_run(tmp_path, {"name": "fedavg", "lr": 0.025, "local": {"eta_l": 0.025, "K": 5}}, measured)
    table = check_run(tmp_path)
    assert list(table.columns) == ["quantity", "measured", "bound_or_expectation", "holds", "note", "role", "verdict",
                                   "provenance"]
    row = table.set_index("quantity")
    assert row.loc["staleness max (versions)", "measured"] == 1
    assert row.loc["tau_bar = mean_q tau_q^2 (Co-S2P)", "measured"] == pytest.approx(0.5)   # (0 + 1)/2
    assert row.loc["N* strict (min over rounds, segments)", "measured"] == 1
    assert row.loc["final accuracy", "measured"] == pytest.approx(0.6)
    assert row.loc["time to accuracy 0.5 (s)", "measured"] == 9.0
    assert row.loc["trace: event times non-decreasing", "holds"]
    # RU: one client per round -> 1.0
    assert row.loc["RU (Co-S2P Eq. 17)", "measured"] == pytest.approx(1.0)
    thm = row.loc["[local_sgd] Theorem 1: (1/T) sum E||grad f(x_t)||^2"]
    # Bound at T=2 from the same constants: c = 0.265625, first = 1/(c*0.025*5*2), Phi as in the theory tests.
    c = 0.265625
    assert thm["bound_or_expectation"] == pytest.approx(1 / (c * 0.025 * 5 * 2) + (0.0078125 * 60.05 + 0.025 * 0.05 / 4) / c)
    # one client of two per round: Theorem 1 (full participation) is not applicable, said with its numbers
    assert thm["holds"] is None
    assert thm["note"].startswith("not applicable: full participation: every client every round (n = m): "
                                  "measured 1 against required 2")
    for name in ("staleness_hist.png", "n_star_per_round.png", "accuracy_vs_time.png", "checks.csv"):
        assert (tmp_path / "check" / name).stat().st_size > 0


def test_check_run_flags_out_of_order_trace_and_missing_constants(tmp_path):
    _write_run(tmp_path, "co-s2p", out_of_order=True, theorems=("cos2p",))
    table = check_run(tmp_path, figures=False).set_index("quantity")
    assert not table.loc["trace: event times non-decreasing", "holds"]
    thm = table.loc["[cos2p] Theorem 1: (1/Q) sum E||grad F(w_q)||^2"]
    assert thm["holds"] is None and "missing" in thm["note"]
    n_star = table.loc["[cos2p] N* (strict, as Theorem 1 uses it)"]  # the strict N*, a note, never "met"
    assert n_star["measured"] > 0 and n_star["role"] == "note"


def test_a_name_never_decides_the_theorem(tmp_path):
    """Named like GAS, declared nothing: no theorem row, one line saying so; no summary: no learning verdict."""
    _write_run(tmp_path, "gas-like", None, theorems=())
    table = check_run(tmp_path, figures=False, progress=False)
    assert not table["quantity"].str.startswith("[").any()
    assert "no theorem declared" in set(table["quantity"])
    (tmp_path / "summary.json").unlink()
    table = check_run(tmp_path, figures=False, progress=False).set_index("quantity")
    assert "run status: not recorded" in table.index and "final accuracy" not in table.index


def test_errors(tmp_path):
    with pytest.raises(ConfigError, match="trace.jsonl"):
        check_run(tmp_path)
