"""Nothing lost, nothing claimed falsely: ``--force`` clears only what fedsim wrote (its manifest), a run's
status is true at every instant (``building_outputs`` while drawing, never ``ok`` after a stop there), a
cut summary.json is one line, and ``compare`` lists a killed run with its status."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.files import MANIFEST, tmp_name

ROOT = Path(__file__).resolve().parents[1]
TINY = ["data.num_clients=4", "data.partition={method: iid}", "model={name: mlp, hidden: 16}",
        "train.systems_only=true", "train.local_steps=2", "stop={max_versions: 3}", "output.figures=false"]


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One finished tiny run (systems-only, no figures), copied by the tests that change it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["run", "fedasync", *TINY, "--out", str(out), "--quiet"]) == 0
    return out


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


# --- failure 1: --force deletes files fedsim never wrote -------------------------------------------------

def test_force_refuses_a_project_folder_and_deletes_nothing(tmp_path, capsys, monkeypatch):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.csv").write_text("x,y\n1,2\n")
    (project / "notes.txt").write_text("my notes")
    (project / "my_algos.py").write_text("# my algorithms\n")
    (project / "scenario.yaml").write_text(yaml.safe_dump({"stop": {"max_versions": 2}}))
    before = _snapshot(project)
    monkeypatch.chdir(project)
    code, err = _cli(capsys, "run", "scenario.yaml", "--out", ".", "--force", "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("fedsim: error: --out: '.' holds no fedsim run (first: 'data/')"), err
    assert _snapshot(project) == before


def test_force_refuses_a_folder_of_runs_and_deletes_nothing(finished, tmp_path, capsys):
    parent = tmp_path / "runsparent"
    _copy(finished, parent / "a")
    _copy(finished, parent / "b")
    (parent / "draft.tex").write_text("\\section{Results}")
    before = _snapshot(parent)
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(parent), "--force", "--quiet")
    assert code == 2 and len(err.splitlines()) == 1 and "holds no fedsim run (first: 'a/')" in err, err
    assert _snapshot(parent) == before


def test_force_clears_a_run_only_while_it_holds_nothing_else(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "mine.pt").write_bytes(b"mine")
    before = _snapshot(run)
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(run), "--force", "--quiet")
    assert code == 2 and "holds files fedsim did not write (first: 'checkpoints/')" in err, err
    assert _snapshot(run) == before
    shutil.rmtree(run / "checkpoints")
    # a file cut short under its temporary name (a kill while writing) is fedsim's; so is `fedsim check`'s
    tmp_name(run / "metrics.csv").write_text("t,ver")
    (run / "check.csv").write_text("quantity\n")
    assert _cli(capsys, "run", "fedasync", *TINY, "--out", str(run), "--force", "--quiet")[0] == 0
    assert not (run / "check.csv").exists() and not list(run.glob(".*fedsim-tmp"))


def test_a_run_from_before_the_manifest_is_cleared_only_by_its_summary(finished, tmp_path, capsys):
    old = _copy(finished, tmp_path / "old")
    (old / MANIFEST).unlink()
    (old / "notes.txt").write_text("mine")
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(old), "--force", "--quiet")
    assert code == 2 and "(first: 'notes.txt')" in err and (old / "notes.txt").exists()
    (old / "notes.txt").unlink()
    assert _cli(capsys, "run", "fedasync", *TINY, "--out", str(old), "--force", "--quiet")[0] == 0
    # without a summary saying it is a fedsim run, the same names are not taken as fedsim's
    (old / MANIFEST).unlink()
    (old / "summary.json").unlink()
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(old), "--force", "--quiet")
    assert code == 2 and "holds no fedsim run" in err and (old / "trace.jsonl").exists()


# --- failure 7 (second half): --resume into a user's folder ----------------------------------------------

@pytest.mark.parametrize("mode", [["run", "fedasync"], ["run", "fedasync", "--seeds", "0,1"],
                                  ["sweep", "fedasync", "train.lr=0.05,0.1"]])
def test_resume_in_every_mode_refuses_a_folder_that_is_not_fedsims(mode, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, err = _cli(capsys, *mode, *TINY, "--out", str(tmp_path), "--resume", "--quiet")
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("fedsim: error: --resume: "), err
    assert "holds no fedsim run" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# --- failure 5: a cut-off summary.json ---------------------------------------------------------------------

def test_a_cut_summary_is_one_line_in_resume_check_and_compare(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path / "run")
    text = (run / "summary.json").read_text()
    (run / "summary.json").write_text(text[: len(text) // 2])
    for args in (["run", "fedasync", *TINY, "--out", str(run), "--resume", "--quiet"], ["check", str(run)],
                 ["compare", str(run), "--out", str(tmp_path / "c")]):
        code, err = _cli(capsys, *args)
        assert code == 2 and len(err.splitlines()) == 1, (args, err)
        assert err.startswith(f"fedsim: error: summary.json: '{run / 'summary.json'}' is not a readable summary"), err


def test_the_summary_is_renamed_into_place_whole(finished):
    """No temporary file is left beside a finished run's files, and every file is in its manifest."""
    listed = set((finished / MANIFEST).read_text().splitlines()[1:])
    written = {p.relative_to(finished).as_posix() for p in finished.rglob("*") if p.is_file()} - {MANIFEST}
    assert written <= listed and not [p for p in written if p.endswith(".fedsim-tmp")]


