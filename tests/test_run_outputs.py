"""What a run prints and writes: resolved defaults in the saved scenario, no "running ..." line before a
bad-input error, errors named where the input was given, the Python API's per-algorithm results."""
from __future__ import annotations


import pytest
import yaml

from fedsim.cli import main
from fedsim.scenario import dump_scenario
from fedsim import load_scenario


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
    from fedsim import scenario_from_mapping

    tiny["algorithm"] = [{"name": "fedavg", "clients_per_round": 3}, {"name": "fedbuff"}]
    res = fedsim.run(scenario_from_mapping(tiny), out=tmp_path / "r")
    assert res.labels == ["fedavg", "fedbuff"]
    assert res.by_label["fedbuff"]["algorithm"] == "fedbuff" and res.by_label["fedavg"]["label"] == "fedavg"
    with pytest.raises(FedsimError, match=r"2 algorithms \(fedavg, fedbuff\).*by_label\['fedavg'\]"):
        res.summary
    assert set(res.metrics["label"]) == {"fedavg", "fedbuff"}


def test_scenario_descriptions_are_whole_and_fit_100_columns(capsys):
    from fedsim.scenario import builtin_scenarios

    descriptions = builtin_scenarios()
    assert descriptions["cos2p"].endswith("of depth-and-width pruned sub-models (R_n of Table 7)")
    assert descriptions["embracingfl"].endswith("train the output layer on cached activations.")
    assert descriptions["gas-cell-timing"].endswith("GAS AlexNet costs, no training")  # its first paragraph
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert " ".join(out.split()).count("(R_n of Table 7)") == 1


def test_progress_bar_ends_where_the_run_ended(tiny, tmp_path, capsys):
    """A round-based run reports its last round before the stop time: the bar still ends at 100%."""
    from fedsim.runner import run_scenario
    from fedsim import scenario_from_mapping

    tiny["stop"] = {"max_time_s": 1.5}
    run_scenario(scenario_from_mapping(tiny), tmp_path / "r", progress=True)
    last = capsys.readouterr().err.replace("\n", "\r").split("\r")
    last = [s for s in last if s.startswith("fedavg:")][-1]
    assert "100%" in last and "2/2 s" in last and "t=1.5s" in last, last


def test_seeds_summary_has_the_time_to_target(tmp_path):
    import math

    import pandas as pd

    out = tmp_path / "s"
    assert main(["run", "default", "data.num_clients=4", "data.partition={method: iid}", "model.name=logreg",
                 "train.local_steps=2", "algorithm.fedavg.clients_per_round=4", "stop={max_versions: 4}",
                 "output.figures=false", "--seeds", "0,1", "--target", "0.2", "--out", str(out), "--quiet"]) == 0
    table = pd.read_csv(out / "seeds.csv")
    summary = pd.read_csv(out / "seeds_summary.csv").set_index("algorithm")
    for alg, g in table.groupby("algorithm"):
        reached = g[g["reached_target"]]["time_to_target_s"]
        assert summary.loc[alg, "reached_target"] == len(reached) and len(reached) >= 1
        assert summary.loc[alg, "time_to_target_s_mean"] == pytest.approx(reached.mean())
        std = summary.loc[alg, "time_to_target_s_std"]
        assert (math.isnan(std) and len(reached) == 1) or std == pytest.approx(reached.std())


def test_reference_says_what_every_scenario_field_means_and_lists_names():
    from fedsim.config import walk_fields
    from fedsim.learn.data import DATASETS
    from fedsim.scenario import SECTIONS, field_reference
    from fedsim.algorithms import registry

    empty = [f.path for key, cls in SECTIONS.items() for f in walk_fields(cls, key) if not f.doc]
    assert empty == []
    row = next(line for line in field_reference(registry()).splitlines() if line.startswith("| `data.name` |"))
    assert all(name in row for name in DATASETS)
    row = next(line for line in field_reference(registry()).splitlines() if line.startswith("| `devices.mix[0].profile` |"))
    assert "jetson-nano" in row and "path to a profile YAML file" in row
