"""The timeline can zoom on a window of virtual time (``output.timeline_window``) and show more clients."""
from __future__ import annotations

import pytest

from fedsim import report
from fedsim.errors import ConfigError
from fedsim.runner import run_scenario
from fedsim.scenario import load_scenario, scenario_from_mapping

TINY = {"data": {"num_clients": 6}, "train": {"local_steps": 2},
        "algorithm": {"name": "fedavg", "clients_per_round": 3}, "stop": {"max_versions": 3}}


def test_window_and_client_count_reach_the_timeline(tmp_path, monkeypatch):
    seen = {}
    real = report.timeline_figure

    def spy(trace, path, **kw):
        seen.update(kw, t_max=float(trace["t"].max()))
        return real(trace, path, **kw)

    monkeypatch.setattr(report, "timeline_figure", spy)
    sc = scenario_from_mapping({**TINY, "output": {"timeline_window": [0.25, 0.5], "timeline_clients": 4}})
    run_scenario(sc, tmp_path / "zoom", progress=False)
    assert (tmp_path / "zoom" / "timeline.png").exists()
    assert (seen["since"], seen["until"], seen["max_clients"]) == (0.25, 0.5, 4)
    seen.clear()
    report.run_figures(tmp_path / "zoom")  # default: the whole run
    assert seen["since"] == 0.0 and seen["until"] is None


@pytest.mark.parametrize("window", ["[5,1]", "[1]", "[-1,2]"])
def test_bad_window_is_one_clear_error(window):
    with pytest.raises(ConfigError, match="output.timeline_window"):
        load_scenario("default", [f"output.timeline_window={window}"])
