"""Local pool workers (:func:`fedsim.sim.executor.spawn_pool`: sweep and check ``--jobs``, the run's second
process) and the terminal's Ctrl-C: a Ctrl-C meant for the parent while it starts its workers is raised
there, never lost, and a worker never acts on one, not even while its interpreter imports."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

needs_masks = pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask") or not Path("/proc/self").exists(),
                                 reason="signal masks and /proc are POSIX/Linux")


def _python(script: str, folder: Path) -> subprocess.CompletedProcess:
    """``script`` run from a file (a spawned worker imports its functions from it)."""
    path = folder / "script.py"
    path.write_text(script, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)


#: a Ctrl-C that lands while the parent starts its worker (sent from inside ``submit``, the spawn itself)
CTRL_C_DURING_SPAWN = """
import os, signal
from concurrent.futures import ProcessPoolExecutor
from fedsim.sim.executor import spawn_pool

real = ProcessPoolExecutor.submit
def submit(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, now
    return real(self, *args, **kwargs)
ProcessPoolExecutor.submit = submit

if __name__ == "__main__":
    try:
        pool, started = spawn_pool(1)
    except KeyboardInterrupt:
        print("raised")
    else:
        [f.result() for f in started]
        print("lost")
        pool.shutdown()
"""


@needs_masks
def test_a_ctrl_c_during_the_spawn_reaches_the_parent(tmp_path):
    """Ignoring Ctrl-C in the parent while it spawned (how the workers used to inherit an ignored Ctrl-C)
    lost a Ctrl-C sent then: the run went on as if none came."""
    done = _python(CTRL_C_DURING_SPAWN, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["raised"]
    assert "Traceback" not in done.stderr


#: a worker flooded with Ctrl-C from its first instruction: it starts, works, and prints nothing
FLOODED_WORKER = """
import os, signal, threading, time
from fedsim.sim.executor import spawn_pool

def bits():
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith(("SigBlk", "SigIgn")):
            key, value = line.split(":")
            out[key] = int(value, 16)
    return out

if __name__ == "__main__":
    import multiprocessing.popen_spawn_posix as popen
    pids, real = [], popen.Popen._launch
    def launch(self, process_obj):
        real(self, process_obj)
        pids.append(self.pid)
    popen.Popen._launch = launch
    stop = threading.Event()
    def flood():  # Ctrl-C at the worker, every millisecond, while it imports and starts
        while not stop.is_set():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)
    threading.Thread(target=flood, daemon=True).start()
    pool, started = spawn_pool(1)
    [f.result(timeout=60) for f in started]
    worker = pool.submit(bits).result(timeout=60)
    stop.set()
    here = bits()
    sigint = 1 << (signal.SIGINT - 1)
    print(bool(worker["SigIgn"] & sigint), bool(worker["SigBlk"] & sigint), bool(here["SigBlk"] & sigint), len(pids))
    pool.shutdown()
"""


@needs_masks
def test_a_worker_ignores_ctrl_c_from_its_first_instruction(tmp_path):
    done = _python(FLOODED_WORKER, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # ignored in the worker, no longer blocked there, and the parent's mask as it was
    assert done.stdout.split() == ["True", "False", "False", "1"]
    assert "KeyboardInterrupt" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
