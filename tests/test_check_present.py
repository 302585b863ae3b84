"""`fedsim check` reads well: a folder of runs checked run by run in one grouped table that fits 100
columns, only the rows that apply, numbers for people, skipped rows that say how to get them."""
from __future__ import annotations

import pandas as pd

from analysis.present import WIDTH, Row, check_folder, fmt_number, render, rows_of
from fedsim.cli import main
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping


def test_numbers_for_people():
    assert fmt_number(3396.0) == "3396"
    assert fmt_number(3.0e13) == "3e+13"
    assert fmt_number(0.123456) == "0.1235"
    assert fmt_number(float("inf")) == "inf"
    assert fmt_number(10964800, "bytes") == "11 MB" and fmt_number(10964800.0) == "10,964,800"
    assert fmt_number(None) == "" and fmt_number(float("nan")) == ""


def test_a_loose_bound_says_so_and_skipped_rows_say_how():
    table = pd.DataFrame([
        {"quantity": "[local_sgd] Theorem 1: (1/T) sum E||grad f(x_t)||^2", "measured": 20.0,
         "bound_or_expectation": 3e13, "holds": True, "note": "ratio measured/bound = 6.8e-13", "role": "bound"},
        {"quantity": "[local_sgd] step size eta_l <= 1/(8LK)", "measured": None, "bound_or_expectation": None,
         "holds": None, "note": "not evaluated: missing eta_l, K, L"},
        {"quantity": "RU (Co-S2P Eq. 17)", "measured": 0.5, "bound_or_expectation": None, "holds": None, "note": ""},
        {"quantity": "updates applied", "measured": 3396.0, "bound_or_expectation": None, "holds": None, "note": ""},
    ])
    rows = {r.quantity: r for r in rows_of(table, run="r", theorems=["local_sgd"], probed=False)}
    assert "RU (Co-S2P Eq. 17)" not in rows  # a Co-S²P quantity is not shown for FedAvg
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].verdict == "holds, loose"
    assert rows["Theorem 1: (1/T) sum E||grad f(x_t)||^2"].bound == "3e+13"
    skipped = rows["step size eta_l <= 1/(8LK)"]
    assert skipped.verdict == "not evaluated" and "output.checkpoints" in skipped.note
    assert rows["updates applied"].measured == "3396"
    cos2p = {r.quantity for r in rows_of(table, run="r", theorems=["cos2p"], probed=False)}
    assert "RU (Co-S2P Eq. 17)" in cos2p


def test_check_a_folder_of_runs(tiny, tmp_path, capsys):
    """The default `fedsim run` of two algorithms makes one sub-folder each: checked together."""
    tiny["algorithm"] = [{"name": "fedavg", "clients_per_round": 3}, {"name": "fedbuff"}]
    run_scenario(scenario_from_mapping(tiny), tmp_path / "run", progress=False)
    assert main(["check", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, max(lines, key=len)
    assert "2 runs" in lines[0]
    assert any(line.startswith("fedavg ") for line in lines) and any(line.startswith("fedbuff ") for line in lines)
    assert "RU (Co-S2P" not in out and "tau_bar" not in out and "e+0" not in out
    assert "Trace consistency" in out and "Theorem 1" in out and "output.checkpoints" in out
    assert "  fedavg: ok: finished at" in out and "  fedbuff: ok: finished at" in out  # each run's status first
    combined = pd.read_csv(tmp_path / "run" / "check" / "checks.csv")
    assert set(combined["run"]) == {"fedavg", "fedbuff"}
    assert {"quantity", "measured", "bound_or_expectation", "holds", "note"} <= set(combined.columns)
    # seed-*/ folders nest one level deeper
    _, table = check_folder(tmp_path, figures=False, progress=False)
    assert set(table["run"]) == {"run/fedavg", "run/fedbuff"}


def test_check_a_folder_without_runs(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedsim: error: run_dir: no run in")


def test_long_run_names_are_printed_whole(monkeypatch):
    """Sweep points differ at the end of their folder name: the whole name is printed, on its own line when
    it does not fit the run column."""
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = [Row(f"sweep-default/channel.uplink.mbps={v}/fedavg", "run", "final accuracy", "", "0.9", "", "", "")
            for v in ("0.5", "8")]
    lines = render(rows, several=True, titles={"run": "Run"}).splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert "sweep-default/channel.uplink.mbps=0.5/fedavg" in lines and "sweep-default/channel.uplink.mbps=8/fedavg" in lines
