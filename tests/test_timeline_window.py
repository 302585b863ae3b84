"""The timeline can zoom on a window of virtual time (``output.timeline_window``) and show more clients."""
from __future__ import annotations

import pytest

from fedsim import report
from fedsim.errors import ConfigError
from fedsim.runner import run_scenario
from fedsim import load_scenario, scenario_from_mapping

TINY = {"data": {"num_clients": 6}, "train": {"local_steps": 2},
        "algorithm": {"name": "fedavg", "clients_per_round": 3}, "stop": {"max_versions": 3}}


def test_window_and_client_count_reach_the_timeline(tmp_path, monkeypatch):
    seen = {}
    real = report.timeline_figure

    def spy(trace, path, **kw):
        seen.update(kw)
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


def test_timeline_draws_one_collection_per_row_and_phase(tmp_path, monkeypatch):
    """Thousands of server requests and transfers become a handful of drawing calls (one per row and
    phase), and a request's queueing lands on its client's row: a call per request took minutes on a
    trace of 10^5 server requests."""
    import matplotlib.axes
    import numpy as np
    import pandas as pd

    n = 4000
    t = np.arange(n, dtype=float)
    rows = [{"t": s + 0.5, "kind": "upload", "client": int(s) % 3, "start": s, "end": s + 0.5, "wait": None}
            for s in t]
    rows += [{"t": s + 0.9, "kind": "server", "client": int(s) % 3, "start": s + 0.6, "end": s + 0.9,
              "wait": 0.1 if s % 2 else 0.0} for s in t]
    calls = []
    real = matplotlib.axes.Axes.broken_barh
    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh",
                        lambda self, xr, yr, **kw: calls.append((len(list(xr)), yr, kw["facecolors"])) or real(self, xr, yr, **kw))
    report.timeline_figure(pd.DataFrame(rows), tmp_path / "t.png", max_bars=10**9)
    assert (tmp_path / "t.png").stat().st_size > 0
    assert len(calls) == 3 + 1 + 3  # uploads of 3 clients, the server row, queue waits of 3 clients
    by_colour = {}
    for count, (y, _), colour in calls:
        by_colour.setdefault(colour, []).append((round(y + 0.4), count))
    assert sum(c for _, c in by_colour[report.PHASE_COLOURS["upload"]]) == n  # 0.1 s apart: nothing merged
    assert sorted(y for y, _ in by_colour[report.PHASE_COLOURS["wait"]]) == [1, 2, 3]
    assert sum(c for _, c in by_colour[report.PHASE_COLOURS["wait"]]) == n // 2
