"""report.html without a browser: numbers with units, links from a multi-algorithm run's page to its
algorithms' pages, the timeline's data one bar per trace interval, and no network resource."""
from __future__ import annotations

import json
import re

from fedsim.output.report import fmt_bytes, fmt_seconds, fmt_summary, html_report, interactive_data
from fedsim.runner import run_scenario
from fedsim import load_scenario
from fedsim.sim.trace import load_trace


def test_summary_numbers_are_written_for_people():
    assert fmt_summary("bytes_up", 10964800) == "10.96 MB" == fmt_bytes(10964800)
    assert fmt_summary("wall_time_s", 12.0743) == "12.1 s"
    assert fmt_summary("virtual_time_s", 0.0123) == "12.3 ms" and fmt_seconds(250e-6) == "250 µs"
    assert fmt_summary("energy_j", 1234.56) == "1,234.6 J" and fmt_summary("status", "ok") == "ok"
    assert fmt_bytes(512) == "512 B" and fmt_summary("bytes_down", None) == ""


def test_multi_algorithm_report_links_its_runs_and_each_has_the_timeline(tmp_path):
    sc = load_scenario("default", ["data.num_clients=4", "data.partition={method: iid}", "model.name=logreg",
                                   "train.systems_only=true", "train.local_steps=2",
                                   "algorithm.fedavg.clients_per_round=4", "stop={max_versions: 3}"])
    run_scenario(sc, tmp_path, progress=False)
    top = (tmp_path / "report.html").read_text()
    assert "href='fedavg/report.html'" in top and "href='fedbuff/report.html'" in top
    page = (tmp_path / "fedbuff" / "report.html").read_text()
    summary = json.loads((tmp_path / "fedbuff" / "summary.json").read_text())
    assert f"<td>{fmt_bytes(summary['bytes_up'])}</td>" in page
    assert not re.search(r"(src|href)=['\"]https?:", page)  # offline: nothing fetched
    data = interactive_data(tmp_path / "fedbuff")
    trace = load_trace(tmp_path / "fedbuff")
    server = trace[trace["kind"] == "server"]
    n = trace["kind"].isin(["download", "compute", "upload", "offline"]).sum() + len(server) + (server["wait"] > 0).sum()
    assert len(data["bars"][0]) == n == data["bars_total"]
    uploads = trace[trace["kind"] == "upload"]
    kinds = data["kinds"]
    got = sorted(b for k, b in zip(data["bars"][1], data["bars"][5]) if kinds[k] == "upload")
    assert got == sorted(uploads["bytes"].tolist())


def test_interactive_timeline_caps_its_bars(tmp_path):
    sc = load_scenario("fedasync", ["data.num_clients=4", "model.name=logreg", "train.systems_only=true",
                                    "stop={max_versions: 20}", "output.figures=false"])
    run_scenario(sc, tmp_path, progress=False)
    data = interactive_data(tmp_path, max_bars=25)
    assert len(data["bars"][0]) <= 25 < data["bars_total"]
    assert data["bars"][2] == sorted(data["bars"][2])  # in time order
    assert "0" in data["tiles"]["exact"]  # the tiles left out are said so, and drawn aggregated
    assert data["agg"]["levels"] and all(len(r) for r in data["agg"]["levels"][0]["rows"])
    assert "held exactly" not in html_report(tmp_path).read_text()  # the page's own cap is far above this run
