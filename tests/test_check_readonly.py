"""`fedsim check` on a run folder it cannot write (issue 39, failure 6): one line and exit 2, the folder
untouched, never "internal error" and exit 3.  check writes check.csv, check/ and report.html into the run,
so a read-only run folder is refused before any work; a write the file system refuses later (a read-only
mount, a full disk) is the user's place too.  As root, permission bits refuse nothing, so the refusal is
forced where the write happens."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from conftest import TINY

from fedsim import scenario_from_mapping
from fedsim.cli import main
from fedsim.runner import run_scenario


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("readonly") / "run"
    run_scenario(scenario_from_mapping(TINY), run, progress=False)
    return run


def _state(run: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(run).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*")}


def _check(capsys, run: Path) -> tuple[int, str, str]:
    code = main(["check", str(run)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line(code: int, err: str, expected: int = 2) -> None:
    assert code == expected and len(err.strip().splitlines()) == 1, (code, err)
    assert "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes through permission bits")
def test_a_read_only_run_folder_is_one_line_exit_2(capsys, finished):
    before = _state(finished)
    os.chmod(finished, 0o555)
    try:
        code, out, err = _check(capsys, finished)
    finally:
        os.chmod(finished, 0o755)
    _one_line(code, err)
    assert err.startswith(f"fedsim: error: run_dir: cannot write in '{finished}'") and out == ""
    assert _state(finished) == before


def test_a_refused_write_is_refused_before_any_work(capsys, finished, monkeypatch):
    """The place check writes is tried first (a folder made and removed in the run): refused there, the
    run folder is left as it was and nothing is printed but the one line."""
    import tempfile

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    before = _state(finished)
    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    code, out, err = _check(capsys, finished)
    _one_line(code, err)
    assert err.strip() == (f"fedsim: error: run_dir: cannot write in '{finished}': Permission denied (allowed: a "
                           "folder fedsim can write in)")
    assert out == "" and _state(finished) == before


@pytest.mark.parametrize("err_no", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_a_write_refused_later_is_one_line_exit_2(capsys, finished, monkeypatch, err_no):
    """The file system refuses check's table itself, after the first test passed (a mount turned read-only,
    a disk that filled): the CLI names the file and exits 2."""
    import pandas as pd

    def refused(self, path, *args, **kwargs):
        raise OSError(err_no, os.strerror(err_no), str(path))

    monkeypatch.setattr(pd.DataFrame, "to_csv", refused)
    code, out, err = _check(capsys, finished)
    _one_line(code, err)
    assert err.startswith("fedsim: error: the file system refused ") and "checks.csv" in err, err
    assert os.strerror(err_no) in err


def test_an_error_that_is_not_the_file_systems_stays_internal(capsys, finished, monkeypatch):
    """The deliberately broken case: an OSError with no file-system errno is fedsim's failure (exit 3); the
    exit-2 rule above is not a blanket over every OSError."""
    import pandas as pd

    def broken(self, path, *args, **kwargs):
        raise OSError("something else")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken)
    code, _, err = _check(capsys, finished)
    _one_line(code, err, expected=3)
    assert err.startswith("fedsim: internal error: OSError: something else")


def test_a_writable_run_is_checked(capsys, finished):
    code, out, err = _check(capsys, finished)
    assert code == 0 and err == "" and out.startswith("fedsim check: 1 run in"), (code, err)
    assert (finished / "check" / "checks.csv").is_file() and (finished / "check.csv").is_file()
