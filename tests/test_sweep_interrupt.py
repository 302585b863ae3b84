"""Ctrl-C or SIGTERM stops a parallel sweep at once: points not started are cancelled, running ones are
interrupted (their traces kept, their summaries say so), the process exits within 5 s (130 for SIGINT,
143 for SIGTERM), and ``--resume`` then completes the sweep to the sweep.csv of an uninterrupted one."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import yaml
from conftest import fedsim_process, signal_and_wait

from fedsim.cli import main
from fedsim.sweep import run_sweep
GRID = ["channel.uplink.mbps=1,2,4"]  # three points on two processes: one is pending when the signal comes


def _scenario(tmp_path: Path, tiny: dict) -> Path:
    """Runs of a few seconds each (long enough to be interrupted), their trace written early."""
    tiny = {**tiny, "algorithm": {"name": "fedasync", "concurrency": 3}, "stop": {"max_versions": 150},
            "eval": {"every_versions": 50}, "output": {"figures": False, "flush_every": 16}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny))
    return path


def _lines(out: Path) -> dict[str, int]:
    """Trace records written so far, per point."""
    return {p.parent.name: p.read_text().count("\n") for p in out.glob("*/trace.jsonl")}


def _interrupt(scenario: Path, out: Path, signum: int,
               group: bool) -> tuple[subprocess.CompletedProcess, float, dict[str, int]]:
    """Start the sweep in its own process group, wait until a point runs, send ``signum`` to the whole group
    (``group``: as a terminal's Ctrl-C reaches the workers too) or to the sweep's process alone (``kill PID``).
    Also returns each point's trace length when the signal was sent."""
    with fedsim_process(["sweep", str(scenario), *GRID, "--jobs", "2", "--out", str(out), "--quiet"]) as proc:
        t0 = time.monotonic()
        while sum((before := _lines(out)).values()) < 20:  # a point is running
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 240, "no point started"
            time.sleep(0.05)
        stdout, stderr, took = signal_and_wait(proc, signum, group=group)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), took, before


def _summaries(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/summary.json")}


def test_sigint_stops_a_parallel_sweep_and_resume_completes_it(tmp_path, tiny, capsys):
    scenario = _scenario(tmp_path, tiny)
    out = tmp_path / "interrupted"
    done, took, before = _interrupt(scenario, out, signal.SIGINT, group=True)
    assert done.returncode == 130, done.stderr[-2000:]
    assert took < 5.0, f"stopped {took:.2f} s after SIGINT"
    assert done.stderr.strip().splitlines()[-1] == "fedsim: interrupted; outputs written so far are kept"
    assert "Traceback" not in done.stderr
    summaries = _summaries(out)
    assert any(s["status"] == "interrupted" for s in summaries.values()), summaries
    assert not all(s["status"] == "ok" for s in summaries.values()) or len(summaries) < 3
    interrupted = [name for name, s in summaries.items() if s["status"] == "interrupted"]
    assert all(summaries[name]["stop_reason"] == "interrupted by the user" for name in interrupted)
    # an interrupted point keeps every record written before the signal (and those buffered then); a point
    # interrupted while still setting up may have written none yet, so the check is against the count at
    # the signal, and at least one interrupted point had records then
    after = _lines(out)
    assert all(after[name] >= before.get(name, 0) for name in interrupted), (before, after)
    assert any(before.get(name, 0) > 0 for name in interrupted), (before, summaries)
    assert not (out / "sweep.csv").exists()
    # --resume runs what did not finish; the table is the uninterrupted sweep's
    assert main(["sweep", str(scenario), *GRID, "--out", str(out), "--quiet", "--resume"]) == 0
    capsys.readouterr()
    run_sweep(str(scenario), GRID, tmp_path / "whole", target=None, progress=False)
    pd.testing.assert_frame_equal(pd.read_csv(out / "sweep.csv"), pd.read_csv(tmp_path / "whole" / "sweep.csv"))


def test_sigterm_stops_a_parallel_sweep(tmp_path, tiny):
    out = tmp_path / "terminated"
    done, took, _ = _interrupt(_scenario(tmp_path, tiny), out, signal.SIGTERM, group=False)
    assert done.returncode == 143, done.stderr[-2000:]
    assert took < 5.0, f"stopped {took:.2f} s after SIGTERM"
    assert done.stderr.strip().splitlines()[-1] == "fedsim: terminated (SIGTERM); outputs written so far are kept"
    stopped = [s for s in _summaries(out).values() if s["status"] == "interrupted"]
    assert stopped and all(s["stop_reason"] == "terminated (SIGTERM)" for s in stopped)
