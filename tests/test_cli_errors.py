"""Bad input: one clear line naming the field and what is allowed, exit code 2, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)


def _run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    "override, field, allowed",
    [
        ("colour=blue", "colour", "allowed"),                          # unknown top-level key
        ("train.speed=3", "train.speed", "allowed"),                   # unknown nested key
        ("train.batch_size=abc", "train.batch_size", "integer"),       # wrong type
        ("data.num_clients=-4", "data.num_clients", "allowed: an integer in [1, 10^7]"),            # negative count
        ("data.name=imagenet-1m", "data.name", "allowed"),             # unknown dataset
        ("algorithm.name=fedmagic", "algorithm.name", "allowed"),      # unknown algorithm
        ("data.partition.method=zipf", "data.partition.method", "allowed"),
    ],
)
def test_bad_scenario_values_give_one_line(capsys, tmp_path, override, field, allowed):
    code, err = _run_cli(capsys, "run", "fedasync", override, "--out", str(tmp_path), "--quiet")
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and allowed in lines[0]
    assert "Traceback" not in err


def test_unknown_device_profile(capsys, tmp_path):
    code, err = _run_cli(capsys, "run", "default", "devices.mix=[{profile: jetson-banana}]", "--out", str(tmp_path), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1
    assert "jetson-banana" in err and "jetson-nano" in err  # names the bad value and the allowed ones


def test_missing_data_file_names_expected_files(capsys, tmp_path):
    code, err = _run_cli(capsys, "run", "default", "data.name=cifar10", f"data.root={tmp_path}", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1
    assert "data_batch_1" in err and "data.root" in err


def test_unknown_scenario_and_bad_yaml(capsys, tmp_path):
    code, err = _run_cli(capsys, "run", "no-such-scenario", "--quiet")
    assert code == 2 and "default" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    code, err = _run_cli(capsys, "run", str(bad), "--quiet")
    assert code == 2 and "YAML" in err and len(err.splitlines()) == 1


def test_folder_named_like_a_builtin_scenario_and_unreadable_files(capsys, tmp_path, monkeypatch):
    """A run folder called ``default`` in the working directory does not shadow the built-in scenario; any
    other folder or a non-UTF-8 file is one clear line, not an internal error."""
    from fedsim.scenario import load_raw

    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    assert load_raw("default")["name"] == "default"
    (tmp_path / "runs").mkdir()
    code, err = _run_cli(capsys, "run", "runs", "--quiet")
    assert code == 2 and len(err.splitlines()) == 1 and "'runs' is a folder" in err
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00junk")
    code, err = _run_cli(capsys, "run", "bin.yaml", "--quiet")
    assert code == 2 and len(err.splitlines()) == 1 and "not UTF-8" in err


@pytest.mark.parametrize("module", ["fedsim.cli", "fedsim"])
def test_console_entry_point_exit_code_and_no_traceback(tmp_path, module):
    """Through a real process: the exit code and stderr a shell user sees (``python -m fedsim`` alike)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", module, "run", "default", "stop.max_versions=-1", "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("fedsim: error: stop.max_versions")
    assert "Traceback" not in proc.stderr


def test_scenarios_listing_and_help(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert "default" in out
    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    assert exc.value.code == 0
    assert "key=value" in capsys.readouterr().out


def test_resolved_scenario_round_trips(tmp_path):
    from fedsim.scenario import dump_scenario
    from fedsim import load_scenario, scenario_from_mapping

    sc = load_scenario("fedasync", ["train.lr=0.2"])
    again = scenario_from_mapping(yaml.safe_load(dump_scenario(sc)))
    assert again == sc
    assert again.train.lr == 0.2


def test_model_too_big_for_device_is_refused(capsys, tmp_path):
    """A model that does not fit a device's memory: one line naming the device, the need and the budget."""
    profile = yaml.safe_load((Path(__file__).resolve().parents[1] / "device_profiles" / "jetson-nano.yaml").read_text())
    profile["name"] = "tiny-mcu"
    profile["memory"]["value"] = 1
    profile["memory"]["unit"] = "MB"
    path = tmp_path / "tiny-mcu.yaml"
    path.write_text(yaml.safe_dump(profile))
    code, err = _run_cli(capsys, "run", "fedasync", "model.name=mlp", "model.hidden=[512, 512]",
                         f"devices.mix=[{{profile: {path}}}]", "--out", str(tmp_path / "o"), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "tiny-mcu" in err and "needs" in err and "has" in err and "MiB" in err and "0.0 GiB" not in err


def test_config_error_survives_being_recreated_from_its_text():
    """Copying or pickling (and SimPy re-raising) an error re-creates it from its args: same text."""
    import copy
    import pickle

    from fedsim.errors import ConfigError

    err = ConfigError("data.name", "unknown dataset 'x' (allowed: digits)")
    for again in (copy.copy(err), pickle.loads(pickle.dumps(err))):
        assert str(again) == str(err)


@pytest.mark.parametrize("algorithm", ["semisfl", "semifl"])
def test_a_huge_server_phase_is_refused_before_the_run_naming_k_s(capsys, tmp_path, algorithm):
    """The server's own K_s steps per version count in the work estimate (they once ran unbounded)."""
    code, err = _run_cli(capsys, "run", "default", f"algorithm={algorithm}", "data.num_clients=4",
                         "algorithm.clients_per_round=2", "algorithm.k_s=90000000", "stop.max_versions=3",
                         "stop.max_time_s=null", "--out", str(tmp_path), "--quiet")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("fedsim: error: algorithm.k_s:") and "server steps per version" in err and "--allow-large" in err
    assert not any(tmp_path.iterdir())  # refused before anything was written


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # a port nobody listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address_is_one_line_within_seconds(capsys, tmp_path):
    """Ray retries an unreachable head for minutes; fedsim probes the address first and refuses in one line."""
    import time

    pytest.importorskip("ray")
    port = _closed_port()
    t0 = time.perf_counter()
    code, err = _run_cli(capsys, "sweep", "default", "seed=0,1", "stop.max_versions=1", "--ray", f"127.0.0.1:{port}",
                         "--out", str(tmp_path / "out"))
    assert time.perf_counter() - t0 < 30
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("fedsim: error: --ray: cannot reach Ray at") and f"127.0.0.1:{port}" in err


@pytest.mark.parametrize("address, words", [("127.0.0.1", "is not a Ray address"),
                                            ("ray://head", "is not a Ray address"),
                                            ("CLOSED", "cannot reach Ray")])
def test_ray_address_check(address, words):
    from fedsim.errors import ConfigError
    from fedsim.sim.executor import check_ray_address

    address = address.replace("CLOSED", f"ray://localhost:{_closed_port()}")
    with pytest.raises(ConfigError, match=words):
        check_ray_address(address, "train.ray_address", timeout=1.0)
    check_ray_address("auto", "train.ray_address")  # left to Ray: finds a local cluster or says at once
