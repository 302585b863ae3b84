"""The preflight's work estimate counts what the run then does: updates per model version as the loop
aggregates them (split learning's model buffer defaults to the concurrency)."""
from __future__ import annotations

import json

from fedsim import load_scenario
from fedsim.algorithms.gas import GAS
from fedsim.preflight import preflight
from fedsim.runner import run_scenario


def test_split_slots_declare_the_model_buffer_the_loop_uses():
    cfg = GAS.Config(concurrency=7)
    assert cfg.model_buffer is None and GAS.work(cfg).per_version == 7
    assert GAS.work(GAS.Config(concurrency=7, model_buffer=3)).per_version == 3


def test_gas_estimate_covers_the_updates_and_events_of_a_run(tmp_path):
    sc = load_scenario("gas-cell-timing", ["stop.max_versions=3", "output.figures=false"])
    estimate = preflight(sc).events
    [summary] = run_scenario(sc, tmp_path / "run", progress=False)
    assert summary["versions"] == 3 and summary["updates_applied"] == 30  # Q_c = concurrency = 10 per version
    # the order of magnitude the preflight guards with: 4 events per exchange; the run has about 6
    assert summary["trace_events"] / 2 <= estimate <= summary["trace_events"] * 2, (estimate, summary["trace_events"])
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "ok"
