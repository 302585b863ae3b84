"""Shared fixtures: tiny scenarios that run in a fraction of a second."""
from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import signal

import pytest
import torch

torch.set_num_threads(1)
# The interrupt tests send SIGINT to fedsim processes they start, as a terminal's Ctrl-C reaches a
# foreground command.  A suite started as a background job (`cmd &` in a script) inherits an ignored SIGINT,
# and its children would inherit that too and never see the signal; take it back, so they start with
# Python's own Ctrl-C handling, as a command typed at a terminal does.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# generated datasets are cached for this test run only (shared by its tests, nothing left in the user's cache)
_CACHE = tempfile.mkdtemp(prefix="fedsim-test-cache-")
os.environ["FEDSIM_CACHE_DIR"] = _CACHE
# `fedsim run` draws its figures in the run's own process here: the two test workers use both cores, and a
# second process per run would only add to them (tests/test_output_process.py turns it back on)
os.environ["FEDSIM_OUTPUT_PROCESS"] = "0"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "data": {"name": "digits", "num_clients": 6, "partition": {"method": "iid"}},
    "model": {"name": "logreg"},
    "train": {"lr": 0.1, "batch_size": 16, "local_steps": 3},
    "devices": {"mix": [{"profile": "jetson-nano"}, {"profile": "jetson-agx-orin-32gb"}], "jitter": 0.1},
    "channel": {"uplink": {"model": "fixed", "mbps": [1.0, 10.0]}, "downlink": {"model": "fixed", "mbps": 20.0}},
    "network": {"latency_s": 0.01},
    "algorithm": {"name": "fedavg", "clients_per_round": 3},
    "stop": {"max_versions": 4},
    "eval": {"every_versions": 2},
    "output": {"figures": False},
}


@pytest.fixture
def tiny() -> dict[str, Any]:
    """A fresh copy of the tiny scenario mapping, for tests to edit."""
    return copy.deepcopy(TINY)


ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def fedsim_process(args: list[str]) -> Iterator[subprocess.Popen]:
    """``python -m fedsim ARGS`` from this tree, in a process group of its own (so a test can send a
    signal to it and its workers as a terminal's Ctrl-C does); killed with its group if still running."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def signal_and_wait(proc: subprocess.Popen, signum: int, *, group: bool) -> tuple[str, str, float]:
    """Send ``signum`` to ``proc``'s whole group (``group``: a terminal's Ctrl-C) or to it alone (``kill
    PID``) and wait for it; its stdout, its stderr and the seconds it took to end."""
    sent = time.monotonic()
    os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    return stdout, stderr, time.monotonic() - sent
