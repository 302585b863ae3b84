"""Inputs fedsim reads are bounded and must mean something; user errors get exit 2 and one capped line.

Each test reproduces a probe of issue 39 (failures 3, 4, 6, 8, 9): a device or pipe given as an input, an
oversized file, a trace naming no real client, a read-only or over-long output folder, huge integers, a
pickle payload given to ``check``, a 10 MB value echoed in an error, an event count printed as its limit.
"""
from __future__ import annotations

import os
import time

import pytest

from fedsim.cli import main
from fedsim.errors import ConfigError


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    code = main(list(argv))
    took = time.perf_counter() - t0
    return code, capsys.readouterr().err, took


def _one_line_exit_2(code: int, err: str) -> None:
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("fedsim: error: ") and len(err) < 1200, err[:2000]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_show_dev_zero_is_refused_at_once(capsys):
    code, err, took = _cli(capsys, "show", "/dev/zero")
    _one_line_exit_2(code, err)
    assert "character device" in err and "4 MiB" in err and took < 1.0


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("override, field", [("availability.path=/dev/zero", "availability.path"),
                                             ("channel.positions.path=/dev/zero", "channel.positions.path"),
                                             ("devices.mix[0].profile=/dev/zero", None)])
def test_device_as_input_path_is_refused_before_any_work(capsys, tmp_path, override, field):
    if field is None:  # a profile: the mix is a list, so it is given through a scenario file
        scen = tmp_path / "s.yaml"
        scen.write_text("stop: {max_versions: 1}\ndevices: {mix: [{profile: /dev/zero}]}\n")
        args = ["run", str(scen), "--out", str(tmp_path / "out"), "--quiet"]
    else:
        args = ["run", "default", override, "--out", str(tmp_path / "out"), "--quiet"]  # refused even unused
    code, err, took = _cli(capsys, *args)
    _one_line_exit_2(code, err)
    assert "character device" in err and took < 1.0
    assert field is None or err.startswith(f"fedsim: error: {field}: ")
    assert not (tmp_path / "out").exists()  # refused before the folder is made


def test_fifo_input_is_refused_and_a_scenario_pipe_is_read_bounded(capsys, tmp_path):
    from fedsim.inputfiles import LIMIT_SCENARIO, read_input

    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)  # nobody writes it: opening it would hang, so it must be refused from its metadata
    code, err, took = _cli(capsys, "show", "default", "availability.model=trace", f"availability.path={fifo}")
    _one_line_exit_2(code, err)
    assert "pipe (FIFO)" in err and took < 1.0
    # a scenario may come through a pipe (``fedsim run <(...)``): read, but never past the limit
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: more than the limit, then waits to be killed by a closed pipe
        os.close(r)
        try:
            chunk = b"#" * 65536
            while True:
                os.write(w, chunk)
        finally:
            os._exit(0)
    os.close(w)
    try:
        with pytest.raises(ConfigError, match="holds more than 4 MiB"):
            read_input(f"/dev/fd/{r}", "scenario", "scenario file", LIMIT_SCENARIO, pipe_ok=True)
    finally:
        os.close(r)
        os.waitpid(pid, 0)


def test_scenario_through_a_pipe_still_runs_show(capsys):
    from importlib import resources

    text = resources.files("fedsim.scenarios").joinpath("default.yaml").read_bytes()
    r, w = os.pipe()
    os.write(w, text)  # the default scenario fits a pipe's buffer
    os.close(w)
    try:
        code = main(["show", f"/dev/fd/{r}"])
    finally:
        os.close(r)
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("name: default")


def test_oversized_csv_is_refused_without_reading_it(tmp_path):
    from fedsim.inputfiles import LIMIT_TABLE
    from fedsim.system.availability import TraceAvailability

    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:  # sparse: no disk used, and nothing may read it whole
        fh.write(b"client,start,end\n")
        fh.truncate(LIMIT_TABLE + 1)
    with pytest.raises(ConfigError, match=r"availability\.path: CSV file .* is 64 MiB \(allowed: a regular CSV"):
        TraceAvailability.from_csv(big)


# ---------------------------------------------------------------------------------------------- failure 6, 9


def test_unwritable_out_is_refused_before_running_is_printed(capsys, tmp_path):
    """A read-only place for --out (here /sys, refused even to root) is one line and exit 2, before "running"."""
    if not os.path.isdir("/sys/kernel"):
        pytest.skip("needs /sys")
    code = main(["run", "default", "--out", "/sys/kernel/fedsim-run", "--quiet"])
    captured = capsys.readouterr()
    _one_line_exit_2(code, captured.err)
    assert captured.err.startswith("fedsim: error: --out: cannot write in '/sys/kernel'") and "running" not in captured.out


