"""A run that stops midway keeps what it wrote: a killed run's trace loads, an interrupted run summarises."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fedsim.sim.trace import load_trace

ROOT = Path(__file__).resolve().parents[1]


def _start(out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "fedsim.cli", "run", "fedasync", "stop.max_time_s=100000", "output.flush_every=16",
           "--out", str(out), "--quiet", "--allow-large"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_trace(out: Path, proc: subprocess.Popen, lines: int = 200, timeout: float = 60.0) -> None:
    path = out / "trace.jsonl"
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and path.read_text().count("\n") >= lines:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the run wrote no trace in time")


def test_killed_run_leaves_a_readable_trace(tmp_path):
    proc = _start(tmp_path)
    try:
        _wait_for_trace(tmp_path, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    df = load_trace(tmp_path)
    assert len(df) >= 200
    assert (df["t"].diff().dropna() >= 0).all()


def test_interrupted_run_writes_summary_and_metrics(tmp_path):
    proc = _start(tmp_path)
    try:
        _wait_for_trace(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert (tmp_path / "metrics.csv").exists() and len(load_trace(tmp_path)) > 0