# --- failure 7 (first half): compare and a killed run ------------------------------------------------------

def test_compare_lists_a_killed_or_unfinished_run_with_its_status(finished, tmp_path, capsys):
    runs = tmp_path / "runs"
    _copy(finished, runs / "done")
    killed = _copy(finished, runs / "killed")
    (killed / "summary.json").unlink()
    drawing = _copy(finished, runs / "drawing")
    s = json.loads((drawing / "summary.json").read_text())
    (drawing / "summary.json").write_text(json.dumps({**s, "status": "building_outputs"}))
    assert _cli(capsys, "compare", str(runs), "--out", str(tmp_path / "c"))[0] == 0
    table = (tmp_path / "c" / "comparison.csv").read_text()
    assert "no summary (killed, or still running)" in table and "building_outputs" in table and ",ok," in table
    # named directly: listed, not refused
    assert _cli(capsys, "compare", str(killed), "--out", str(tmp_path / "d"))[0] == 0
    assert "no summary (killed, or still running)" in (tmp_path / "d" / "comparison.md").read_text()


# --- failure 2: a stop or a full disk while drawing --------------------------------------------------------

_DRAWING = """
import pathlib, sys, time
import fedsim.output.report as report
marker = pathlib.Path(sys.argv[1])
def drawing(*args, **kwargs):  # the run's figures: say so, then take long enough to be stopped
    marker.write_text("drawing")
    time.sleep(120)
report.run_figures = drawing
from fedsim.cli import main
sys.exit(main(sys.argv[2:]))
"""

FIGURES = [a for a in TINY if not a.startswith("output.figures")] + ["output.figures=true"]


