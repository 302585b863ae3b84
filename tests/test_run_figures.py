"""The run figures a student reads: a busy server queue is binned (and its bins keep the time average),
a server that never queued says so, short compute bars stay visible, active energy gets its own axis."""
from __future__ import annotations

import matplotlib.axes
import numpy as np
import pandas as pd
import pytest

from fedsim.output import report

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _server(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` requests of a single FIFO server: Poisson arrivals, exponential service."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1.0, n))
    service = rng.exponential(0.8, n)
    start, end, free = np.empty(n), np.empty(n), 0.0
    for i in range(n):
        start[i] = max(arrive[i], free)
        end[i] = free = start[i] + service[i]
    return pd.DataFrame({"t": end, "kind": "server", "client": np.arange(n) % 5, "start": start, "end": end,
                         "wait": start - arrive})


def test_binned_queue_keeps_the_time_average_and_the_peaks():
    q = report.queue_length(_server(3000))
    t1 = float(q["t"].max()) + 1.0
    edges, mean, peak = report.binned_queue(q, 0.0, t1, bins=50)
    t, y = q["t"].to_numpy(), q["queue"].to_numpy()
    exact = float(np.sum(y * np.diff(np.append(t, t1))))
    assert float(np.sum(mean * np.diff(edges))) == pytest.approx(exact, rel=1e-9)
    assert (peak >= mean - 1e-12).all()
    for a, b, p in zip(edges[:-1], edges[1:], peak):  # the largest length that holds somewhere in the bin
        inside = y[(t >= a) & (t < b)]
        before = y[t < a][-1:] if (t < a).any() else np.array([0])
        assert p == max(inside.max(initial=0), before.max(initial=0))


def test_busy_queue_is_binned_and_an_idle_one_says_it_never_queued(tmp_path, monkeypatch):
    steps, texts = [], []
    real_step, real_text = matplotlib.axes.Axes.step, matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "step", lambda self, *a, **k: steps.append(1) or real_step(self, *a, **k))
    monkeypatch.setattr(matplotlib.axes.Axes, "text", lambda self, x, y, s, *a, **k: texts.append(s) or
                        real_text(self, x, y, s, *a, **k))
    assert report.server_queue_figure(_server(3000), tmp_path / "busy.png")
    assert not steps and not any("never queued" in t for t in texts)
    idle = _server(30)
    idle["start"] = idle["start"] - idle["wait"]
    idle["wait"] = 0.0
    assert report.server_queue_figure(idle, tmp_path / "idle.png")
    assert steps and any("never queued" in t and "30 requests" in t for t in texts)


def test_short_compute_bars_are_not_widened(tmp_path, monkeypatch):
    """1 ms of compute before each 2.9 s upload: the timeline shows the uploads at their length and the
    compute only where it fills most of a pixel column (nowhere at this scale)."""
    rows = []
    for c in range(3):
        for k in range(5):
            s = 10.0 * k + c
            rows += [{"t": s + 0.1, "kind": "download", "client": c, "start": s, "end": s + 0.1},
                     {"t": s + 0.101, "kind": "compute", "client": c, "start": s + 0.1, "end": s + 0.101},
                     {"t": s + 3, "kind": "upload", "client": c, "start": s + 0.101, "end": s + 3}]
    codes = []
    real = report._timeline_codes
    monkeypatch.setattr(report, "_timeline_codes", lambda *a: codes.append((a, real(*a))) or codes[-1][1])
    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh", None)  # no bar is drawn one by one any more
    trace = pd.DataFrame(rows)
    report.timeline_figure(trace, tmp_path / "t.png")
    assert len(codes) == 1
    (_, _, _, t0, t1, columns), got = codes[0]
    kinds = list(report.PHASE_COLOURS)
    row = got[2]  # client 1 (the server's row is the first)
    per_column = (t1 - t0) / columns
    assert (row == kinds.index("compute")).sum() == 0
    assert (row == kinds.index("upload")).sum() == pytest.approx(5 * 2.899 / per_column, abs=5 * 1.01)
    assert (row == kinds.index("download")).sum() == pytest.approx(5 * 0.1 / per_column, abs=5 * 1.01)


def test_energy_figure_draws_active_energy_on_its_own_axis(tmp_path, monkeypatch):
    energy = pd.DataFrame({"device": [0, 1, 2], "compute_j": [0.5, 0.2, 0.3], "tx_j": [1.0, 0.5, 0.4],
                           "rx_j": [0.0, 0.0, 0.0], "idle_j": [300.0, 200.0, 250.0],
                           "device_class": ["nano", "nano", "orin"]})
    bars = []
    real = matplotlib.axes.Axes.bar
    monkeypatch.setattr(matplotlib.axes.Axes, "bar", lambda self, x, h, **kw: bars.append((id(self), kw["label"], list(h)))
                        or real(self, x, h, **kw))
    assert report.energy_figure(energy, tmp_path / "e.png")
    axes = list(dict.fromkeys(a for a, _, _ in bars))
    assert len(axes) == 2
    right = {label: h for a, label, h in bars if a == axes[1]}
    assert set(right) == {"compute", "transmit", "receive"}  # no idle on the active axis
    assert right["compute"] == pytest.approx([0.7, 0.3]) and right["transmit"] == pytest.approx([1.5, 0.4])


def test_the_run_figures_leave_pyplot_and_its_backend_alone(tmp_path):
    """Importing fedsim's figures and drawing one neither imports pyplot nor picks a backend, so a notebook
    that imports fedsim keeps its own ``plt.show()`` (the figures are made as plain ``Figure`` objects)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, matplotlib\n"
        "before = matplotlib.rcParams._get_backend_or_none()\n"
        "import pandas as pd\n"
        "from pathlib import Path\n"
        "from fedsim.output import report\n"
        f"report.accuracy_figure({{'a': pd.DataFrame({{'t': [0.0, 1.0], 'accuracy': [0.1, 0.5]}})}}, "
        f"Path({str(tmp_path / 'a.png')!r}))\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
        "assert matplotlib.rcParams._get_backend_or_none() == before, matplotlib.rcParams._get_backend_or_none()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "MPLBACKEND": ""})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_save_figure_draws_once_and_writes_the_same_png(tmp_path, monkeypatch):
    """save_figure lays a figure out and draws it once; savefig after a bare tight_layout draws it twice
    (the placeholder layout engine tight_layout leaves asks for a draw before the written one).  The PNG
    is the same either way."""
    from matplotlib.figure import Figure

    from fedsim.output.report import new_figure, save_figure

    def make():
        fig, ax = new_figure(figsize=(6, 4))
        ax.plot([0, 1, 2], [1, 0, 2], label="a line")
        ax.set_xlabel("virtual time (s)")
        ax.set_title("a title long enough to need the layout")
        ax.legend()
        return fig

    draws = []
    real_draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(1), real_draw(self, renderer))[1])
    fig = make()
    fig.tight_layout()
    fig.savefig(tmp_path / "plain.png", dpi=120)
    plain = len(draws)
    draws.clear()
    save_figure(make(), tmp_path / "saved.png")
    assert plain == 2 and len(draws) == 1
    assert (tmp_path / "saved.png").read_bytes() == (tmp_path / "plain.png").read_bytes()
