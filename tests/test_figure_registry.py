"""The run-figure registry (fedsim/output/figures.py): one registration adds a figure to ``fedsim run``'s
outputs, to report.html and to the split of a forked build; a figure that raises is recorded as missing
while the others are drawn; and a build's inputs belong to that build alone."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY

from fedsim.cli import main
from fedsim.output import figures, report
from fedsim.sim.trace import load_trace

SEEN: list[dict[str, Any]] = []


def draw_clients(inputs: figures.OutputBuild, run_dir: Path) -> Path:
    """A test figure: one bar, the number of clients the digest saw."""
    SEEN.append({"clients": sorted(int(c) for c in inputs.digest.clients), "run": run_dir.name})
    fig, ax = report.new_figure(figsize=(2, 2))
    ax.bar([0], [len(inputs.digest.clients)])
    p = run_dir / "clients_seen.png"
    report.save_figure(fig, p)
    return p


def draw_broken(inputs: figures.OutputBuild, run_dir: Path) -> Path:
    (run_dir / "clients_seen.png").write_bytes(b"half-written")
    raise ZeroDivisionError("deliberately broken figure")


@pytest.fixture
def registered():
    """Register the test figure (in one place), and take it out again."""
    SEEN.clear()
    entry = figures.register_run_figure("clients_seen", ["clients_seen.png"], ["digest"], draw_clients, forked=True)
    try:
        yield entry
    finally:
        figures.unregister_run_figure("clients_seen")


def _run(tmp_path: Path, capsys: Any) -> tuple[int, str, Path]:
    out = tmp_path / "run"
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "output": {"figures": True}}), encoding="utf-8")
    code = main(["run", str(tmp_path / "tiny.yaml"), "--out", str(out), "--quiet"])
    return code, capsys.readouterr().err, out


def test_a_figure_registered_in_one_place_is_drawn_listed_and_fails_alone(tmp_path, capsys, registered):
    assert "clients_seen" in figures.forked_figures()  # the fork's split derives from the entry
    assert figures.figure_files()["clients_seen"] == ("clients_seen.png",)
    code, err, out = _run(tmp_path, capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and "figures_missing" not in summary
    # drawn from the run's own digest: the clients the trace names
    trace = load_trace(out)
    assert SEEN == [{"clients": sorted(int(c) for c in trace["client"].dropna().unique()), "run": "run"}]
    png = (out / "clients_seen.png").read_bytes()
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<h3>clients seen</h3><img alt='clients_seen.png' " in page
    assert base64.b64encode(png).decode("ascii") in page

    # the same figure broken: recorded as missing, its half-written file removed, the others drawn
    figures.register_run_figure("clients_seen", ["clients_seen.png"], ["digest"], draw_broken)
    assert [f.name for f in figures.run_figures_registered()].count("clients_seen") == 1  # replaced in place
    (tmp_path / "again").mkdir()
    code, err, out = _run(tmp_path / "again", capsys)
    assert code == 0, err
    line = "ZeroDivisionError: deliberately broken figure"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["figures_missing"] == {"clients_seen": line}
    assert f"figures not drawn: clients_seen ({line})" in err
    assert not (out / "clients_seen.png").exists()
    assert {"accuracy_vs_time.png", "timeline.png", "link_rates.png", "server_queue.png", "energy.png"} <= {
        p.name for p in out.glob("*.png")}
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"<b>clients_seen</b>: {line}" in page and "<h3>clients seen</h3>" not in page
    assert page.count("data:image/png;base64,") == 5


@pytest.mark.fast
def test_a_figure_is_drawn_only_when_the_run_has_what_it_reads(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("t,version,accuracy,loss\n1.0,1,0.5,1.0\n", encoding="utf-8")
    drawn: list[str] = []

    def note(name: str) -> Any:
        def draw(inputs: figures.OutputBuild, run_dir: Path) -> None:
            drawn.append(name)
        return draw

    figures.register_run_figure("needs_energy", ["e.png"], ["energy"], note("needs_energy"))
    figures.register_run_figure("needs_metrics", ["m.png"], ["metrics"], note("needs_metrics"))
    try:
        report.run_figures(run, only=["needs_energy", "needs_metrics", "topology"])
    finally:
        figures.unregister_run_figure("needs_energy")
        figures.unregister_run_figure("needs_metrics")
    assert drawn == ["needs_metrics"]  # no energy.csv, no topology handed over
    assert figures.run_figure("needs_metrics") is None  # unregistered


@pytest.mark.fast
def test_a_figure_must_say_what_it_reads_and_writes():
    with pytest.raises(ValueError, match="reads \\['weather'\\]"):
        figures.RunFigure("bad", ("bad.png",), ("weather",), lambda inputs, run_dir: None)
    with pytest.raises(ValueError, match="names no file"):
        figures.RunFigure("bad", (), ("metrics",), lambda inputs, run_dir: None)
    # the built-in figures, each in one entry; the forked half is the registry's choice
    assert [f.name for f in figures.run_figures_registered()][:7] == [
        "topology", "accuracy", "timeline", "link_rates", "server_queue", "submodel_heatmap", "energy"]
    assert figures.forked_figures() == ["link_rates", "server_queue", "energy"]
