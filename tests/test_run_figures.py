"""The run figures a student reads: a busy server queue is binned (and its bins keep the time average),
a server that never queued says so, short compute bars stay visible, active energy gets its own axis."""
from __future__ import annotations

import matplotlib.axes
import numpy as np
import pandas as pd
import pytest

from fedsim import report


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


def test_short_compute_bars_are_widened_to_be_seen(tmp_path, monkeypatch):
    rows = []
    for c in range(3):
        for k in range(5):
            s = 10.0 * k + c
            rows += [{"t": s + 0.1, "kind": "download", "client": c, "start": s, "end": s + 0.1},
                     {"t": s + 0.101, "kind": "compute", "client": c, "start": s + 0.1, "end": s + 0.101},
                     {"t": s + 3, "kind": "upload", "client": c, "start": s + 0.101, "end": s + 3}]
    calls = []
    real = matplotlib.axes.Axes.broken_barh
    monkeypatch.setattr(matplotlib.axes.Axes, "broken_barh",
                        lambda self, xr, yr, **kw: calls.append((list(xr), kw["facecolors"])) or real(self, xr, yr, **kw))
    trace = pd.DataFrame(rows)
    report.timeline_figure(trace, tmp_path / "t.png")
    pixel = float(trace["t"].max()) / 900
    compute = [w for bars, colour in calls if colour == report.PHASE_COLOURS["compute"] for _, w in bars]
    assert len(compute) == 15 and min(compute) >= report.MIN_BAR_PX * pixel > 0.001 * 10
    assert calls[-1][1] == report.PHASE_COLOURS["compute"]  # drawn last, on top of its neighbours
    uploads = [w for bars, colour in calls if colour == report.PHASE_COLOURS["upload"] for _, w in bars]
    assert uploads == pytest.approx([2.899] * 15)  # long bars keep their length


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
