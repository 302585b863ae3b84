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

    # the same figure broken, the run's outputs built again: recorded as missing, the earlier build's file
    # removed (never shown as this build's), the others drawn
    from fedsim.output.process import build_run_outputs

    figures.register_run_figure("clients_seen", ["clients_seen.png"], ["digest"], draw_broken)
    assert [f.name for f in figures.run_figures_registered()].count("clients_seen") == 1  # replaced in place
    line = "ZeroDivisionError: deliberately broken figure"
    assert build_run_outputs(str(out), None, 30, None) == {"clients_seen": line}
    assert not (out / "clients_seen.png").exists()
    assert "deliberately broken figure" in (out / "figures_error.txt").read_text()
    assert {"accuracy_vs_time.svg", "timeline.svg", "link_rates.svg", "server_queue.svg", "energy.svg"} == {
        p.name for p in out.glob("*.svg")}
    page = (out / "report.html").read_text(encoding="utf-8")
    assert f"<b>clients_seen</b>: {line}" in page and "<h3>clients seen</h3>" not in page
    assert page.count("data:image/svg+xml;base64,") == 5 and "data:image/png;base64," not in page


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


@pytest.mark.fast
def test_two_runs_built_interleaved_in_one_process_each_get_their_own_numbers(tmp_path, registered):
    """No module-global digest: each build holds its own.  Two hand-made runs (one client, four bars; three
    clients, 24 bars) are built step by step in turn; each page and each figure has its own run's numbers,
    and each page equals the page of that run built alone."""
    from test_degenerate_figures import _one_client, _one_rate

    one, three = _one_client(tmp_path), _one_rate(tmp_path)
    a, b = figures.OutputBuild(one), figures.OutputBuild(three)
    a.read("digest")
    b.read("digest")
    report.run_figures(three, build=b, only=["clients_seen"])
    body_a = report.html_report_body(one, a)
    report.run_figures(one, build=a, only=["clients_seen"])
    data_b = report.interactive_data(three, build=b)
    data_a = report.interactive_data(one, build=a)
    report.html_report(three, build=b)
    report.finish_html_report(body_a)
    assert SEEN == [{"clients": [0, 1, 2], "run": "one_rate"}, {"clients": [0], "run": "one_client"}]
    assert (data_a["clients"], data_a["bars_total"]) == ([0], 4)  # download, compute, upload, server
    assert (data_b["clients"], data_b["bars_total"]) == ([0, 1, 2], 24)  # six such tasks
    pages = {run: (run / "report.html").read_bytes() for run in (one, three)}
    assert pages[one] != pages[three]
    for run in (one, three):  # each page is the one its run gets built alone
        assert report.html_report(run).read_bytes() == pages[run]
    # the broken case, a digest shared by both runs (what a module-global cache amounts to): the second
    # run's page would show the first run's client
    assert report.interactive_data(three, build=a)["clients"] == [0]
    # a build is one run's: its digest is the trace it was made for, not the last one read
    assert a.digest is not b.digest and len(a.digest.clients) == 1 and len(b.digest.clients) == 3


@pytest.mark.fast
def test_a_plugins_figures_join_the_registry(monkeypatch):
    """A ``fedsim.plugins`` module's ``run_figures`` are listed after the registered ones (so the second
    process, which loads the plugins, draws them too); a registered name wins over a plugin's."""
    import types

    import fedsim.plugins

    mine = figures.RunFigure("plugin_fig", ("plugin_fig.png",), ("metrics",), lambda inputs, run_dir: None, forked=True)
    clash = figures.RunFigure("timeline", ("other.png",), ("metrics",), lambda inputs, run_dir: None)
    fake = types.SimpleNamespace(run_figures=[mine, clash])
    monkeypatch.setattr(fedsim.plugins, "plugins", lambda: (fake,))
    listed = figures.run_figures_registered()
    assert listed[-1] is mine and figures.run_figure("timeline").files == ("timeline.svg",)
    assert "plugin_fig" in figures.forked_figures() and figures.figure_files()["plugin_fig"] == ("plugin_fig.png",)
    monkeypatch.undo()
    assert figures.run_figure("plugin_fig") is None
