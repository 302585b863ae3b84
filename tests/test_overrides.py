"""Overrides keep what the scenario says and address algorithms as ``fedsim show`` shows them; relative
paths of a scenario file are found beside it; ``--debug`` works after the command too."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedsim import load_scenario
from fedsim.cli import main

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "extending"


def _show(capsys, *args: str) -> dict:
    assert main(["show", *args]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


# ------------------------------------------------------------------ algorithm=a,b keeps each one's settings


def test_replacing_the_algorithm_list_keeps_the_scenarios_settings(capsys):
    shown = _show(capsys, "cos2p", "algorithm=cos2p,fedavg")
    cos2p, fedavg = shown["algorithm"]
    assert cos2p["name"] == "cos2p" and fedavg["name"] == "fedavg"
    assert cos2p["t_clk"] == 0.02 and cos2p["mask_rounds"] == 5 and cos2p["mu"] == 0.5
    assert cos2p["batch_sizes"] == {"jetson-xavier-nx-8gb": 4, "jetson-xavier-nx-16gb": 8,
                                    "jetson-agx-orin-32gb": 16, "jetson-agx-orin-64gb": 32}
    # the scenario's Co-S²P, as `fedsim show cos2p` resolves it, field for field
    assert cos2p == _show(capsys, "cos2p")["algorithm"]
    # a name the scenario does not have gets its defaults
    assert fedavg == _show(capsys, "default", "algorithm=fedavg", "algorithm={name: fedavg}")["algorithm"]


def test_a_kept_algorithm_is_matched_by_label_then_name(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""
        stop: {max_versions: 2}
        algorithm:
          - {name: fedavg, label: slow, clients_per_round: 2}
          - {name: fedbuff, buffer_size: 3}
    """))
    shown = _show(capsys, str(path), "algorithm=fedbuff,slow,fedasync")
    fedbuff, slow, fedasync = shown["algorithm"]
    assert fedbuff["buffer_size"] == 3 and slow["label"] == "slow" and slow["clients_per_round"] == 2
    assert fedasync == _show(capsys, str(path), "algorithm={name: fedasync}")["algorithm"]
    # one name replacing a list keeps that one's settings too; overrides after it still apply
    one = _show(capsys, str(path), "algorithm=fedbuff", "algorithm.buffer_size=7")["algorithm"]
    assert one["name"] == "fedbuff" and one["buffer_size"] == 7 and one["concurrency"] == fedbuff["concurrency"]


# ------------------------------------------------------------------ labels as shown


def test_an_algorithm_is_addressed_by_the_label_show_gives_it(capsys, tmp_path):
    for name in ("compare-fednova.yaml", "fednova.py"):
        shutil.copy(DOCS / name, tmp_path / name)
    scenario = str(tmp_path / "compare-fednova.yaml")
    labels = [a.get("label", a["name"]) for a in _show(capsys, scenario)["algorithm"]]
    assert labels == ["fedavg", "fednova"]
    shown = _show(capsys, scenario, "algorithm.fednova.server_lr=0.5")
    assert [a["server_lr"] for a in shown["algorithm"]] == [1.0, 0.5]
    # a wrong label: the suggestion is a form that works
    assert main(["show", scenario, "algorithm.fednovx.server_lr=0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "(fedavg, fednova)" in err and "algorithm.fednova.server_lr=..." in err, err
    for form in ("algorithm.fednova.server_lr=0.5", "algorithm.1.server_lr=0.5"):
        assert form.split("=")[0] in err.replace("...", "0.5")
        assert [a["server_lr"] for a in _show(capsys, scenario, form)["algorithm"]] == [1.0, 0.5]
    # algorithm=a,b by the shown label keeps the module:Class entry
    kept = _show(capsys, scenario, "algorithm=fednova,fedbuff")["algorithm"]
    assert kept[0]["name"] == "fednova:FedNova" and kept[0]["label"] == "fednova"


def test_labels_with_dots_and_a_single_algorithm_by_label(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("stop: {max_versions: 2}\nalgorithm: [{name: fedavg, label: v1.2}, {name: fedbuff}]\n")
    shown = _show(capsys, str(path), "algorithm.v1.2.clients_per_round=4")
    assert shown["algorithm"][0]["clients_per_round"] == 4
    assert _show(capsys, "fedasync", "algorithm.fedasync.alpha=0.3")["algorithm"]["alpha"] == 0.3


# ------------------------------------------------------------------ paths beside the scenario file


LOADER = textwrap.dedent('''
    import numpy as np

    def load(rng, path, split="train"):
        """A CSV of x0,x1,label,site rows: a natural partition by site."""
        rows = np.loadtxt(path, delimiter=",", skiprows=1)
        x, y, site = rows[:, :2].astype("float32"), rows[:, 2].astype(int), rows[:, 3].astype(int)
        assert split == "train"
        return x, y, x[:8], y[:8], site
''')


def test_data_options_paths_resolve_beside_the_scenario(capsys, tmp_path, monkeypatch):
    here = tmp_path / "study"
    here.mkdir()
    (here / "csvloader.py").write_text(LOADER)
    rng = np.random.default_rng(0)
    rows = [f"{a:.3f},{b:.3f},{int(a > 0)},{i % 3}" for i, (a, b) in enumerate(rng.normal(size=(60, 2)))]
    (here / "sites.csv").write_text("x0,x1,label,site\n" + "\n".join(rows) + "\n")
    (here / "train").mkdir()  # a folder named like an option's plain word
    (here / "s.yaml").write_text(textwrap.dedent("""
        stop: {max_versions: 2}
        data:
          name: csvloader:load
          num_clients: 3
          partition: {method: natural}
          options: {path: sites.csv, split: train}
        model: {name: logreg}
        train: {local_steps: 1, batch_size: 4}
        algorithm: {name: fedavg, clients_per_round: 3}
        output: {figures: false}
    """))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory holds no sites.csv
    sc = load_scenario(here / "s.yaml")
    assert sc.data.options == {"path": str((here / "sites.csv").resolve()), "split": "train"}
    assert main(["run", str(here / "s.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0, capsys.readouterr().err
    # a path not beside the scenario stays relative to the working directory
    (elsewhere / "other.csv").write_text("x")
    assert load_scenario(here / "s.yaml", ["data.options.path=other.csv"]).data.options["path"] == "other.csv"


# ------------------------------------------------------------------ --debug after the command


def test_debug_is_accepted_after_the_command(capsys, monkeypatch):
    import fedsim.scenario

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(fedsim.scenario, "dump_scenario", broken)
    assert main(["show", "default"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("(run with --debug for the traceback)"), err
    for argv in (["--debug", "show", "default"], ["show", "--debug", "default"], ["show", "default", "--debug"]):
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err, argv
