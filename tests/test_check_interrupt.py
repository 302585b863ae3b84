"""Ctrl-C or SIGTERM stops `fedsim check --jobs 2` at once: within 5 s, with its one line and exit code,
and no probe worker left running."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from conftest import TINY, fedsim_process, signal_and_wait

from fedsim import scenario_from_mapping
from fedsim.runner import run_scenario


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A run with many checkpoints of an MLP, so that probing them takes several seconds."""
    run = tmp_path_factory.mktemp("checkpointed")
    data = {**TINY, "model": {"name": "mlp"}, "stop": {"max_versions": 80},
            "eval": {"every_versions": 40}, "output": {"figures": False, "checkpoints": 1}}
    run_scenario(scenario_from_mapping(data), run, progress=False)
    return run


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads child processes from /proc")
@pytest.mark.parametrize("signum, group, code, line", [
    (signal.SIGINT, True, 130, "fedsim: interrupted; outputs written so far are kept"),
    (signal.SIGTERM, False, 143, "fedsim: terminated (SIGTERM); outputs written so far are kept"),
])
def test_a_signal_stops_a_parallel_check_and_its_workers(checkpointed, signum, group, code, line):
    with fedsim_process(["check", str(checkpointed), "--jobs", "2"]) as proc:
        t0 = time.monotonic()
        while not (workers := _children(proc.pid)):  # the probe worker is being started: probing has begun
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 120, "no probe worker started"
            time.sleep(0.02)
        time.sleep(0.5)
        assert proc.poll() is None, "the check ended before the signal; give it more checkpoints"
        _, stderr, took = signal_and_wait(proc, signum, group=group)
    assert proc.returncode == code, stderr[-2000:]
    assert took < 5.0, f"stopped {took:.2f} s after the signal"
    assert stderr.strip().splitlines()[-1] == line and "Traceback" not in stderr, stderr[-2000:]
    deadline = time.monotonic() + 5
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a probe worker outlived the check"
    assert not (checkpointed / "probes.csv").exists()  # nothing half-measured is written


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads child processes from /proc")
def test_a_killed_check_takes_its_workers_with_it(checkpointed):
    """SIGKILL leaves the check no chance to stop its workers: each watches it and ends with it."""
    with fedsim_process(["check", str(checkpointed), "--jobs", "2"]) as proc:
        t0 = time.monotonic()
        while not (workers := _children(proc.pid)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - t0 < 120, "no probe worker started"
            time.sleep(0.02)
        time.sleep(0.5)
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a probe worker outlived the killed check"
