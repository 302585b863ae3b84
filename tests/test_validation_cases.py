"""Every bad scenario named in the robustness report: exit 2 and exactly this one line, nothing written.

The lines are the contract a user sees: the full dotted field, the bad value and what is allowed (or the
work estimate and --allow-large).  Numbers that YAML reads as strings (1e300 without a dot) are refused as
the wrong type."""
from __future__ import annotations

import pytest

from fedsim.cli import main

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

CASES = [
    (['default', 'data.partition.labels_per_client=1e300'], "fedsim: error: data.partition.labels_per_client: must be an integer, got '1e300'"),
    (['default', 'train.lr=1e308'], 'fedsim: error: train.lr: got 1e+308 (allowed: finite, in (0, 10^12])'),
    (['default', 'devices.mix=[{profile: jetson-nano, weight: .inf}]'], 'fedsim: error: devices.mix[0].weight: got .inf (allowed: finite, in (0, 10^12])'),
    (['gas', 'channel.uplink.noise_figure_db=1e300'], 'fedsim: error: channel.uplink.noise_figure_db: got 1e+300 (allowed: finite, in [0, 100] dB)'),
    (['default', 'model.name=mlp', 'model.hidden=-3'], 'fedsim: error: model.hidden: got -3 (allowed: an integer in [1, 10^6] units)'),
    (['default', 'model.name=mlp', 'model.hidden=0'], 'fedsim: error: model.hidden: got 0 (allowed: an integer in [1, 10^6] units)'),
    (['default', 'model.width=.inf'], 'fedsim: error: model.width: got .inf (allowed: finite, in (0, 64])'),
    (['default', 'server.efficiency=0'], 'fedsim: error: server.efficiency: got 0.0 (allowed: finite, in (0, 1])'),
    (['default', 'server.efficiency=-0.5'], 'fedsim: error: server.efficiency: got -0.5 (allowed: finite, in (0, 1])'),
    (['default', 'server.efficiency=.nan'], 'fedsim: error: server.efficiency: got .nan (allowed: finite, in (0, 1])'),
    (['default', 'server.workers=1000000000'], 'fedsim: error: server.workers: got 1000000000 (allowed: an integer in [1, 4096])'),
    (['default', 'devices.jitter=.inf'], 'fedsim: error: devices.jitter: got .inf (allowed: finite, in [0, 5])'),
    (['default', 'channel.uplink.mbps=[1, 2, 3]'], 'fedsim: error: channel.uplink.mbps: must be a number or [lo, hi], got [1.0, 2.0, 3.0]'),
    (['default', 'channel.uplink.mbps=.inf'], 'fedsim: error: channel.uplink.mbps: got .inf (allowed: finite, in (0, 10^9] Mbit/s)'),
    (['default', 'network.latency_s=.inf'], 'fedsim: error: network.latency_s: got .inf (allowed: finite, in [0, 10^6] s)'),
    (['gas', 'channel.uplink.tx_power_w=.inf'], 'fedsim: error: channel.uplink.tx_power_w: got .inf (allowed: finite, in (0, 10^6] W)'),
    (['default', 'train.local_steps=100000000000000000000'], 'fedsim: error: train.local_steps: got 100000000000000000000, far too large (allowed: an integer >= 1 steps)'),
    (['fedasync', 'algorithm.concurrency=1000000000'], 'fedsim: error: algorithm.concurrency: 1000000000 parallel slots is absurd for 20 clients (allowed: at most 100,000; --allow-large to run anyway)'),
    (['gas', 'algorithm.local_iterations=1000000000000'], 'fedsim: error: algorithm.local_iterations: the run would take about 300,000,000,000,000 SGD steps (1,000,000,000,000 per task × 300 tasks; allowed without --allow-large: 100,000,000); lower the steps or the stop rules, or pass --allow-large'),
    (['fedasync', 'stop.max_time_s=.inf'], 'fedsim: error: stop.max_time_s: got .inf (allowed: finite, > 0 s)'),
    (['fedasync', 'eval.every_s=1e-9'], 'fedsim: error: eval.every_s: got 1e-09: about 1e+10 evaluations in 10 s of virtual time would dominate the run (allowed: at most 100,000 evaluations, i.e. every_s >= 0.0001)'),
    (['default', 'algorithm.fedavg.deadline_s=0.001'], "fedsim: error: algorithm.fedavg.deadline_s: got 0.001: shorter than the fastest client's task (0.1665 s of download, compute and upload without jitter), so every round would drop every client (allowed: >= 0.1665)"),
    (['gas', 'channel.mobility.kind=random_waypoint', 'channel.mobility.speed_mps=[1, 1e30]'], 'fedsim: error: channel.mobility.speed_mps[1]: got 1e+30 (allowed: finite, in (0, 1000] m/s)'),
    (['default', 'stop.target_accuracy=2'], 'fedsim: error: stop.target_accuracy: got 2.0 (allowed: finite, in (0, 1])'),
]


@pytest.mark.parametrize("args, line", CASES, ids=[" ".join(a[1:])[:60] for a, _ in CASES])
def test_bad_scenario_gives_exactly_this_line(tmp_path, capsys, args, line):
    out = tmp_path / "run"
    code = main(["run", *args, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == line
    assert not out.exists()  # refused before anything was written
