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

# One BLAS thread for numpy and scipy in every test process and the processes the tests start (set before
# numpy is first imported, below): the two test workers already use both cores, and OpenBLAS's extra
# threads only wait for a core, spinning: a loop of 500 x 1500 SVDs took 23 times the CPU time with its
# default threads as with one while the two cores were busy (the EmbracingFL recipe's SVCCA is such a loop).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

torch.set_num_threads(1)
# The interrupt tests send SIGINT to fedsim processes they start, as a terminal's Ctrl-C reaches a
# foreground command.  A suite started as a background job (`cmd &` in a script) inherits an ignored SIGINT,
# and its children would inherit that too and never see the signal; take it back, so they start with
# Python's own Ctrl-C handling, as a command typed at a terminal does.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# generated datasets are cached for this test run only (shared by its tests, nothing left in the user's cache);
# the test workers inherit the folder from the process that starts them, so a dataset is generated once per
# run, not once per worker (MNIST-1D: about 6 s of CPU), and only the process that made the folder removes it
_OWN_CACHE = "FEDSIM_TEST_CACHE" not in os.environ
if _OWN_CACHE:
    os.environ["FEDSIM_TEST_CACHE"] = tempfile.mkdtemp(prefix="fedsim-test-cache-")
_CACHE = os.environ["FEDSIM_TEST_CACHE"]
os.environ["FEDSIM_CACHE_DIR"] = _CACHE
# `fedsim run` draws its figures in the run's own process here: the two test workers use both cores, and a
# second process per run would only add to them (tests/test_output_process.py turns it back on)
os.environ["FEDSIM_OUTPUT_PROCESS"] = "0"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _OWN_CACHE:
        shutil.rmtree(_CACHE, ignore_errors=True)


#: The slowest test files (each runs a recipe, the course, or many real processes), slowest first: they are
#: handed to the two workers first, so the end of the suite is the many short files and both workers finish
#: within seconds of each other.  (pytest-xdist's own order, most tests first, put these few-test files last,
#: where one of them alone could keep a worker busy for a minute and a half while the other idled;
#: `--no-loadscope-reorder` in pyproject.toml keeps this order.)  tests/test_tests_map.py checks the names.
SLOW_FIRST = ("test_figures_cos2p.py", "test_tutorial.py", "test_figures_embracingfl.py", "test_sweep.py",
              "test_check_discrimination.py", "test_figures_gas.py", "test_figures_semisfl.py",
              "test_spawn_signals.py", "test_quadratic_run.py", "test_figures_fedraa.py", "test_trace_kinds.py",
              "test_progress_piped.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files of :data:`SLOW_FIRST` first, in its order; every other test keeps its place."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))

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