def test_check_refuses_a_folder_it_cannot_write(tmp_path):
    from fedsim.inputfiles import check_writable

    check_writable(tmp_path / "new" / "deeper", "run_dir")  # a new folder in a writable one: fine
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"run_dir: .*/file' is a file, not a folder"):
        check_writable(tmp_path / "file" / "run", "run_dir")
    if os.path.isdir("/sys/kernel"):
        with pytest.raises(ConfigError, match="run_dir: cannot write in '/sys/kernel'"):
            check_writable("/sys/kernel", "run_dir")


def test_long_names_and_huge_integers_are_user_errors(capsys):
    from fedsim.cli import _safe_name

    assert len(_safe_name("a" * 300)) == 100  # a 300-character scenario name still gives a folder name
    code, err, _ = _cli(capsys, "run", "default", "--out", "b" * 300, "--quiet")
    _one_line_exit_2(code, err)
    assert "a folder name of 300 characters" in err and "at most 255 bytes" in err
    code, err, _ = _cli(capsys, "show", "default", "seed=" + "1" * 5000)
    _one_line_exit_2(code, err)
    assert "integer of more than 4,300 digits" in err
    code, err, _ = _cli(capsys, "run", "name=" + "c" * 300, "--quiet", "train.lr=-1")  # not taken for a file name
    _one_line_exit_2(code, err)
    assert err.startswith("fedsim: error: train.lr")


def test_a_ten_megabyte_value_is_echoed_capped(capsys):
    # 300 kB, not the probe's 10 MB: YAML reads 10 MB in seconds, and the cap does not depend on the length
    code, err, _ = _cli(capsys, "show", "default", "channel.preset=" + "x" * 300_000)
    _one_line_exit_2(code, err)
    assert "(300,000 characters)" in err and len(err) < 300
    assert err.rstrip().endswith("(allowed: gas-cell, semisfl-edge, fixed)")


def test_one_line_caps_words_and_length():
    from fedsim.errors import MAX_LINE, one_line

    assert one_line("a\nb") == "a b"
    assert one_line("v: " + "y" * 500) == "v: " + "y" * 200 + "…(500 characters)"
    long = one_line(" ".join(["word"] * 5000) + " (allowed: this)")
    assert len(long) <= MAX_LINE + 40 and long.endswith("(allowed: this)") and "…(25,015 characters)…" in long


def test_a_pickle_payload_checkpoint_is_one_clean_line(tmp_path):
    import pickle

    import torch

    from analysis.probes import _load_state

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "ran"),))

    bad = tmp_path / "v000001.pt"
    with open(bad, "wb") as fh:
        pickle.dump({"w": Payload()}, fh)
    with pytest.raises(ConfigError) as info:
        _load_state(bad)
    text = str(info.value)
    assert text.startswith("run_dir: checkpoint") and "asks to run code" in text and "weights_only" not in text
    assert not (tmp_path / "ran").exists()
    good = tmp_path / "v000002.pt"
    torch.save({"w": torch.ones(2)}, good)
    assert torch.equal(_load_state(good)["w"], torch.ones(2))
    torch.save([1, 2], tmp_path / "v3.pt")
    with pytest.raises(ConfigError, match="holds a list, not a state dict"):
        _load_state(tmp_path / "v3.pt")


# ---------------------------------------------------------------------------------------------- failure 4


def _trace(path, ids, start=0.0, end=100.0):
    path.write_text("client,start,end\n" + "".join(f"{c},{start},{end}\n" for c in ids))
    return path


def test_a_trace_naming_no_real_client_is_refused_before_the_run(capsys, tmp_path):
    """The probe: ids 1000-1009 on a 20-client run ended ``status: ok`` with 0 updates."""
    trace = _trace(tmp_path / "t.csv", range(1000, 1010))
    out = tmp_path / "out"
    code, err, _ = _cli(capsys, "run", "default", "availability.model=trace", f"availability.path={trace}",
                        "--out", str(out), "--quiet")
    _one_line_exit_2(code, err)
    assert "names no client of this run (ids 1000, 1001, 1002, 1003, 1004, … (10 in all)" in err
    assert "clients are 0..19" in err and not out.exists()


def test_trace_meaning_errors_and_warnings(tmp_path):
    from fedsim.system.availability import TraceAvailability

    empty = TraceAvailability.from_csv(_trace(tmp_path / "e.csv", range(4), 5.0, 5.0))  # only empty intervals
    with pytest.raises(ConfigError, match=r"has no online interval for any of the clients it names \(0, 1, 2, 3\)"):
        empty.check_clients(4)
    some = TraceAvailability.from_csv(_trace(tmp_path / "s.csv", [2, 3, 7]))
    warnings = some.check_clients(4)
    assert warnings == ["availability.path: the trace names 1 ids that are no client of this run (7; clients are "
                        "0..3); their intervals are ignored",
                        "availability.path: 2 of 4 clients are never online in the trace (absent or with only empty "
                        "intervals); they never train"]
    assert TraceAvailability.from_csv(_trace(tmp_path / "a.csv", range(4))).check_clients(4) == []
