"""A run whose report (or comparison) fails to build says so: its summary's status is not ``ok``, the exit
code is not 0, and what was written before the failure is kept.  (A single figure fails alone, the run
stays ``ok``: tests/test_degenerate_figures.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

import fedsim.output.report as report
from fedsim.cli import EXIT_INTERNAL, main
from fedsim.runner import OUTPUTS_ERROR_FILE, OUTPUTS_FAILED


def _broken_report(*args, **kwargs):
    raise ValueError("The truth value of an array with more than one element is ambiguous")


def _write(tmp_path: Path, mapping: dict) -> Path:
    mapping = {**mapping, "output": {"figures": True}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(mapping))
    return path


def _here(monkeypatch) -> None:
    """Build the outputs in this process, where the patches apply (the second process that `fedsim run`
    draws in is tested in test_output_process.py)."""
    monkeypatch.setattr("fedsim.output.process.usable_cores", lambda: 1)


def test_a_failed_report_is_not_ok(tiny, tmp_path, capsys, monkeypatch):
    _here(monkeypatch)
    monkeypatch.setattr(report, "html_report", _broken_report)
    out = tmp_path / "run"
    code = main(["run", str(_write(tmp_path, tiny)), "--out", str(out), "--quiet"])
    stdout, err = capsys.readouterr()
    assert code == EXIT_INTERNAL, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == OUTPUTS_FAILED
    assert "ValueError: The truth value" in summary["outputs_error"] and "figures and report" in summary["outputs_error"]
    assert summary["stop_reason"] and summary["final_accuracy"] is not None  # the simulation's own numbers stay
    # what was built before the report failed is kept, and the traceback is beside it
    assert (out / "metrics.csv").exists() and (out / "trace.jsonl").exists() and list(out.glob("*.svg"))
    assert "Traceback" in (out / OUTPUTS_ERROR_FILE).read_text()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedsim: internal error: fedavg: figures and report: ValueError"), err
    assert "outputs_failed" in stdout  # the printed summary says it too


def test_a_failed_comparison_is_not_ok(tiny, tmp_path, capsys, monkeypatch):
    tiny["algorithm"] = [{"name": "fedavg", "clients_per_round": 3}, {"name": "fedbuff"}]
    _here(monkeypatch)
    monkeypatch.setattr(report, "comparison_figure", _broken_report)
    out = tmp_path / "run"
    code = main(["run", str(_write(tmp_path, tiny)), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL, err
    top = json.loads((out / "summary.json").read_text())
    assert [s["status"] for s in top] == [OUTPUTS_FAILED] * 2
    assert all("comparison figures and report: ValueError" in s["outputs_error"] for s in top)
    # each variant's own outputs were built: their summaries stay ok
    for label in ("fedavg", "fedbuff"):
        assert json.loads((out / label / "summary.json").read_text())["status"] == "ok"
        assert (out / label / "report.html").exists()


def test_outputs_that_build_leave_the_status_ok(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", str(_write(tmp_path, tiny)), "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and "outputs_error" not in summary and "figures_missing" not in summary
    assert (out / "report.html").exists() and not (out / OUTPUTS_ERROR_FILE).exists()
    assert not (out / "figures_error.txt").exists() and "Figures not drawn" not in (out / "report.html").read_text()
