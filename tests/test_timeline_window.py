"""The timeline can zoom on a window of virtual time (``output.timeline_window``) and show more clients."""
from __future__ import annotations

import pytest

from fedsim.output import report, svg_figures
from fedsim.errors import ConfigError
from fedsim.runner import run_scenario
from fedsim import load_scenario, scenario_from_mapping

TINY = {"data": {"num_clients": 6}, "train": {"local_steps": 2},
        "algorithm": {"name": "fedavg", "clients_per_round": 3}, "stop": {"max_versions": 3}}


def test_window_and_client_count_reach_the_timeline(tmp_path, monkeypatch):
    seen = {}
    real = svg_figures.timeline_svg

    def spy(trace, path, **kw):
        seen.update(kw)
        return real(trace, path, **kw)

    monkeypatch.setattr(svg_figures, "timeline_svg", spy)
    sc = scenario_from_mapping({**TINY, "output": {"timeline_window": [0.25, 0.5], "timeline_clients": 4}})
    run_scenario(sc, tmp_path / "zoom", progress=False)
    assert (tmp_path / "zoom" / "timeline.svg").exists()
    assert (seen["since"], seen["until"], seen["max_clients"]) == (0.25, 0.5, 4)
    seen.clear()
    report.run_figures(tmp_path / "zoom")  # default: the whole run
    assert seen["since"] == 0.0 and seen["until"] is None


@pytest.mark.parametrize("window", ["[5,1]", "[1]", "[-1,2]"])
def test_bad_window_is_one_clear_error(window):
    with pytest.raises(ConfigError, match="output.timeline_window"):
        load_scenario("default", [f"output.timeline_window={window}"])


def test_timeline_is_one_collection_and_queue_waits_land_on_their_clients_rows(tmp_path, monkeypatch):
    """Thousands of server requests and transfers become one collection drawn in one call (a call per
    request took minutes on a trace of 10^5 server requests), and a request's queueing lands on its
    client's row."""
    import matplotlib.axes
    import numpy as np
    import pandas as pd

    from fedsim.output import digest as dg

    n = 4000
    t = np.arange(n, dtype=float)
    rows = [{"t": s + 2.5, "kind": "upload", "client": int(s) % 3, "start": s, "end": s + 2.5, "wait": None}
            for s in t]  # each client uploading 5/6 of the time, the server busy 0.8 of it
    rows += [{"t": s + 0.9, "kind": "server", "client": int(s) % 3, "start": s + 0.1, "end": s + 0.9,
              "wait": 0.1 if s % 2 else 0.0} for s in t]
    calls = []
    real = matplotlib.axes.Axes.add_collection
    monkeypatch.setattr(matplotlib.axes.Axes, "add_collection", lambda self, c, **kw: calls.append(c) or real(self, c, **kw))
    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh", None)
    report.timeline_figure(pd.DataFrame(rows), tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    assert len(calls) == 1  # the server's row and 3 clients' in one collection
    rows_drawn = {round(float(p.vertices[:, 1].mean())) for p in calls[0].get_paths()}
    assert rows_drawn == {0, 1, 2, 3}
    d = dg.digest_trace(pd.DataFrame(rows))
    cover = d.timeline_cover()
    assert sorted(c for k, c in cover if k == "wait") == [0, 1, 2]
    assert sum(h.sum() for (k, _), h in cover.items() if k == "wait") == pytest.approx(0.1 * n / 2)
    assert cover[("server", dg.SERVER)].sum() == pytest.approx(0.8 * n)
