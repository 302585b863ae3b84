"""Run folders, internal errors, settings without effect, override paths (a researcher's first day)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fedsim.cli import main
from fedsim.scenario import dump_scenario
from fedsim import load_scenario

ROOT = Path(__file__).resolve().parents[1]
TINY = ["data.num_clients=4", "data.partition={method: iid}", "model={name: mlp, hidden: 16}",
        "train.systems_only=true", "train.local_steps=2", "stop={max_versions: 3}", "output.figures=false"]


def _cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err.strip()


def test_non_empty_folder_is_refused_and_force_clears_it(tmp_path, capsys):
    out = tmp_path / "R"
    assert _cli(capsys, "run", "default", *TINY, "--out", str(out), "--quiet")[0] == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    # a second run that fails validation, then one that is valid: both refused, nothing touched
    code, err = _cli(capsys, "run", "default", *TINY, "train.lr=-1", "--out", str(out), "--quiet")
    assert code == 2 and err == "fedsim: error: train.lr: got -1.0 (allowed: finite, in (0, 10^12])"
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(out), "--quiet")
    assert code == 2 and err.startswith("fedsim: error: --out: ") and "--force" in err
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    # --force clears it: a one-algorithm run leaves no folder or figure of the earlier two-algorithm run
    assert _cli(capsys, "run", "fedasync", *TINY, "--out", str(out), "--quiet", "--force")[0] == 0
    assert not (out / "fedavg").exists() and not (out / "fedbuff").exists()
    assert json.loads((out / "summary.json").read_text())["algorithm"] == "fedasync"


def test_force_never_clears_a_folder_fedsim_did_not_write(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, err = _cli(capsys, "run", "default", *TINY, "--out", str(tmp_path), "--quiet", "--force")
    assert code == 2 and "holds no fedsim run" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_out_on_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    code, err = _cli(capsys, "run", "default", *TINY, "--out", str(f), "--quiet")
    assert code == 2 and err == f"fedsim: error: --out: '{f}' is a file, not a folder (give a new or empty folder)"
    code, err = _cli(capsys, "run", "default", *TINY, "--out", str(f / "sub"), "--quiet")
    assert code == 2 and err.startswith("fedsim: error: --out: ") and len(err.splitlines()) == 1


def test_model_dataset_profile_and_clients_are_checked_before_the_folder_is_created(tmp_path, capsys):
    for bad in ("model.name=resnet9000", "data.name=imagenet-1m", "devices.mix=[{profile: jetson-banana}]",
                "data.num_clients=5000"):
        out = tmp_path / bad.split("=")[0]
        code, err = _cli(capsys, "run", "default", *TINY, bad, "--out", str(out), "--quiet")
        assert code == 2 and len(err.splitlines()) == 1, err
        assert not out.exists(), bad


def test_internal_error_is_one_line_exit_3_and_keeps_trace_and_summary(tmp_path, capsys, monkeypatch):
    from fedsim import versions

    calls = {"n": 0}
    original = versions.VersionKeeper.snapshot

    def failing(self, *, final=False):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("boom in the middle\nof a run")
        return original(self, final=final)

    monkeypatch.setattr(versions.VersionKeeper, "snapshot", failing)
    out = tmp_path / "R"
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(out), "--quiet")
    assert code == 3
    assert err == ("fedsim: internal error: RuntimeError: boom in the middle of a run "
                   "(run with --debug for the traceback)")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "error" and "boom" in summary["stop_reason"]
    assert (out / "trace.jsonl").stat().st_size > 0


def test_sigterm_is_handled_like_an_interrupt(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "fedsim.cli", "run", "fedasync", "stop.max_time_s=100000", "output.flush_every=16",
           "--out", str(tmp_path), "--quiet", "--allow-large"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while not ((tmp_path / "trace.jsonl").exists() and (tmp_path / "trace.jsonl").stat().st_size > 2000):
            assert proc.poll() is None and time.time() - t0 < 90, proc.communicate()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "terminated (SIGTERM)"


def test_settings_without_effect_are_errors_naming_the_models_that_use_them(capsys, tmp_path):
    code, err = _cli(capsys, "run", "default", "channel.uplink.bandwidth_hz=1e3", "--out", str(tmp_path / "a"))
    assert code == 2 and err == ("fedsim: error: channel.uplink.bandwidth_hz: has no effect under link model 'fixed' "
                                 "(only free_space, log_distance, tr36814, tr38901_umi, tr38901_uma or a user model (module:attribute) use it); set "
                                 "channel.uplink.model to one of them or drop bandwidth_hz")
    code, err = _cli(capsys, "run", "default", "channel.mobility.kind=random_waypoint", "--out", str(tmp_path / "b"))
    assert code == 2 and err.startswith("fedsim: error: channel.mobility.kind: got 'random_waypoint', but both links "
                                        "are rate-only")
    # the same field under a path-loss model takes effect; the resolved scenario shows only fields in effect
    sc = load_scenario("default", ["channel.uplink={model: log_distance, bandwidth_hz: 1e3}"])
    assert sc.channel.uplink.bandwidth_hz == 1e3
    fixed = load_scenario("default").as_mapping()["channel"]["uplink"]
    assert "redraw" not in fixed and "bandwidth_hz" not in fixed and fixed["mbps"] == [0.5, 5.0]


def test_no_hidden_stop_default_and_empty_file_is_an_error(tmp_path, capsys):
    only_time = tmp_path / "t.yaml"
    only_time.write_text("stop: {max_time_s: 20}\n")
    sc = load_scenario(str(only_time))
    assert sc.stop.max_versions is None and sc.stop.max_time_s == 20
    assert "max_versions: null" in dump_scenario(sc)  # every stop rule shown
    empty = tmp_path / "e.yaml"
    empty.write_text("# nothing here\n")
    code, err = _cli(capsys, "run", str(empty), "--out", str(tmp_path / "o"))
    assert code == 2 and err.startswith(f"fedsim: error: scenario: '{empty}' is empty")
    nostop = tmp_path / "n.yaml"
    nostop.write_text("data: {num_clients: 4}\n")
    code, err = _cli(capsys, "run", str(nostop), "--out", str(tmp_path / "o"))
    assert code == 2 and err == ("fedsim: error: stop: missing: set stop.max_versions, stop.max_time_s or "
                                 "stop.max_updates so the run ends")


def test_errors_name_the_path_a_user_can_type(capsys, tmp_path):
    code, err = _cli(capsys, "run", "default", "data.num_clients=100", "--out", str(tmp_path / "a"))
    assert code == 2 and err.startswith("fedsim: error: data.partition.min_size: ")
    code, err = _cli(capsys, "run", "default", "stop.target_accuracy=1.5", "--out", str(tmp_path / "a"))
    assert err == "fedsim: error: stop.target_accuracy: got 1.5 (allowed: finite, in (0, 1])"
    code, err = _cli(capsys, "run", "default", "algorithm.buffer_size=5", "--out", str(tmp_path / "a"))
    assert code == 2 and "algorithm.fedbuff.buffer_size" in err and "fedsim/scenarios/default.yaml" in err
    code, err = _cli(capsys, "run", "default", "algorithm.fedbuff.buffer_size=-2", "--out", str(tmp_path / "a"))
    assert err == "fedsim: error: algorithm.fedbuff.buffer_size: got -2 (allowed: an integer in [1, 10^6] updates)"


def test_list_valued_algorithm_overrides_by_label_index_and_comma_list():
    sc = load_scenario("default", ["algorithm.fedbuff.buffer_size=7", "algorithm.0.clients_per_round=3"])
    by = {a.label: a.params for a in sc.algorithms}
    assert by["fedbuff"].buffer_size == 7 and by["fedavg"].clients_per_round == 3
    sc = load_scenario("fedasync", ["algorithm=fedasync,fedbuff"])
    assert [a.name for a in sc.algorithms] == ["fedasync", "fedbuff"]
    assert [a.name for a in load_scenario("default", ["algorithm=fedasync"]).algorithms] == ["fedasync"]


def test_numpy_warnings_do_not_reach_the_terminal(tmp_path, capsys, monkeypatch):
    import warnings

    import numpy as np

    from fedsim import versions

    original = versions.VersionKeeper.snapshot

    def noisy(self, *, final=False):
        np.log(np.zeros(2))                       # numpy: divide by zero encountered in log
        warnings.warn("mean of empty slice", RuntimeWarning)
        return original(self, final=final)

    monkeypatch.setattr(versions.VersionKeeper, "snapshot", noisy)
    code, err = _cli(capsys, "run", "fedasync", *TINY, "--out", str(tmp_path / "r"), "--quiet")
    assert code == 0 and "Warning" not in err and err == ""
