"""What a run prints and writes: resolved defaults in the saved scenario, no "running ..." line before a
bad-input error, errors named where the input was given, the Python API's per-algorithm results."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.scenario import dump_scenario, load_scenario


def test_show_writes_out_the_default_links(capsys, tmp_path):
    path = tmp_path / "first.yaml"
    path.write_text("stop: {max_versions: 2}\n")
    assert main(["show", str(path)]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["channel"]["uplink"] == {"model": "fixed", "mbps": [2.0, 20.0], "tx_power_w": 0.2}
    assert shown["channel"]["downlink"]["mbps"] == [10.0, 50.0]
    # a preset's directions are the preset's: not shown as null
    path.write_text("channel: {preset: gas-cell}\nstop: {max_versions: 2}\n")
    text = dump_scenario(load_scenario(path))
    assert set(yaml.safe_load(text)["channel"]) == {"preset", "positions", "mobility"}
    # the resolved file loads back to the same scenario
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(dump_scenario(load_scenario(tmp_path / "first.yaml")))
    assert dump_scenario(load_scenario(resolved)) == resolved.read_text()


@pytest.mark.parametrize("args, field", [
    (["--seeds", "0,a"], "--seeds"),
    (["--target", "90"], "--target"),
    (["--seeds", "0,1", "--target", "90"], "--target"),
    (["--out", "FILE"], "--out"),
    (["data.name=cifar10"], "data.root"),
    (["stop.max_time_s=1e9"], "stop.max_time_s"),
    (["eval.every_s=1e-6"], "eval.every_s"),
    (["devices.mix=[{profile: jetson-nan}]"], "devices.mix[0].profile"),
    (["devices.mix=[{profile: jetson-nan}]", "--seeds", "0,1"], "devices.mix[0].profile"),
])
def test_bad_input_is_not_announced(capsys, tmp_path, monkeypatch, args, field):
    """Validation happens before `fedsim: running ... → runs/default-N` is printed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("x")
    code = main(["run", "default", "--quiet", *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert "running" not in out and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"fedsim: error: {field}")
    assert not (tmp_path / "runs").exists()


def test_profile_errors_name_the_field_that_gave_the_profile(capsys, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "garbage").write_bytes(bytes(range(256)) * 4)
    for value, text in (("jetson-nan", "unknown device profile 'jetson-nan'"), ("''", "empty name"),
                        (str(tmp_path / "folder"), "is a folder"), (str(tmp_path / "garbage"), "not UTF-8"),
                        ("x" * 100_000, "100,000 characters")):
        code = main(["show", "default", f"devices.mix=[{{profile: jetson-nano, count: 2}}, {{profile: {value}, count: 8}}]"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and len(err) < 1000, err[:300]
        assert err.startswith("fedsim: error: devices.mix[1].profile") and text in err
    assert main(["show", "default", f"server.profile={tmp_path / 'folder'}"]) == 2
    assert capsys.readouterr().err.startswith("fedsim: error: server.profile: ")
    assert main(["profiles", "jetson-nan"]) == 2
    assert capsys.readouterr().err.startswith("fedsim: error: profiles NAME: unknown device profile 'jetson-nan'")


def test_python_api_of_a_two_algorithm_run_is_per_label(tiny, tmp_path):
    """`res.summary` of two algorithms would silently be the first one's: refused, per label instead."""
    import fedsim
    from fedsim.errors import FedsimError
    from fedsim.scenario import scenario_from_mapping

    tiny["algorithm"] = [{"name": "fedavg", "clients_per_round": 3}, {"name": "fedbuff"}]
    res = fedsim.run(scenario_from_mapping(tiny), out=tmp_path / "r")
    assert res.labels == ["fedavg", "fedbuff"]
    assert res.by_label["fedbuff"]["algorithm"] == "fedbuff" and res.by_label["fedavg"]["label"] == "fedavg"
    with pytest.raises(FedsimError, match=r"2 algorithms \(fedavg, fedbuff\).*by_label\['fedavg'\]"):
        res.summary
    assert set(res.metrics["label"]) == {"fedavg", "fedbuff"}
