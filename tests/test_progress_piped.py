"""The progress bar does not flood a piped log: on a pipe it is a plain line per 10% of the run (and at
the end), never a bar redrawn with carriage returns many times a second."""
from __future__ import annotations

import subprocess
import sys


def test_piped_run_logs_a_line_per_ten_percent(tmp_path):
    # a fedasync run of 1,000+ versions: tqdm redrew its bar every 0.1 s, about a hundred times, into the pipe
    cmd = [sys.executable, "-m", "fedsim", "run", "fedasync", "data.name=mnist1d", "data.num_clients=40",
           "data.partition.min_size=5", "algorithm.concurrency=10", "stop.max_time_s=4", "train.systems_only=true",
           "output.figures=false", "--out", str(tmp_path / "r")]
    done = subprocess.run(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\r" not in done.stderr  # no bar redrawn in place
    lines = [x for x in done.stderr.splitlines() if x.startswith("fedasync:")]
    # 10%, 20%, ... 100%: one line per tenth of the 4 s of virtual time (plus, at most, one a minute)
    assert 2 <= len(lines) <= 12, lines
    pcts = [int(x.split(":")[1].split("%")[0]) for x in lines]
    assert pcts == sorted(pcts) and pcts[-1] == 100 and "4/4 s" in lines[-1], lines


def test_a_terminal_still_gets_the_bar(tmp_path):
    from fedsim import load_scenario
    from fedsim.runner import _Progress

    class Tty:
        def __init__(self) -> None:
            self.text = ""

        def isatty(self) -> bool:
            return True

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    tty = Tty()
    bar = _Progress(load_scenario("fedasync", ["stop.max_time_s=4"]), "fedasync", True, stream=tty)
    assert bar.bar is not None and not bar.plain
    bar(2.0, 10)
    bar.close(4.0, 20)
    assert "100%" in tty.text and "|" in tty.text  # tqdm's bar