def _drawing(tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen, Path]:
    """``fedsim ARGS`` in a process whose figure drawing stops at a known point; returns once it is there."""
    marker = tmp_path / "drawing.marker"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "FEDSIM_OUTPUT_PROCESS": "0"}
    proc = subprocess.Popen([sys.executable, "-c", _DRAWING, str(marker), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() - t0 < 120, proc.communicate()
        time.sleep(0.05)
    return proc, marker


def _signal_self(signum: int) -> None:
    """Send ``signum`` to this process, as ``kill`` would, once fedsim's handler for it is in place."""
    assert signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, None), "fedsim does not handle it"
    os.kill(os.getpid(), signum)
    time.sleep(5)  # the handler raises at once; never reached


def test_sigterm_while_drawing_leaves_a_status_that_says_so(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    seen = []

    def drawing(*args, **kwargs):  # the run's figures: a real SIGTERM arrives while they are drawn
        seen.append(json.loads((out / "summary.json").read_text())["status"])
        _signal_self(signal.SIGTERM)

    monkeypatch.setattr("fedsim.output.report.run_figures", drawing)
    code, err = _cli(capsys, "run", "fedasync", *FIGURES, "--out", str(out), "--quiet")
    assert seen == ["building_outputs"]  # while drawing the summary says so
    assert code == 143 and err == "fedsim: terminated (SIGTERM); outputs written so far are kept", err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_reason"] != "terminated (SIGTERM)"
    assert summary["outputs_interrupted"].startswith("figures and report: terminated (SIGTERM) while they were drawn")
    assert not (out / "report.html").exists()
    # --resume draws them (the real figures now), from the run's files
    monkeypatch.undo()
    code, err = _cli(capsys, "run", "fedasync", *FIGURES, "--out", str(out), "--quiet", "--resume")
    assert code == 0 and "its simulation finished; drawing its figures and report" in err, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and "outputs_interrupted" not in summary and (out / "report.html").exists()


def test_kill_9_while_drawing_a_seed_then_resume_completes_its_outputs(tmp_path, capsys):
    out = tmp_path / "seeds"
    args = ["run", "fedasync", *FIGURES, "--seeds", "0", "--out", str(out), "--quiet"]
    proc, _ = _drawing(tmp_path, args)
    proc.kill()
    proc.wait()
    assert json.loads((out / "seed-0" / "summary.json").read_text())["status"] == "building_outputs"
    simulated = {n: (out / "seed-0" / n).stat().st_mtime_ns for n in ("trace.jsonl", "metrics.csv")}
    assert main(args + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert ("fedsim: seed 0: its simulation finished; drawing its figures and report ('" in err
            and "stopped while its figures and report were drawn))" in err), err
    # drawn from the run's files: the simulation was not run again
    assert {n: (out / "seed-0" / n).stat().st_mtime_ns for n in simulated} == simulated
    assert json.loads((out / "seed-0" / "summary.json").read_text())["status"] == "ok"
    assert (out / "seed-0" / "report.html").exists()
    assert "seed-0/report.html" in (out / "report.html").read_text()  # the folder's page links it


_FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from fedsim.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(signal, "SIGXFSZ"),
                    reason="needs RLIMIT_FSIZE and SIGXFSZ")
def test_a_full_disk_while_drawing_is_not_ok(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "FEDSIM_OUTPUT_PROCESS": "0"}
    # every file of the simulation fits; the figures do not
    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, "16000", "run", "fedasync", *FIGURES, "--out",
                           str(out), "--quiet"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "outputs_failed" and "File too large" in summary["outputs_error"]
    assert "Traceback" in (out / "outputs_error.txt").read_text()
    assert not (out / "report.html").exists() and not list(out.glob(".*fedsim-tmp"))


# --- failure 9: SIGHUP, and SIGTERM before anything was written ---------------------------------------------

def test_sighup_is_handled_like_sigterm(tmp_path, capsys, monkeypatch):
    from fedsim import versions

    calls = []
    original = versions.VersionKeeper.snapshot

    def hang_up(self, *, final=False):  # a dropped ssh session in the middle of the run
        calls.append(final)
        if len(calls) == 2:
            _signal_self(signal.SIGHUP)
        return original(self, final=final)

    monkeypatch.setattr(versions.VersionKeeper, "snapshot", hang_up)
    out = tmp_path / "run"
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a terminal (a suite under nohup ignores it)
    try:
        code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(out), "--quiet")
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # fedsim's handler only while it runs
    finally:
        signal.signal(signal.SIGHUP, before)
    assert code == 129 and err == "fedsim: terminated (SIGHUP); outputs written so far are kept", err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "terminated (SIGHUP)"
    assert (out / "metrics.csv").exists() and (out / "trace.jsonl").exists()


def test_sighup_ignored_at_the_start_stays_ignored():
    """``nohup fedsim run ...``: a hang-up must not stop the run."""
    from fedsim.cli import _on_sigterm, _restore_sigterm

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        previous = _on_sigterm()
        try:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        finally:
            _restore_sigterm(previous)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_sigterm_while_reading_a_fifo_says_nothing_was_written(tmp_path):
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "fedsim", "run", str(fifo), "--out", str(out), "--quiet"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    try:
        t0 = time.monotonic()
        while writer is None and proc.poll() is None and time.monotonic() - t0 < 90:
            try:  # succeeds once fedsim has opened the FIFO to read it (and blocks there, nothing written)
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        if writer is not None:
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
    if writer is None:  # a FIFO refused as input before it is read: one line, exit 2
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    else:
        assert proc.returncode == 143 and err.strip() == "fedsim: terminated (SIGTERM); nothing was written", err
    assert "outputs written so far are kept" not in err and not out.exists()
