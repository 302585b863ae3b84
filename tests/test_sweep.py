"""Sweeps: one run per value, and the time-to-accuracy table agrees with each run's own metrics."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.sweep import split_sweep, time_to_accuracy


def test_split_sweep_finds_the_one_list():
    key, values, rest = split_sweep(["train.lr=0.1", "channel.uplink.mbps=1,5,20", "channel.downlink.mbps=[5, 10]"])
    assert key == "channel.uplink.mbps" and values == ["1", "5", "20"]
    assert rest == ["train.lr=0.1", "channel.downlink.mbps=[5, 10]"]
    with pytest.raises(ConfigError):
        split_sweep(["train.lr=0.1"])


def test_time_to_accuracy_first_crossing():
    m = pd.DataFrame({"t": [0.0, 1.0, 2.0, 3.0], "accuracy": [0.1, 0.5, 0.4, 0.9]})
    assert time_to_accuracy(m, 0.45) == 1.0
    assert time_to_accuracy(m, 0.95) == math.inf


def test_uplink_sweep_slower_links_take_longer(tmp_path, capsys):
    """Halving the uplink rate can only delay every event, so time to the same accuracy cannot shrink."""
    code = main(["sweep", "fedasync", "channel.uplink.mbps=0.25,1,4", "channel.downlink.mbps=20", "devices.jitter=0",
                 "data.num_clients=6", "algorithm=fedavg", "algorithm.clients_per_round=6", "stop.max_versions=4",
                 "model.name=logreg", "train.local_steps=5", "output.figures=false", "--target", "0.5",
                 "--out", str(tmp_path), "--quiet"])
    assert code == 0
    table = pd.read_csv(tmp_path / "sweep.csv")
    assert list(table["value"]) == [0.25, 1.0, 4.0]
    times = table["virtual_time_s"].to_numpy()
    assert times[0] > times[1] > times[2]
    # fedavg trains the same clients on the same batches whatever the link: accuracy is identical
    assert table["final_accuracy"].nunique() == 1
    assert (tmp_path / "sweep.png").exists()
    for v in ("0.25", "1", "4"):
        assert (tmp_path / f"channel.uplink.mbps={v}" / "metrics.csv").exists()


def test_sweep_target_is_validated_before_any_run(tmp_path, capsys):
    code = main(["sweep", "fedasync", "channel.uplink.mbps=1,4", "--target", "2", "--out", str(tmp_path / "s"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == "fedsim: error: --target: got 2.0 (allowed: an accuracy in (0, 1], e.g. 0.9)"
    assert not (tmp_path / "s").exists()


def test_unreached_target_is_marked_not_dropped(tmp_path):
    from fedsim.sweep import run_sweep

    table = run_sweep("fedasync", ["channel.uplink.mbps=1,4", "data.num_clients=4", "algorithm=fedavg",
                                   "algorithm.clients_per_round=4", "stop.max_versions=2", "model.name=logreg",
                                   "train.local_steps=2", "output.figures=false"],
                      tmp_path / "s", target=0.999, progress=False)
    assert list(table["reached_target"]) == [False, False]
    assert (table["time_to_target_s"] == math.inf).all()
    csv = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert list(csv["reached_target"]) == [False, False]


def test_seeds_run_each_seed_and_compare_across_seeds(tmp_path, capsys):
    out = tmp_path / "s"
    code = main(["run", "default", "data.num_clients=4", "data.partition={method: iid}", "model.name=logreg",
                 "train.local_steps=2", "algorithm.fedavg.clients_per_round=4", "stop={max_versions: 3}",
                 "output.figures=false", "--seeds", "0,1,2", "--target", "0.3", "--out", str(out), "--quiet"])
    assert code == 0
    table = pd.read_csv(out / "seeds.csv")
    assert len(table) == 6 and set(table["algorithm"]) == {"fedavg", "fedbuff"} and set(table["seed"]) == {0, 1, 2}
    for _, r in table.iterrows():  # each row is that seed's own run
        s = pd.read_json(out / f"seed-{r['seed']}" / r["algorithm"] / "summary.json", typ="series")
        assert s["seed"] == r["seed"] and s["final_accuracy"] == pytest.approx(r["final_accuracy"])
    summary = pd.read_csv(out / "seeds_summary.csv").set_index("algorithm")
    for alg, g in table.groupby("algorithm"):
        assert summary.loc[alg, "final_accuracy_mean"] == pytest.approx(g["final_accuracy"].mean())
        assert summary.loc[alg, "final_accuracy_std"] == pytest.approx(g["final_accuracy"].std())
    assert (out / "seeds.png").exists()
    assert main(["run", "default", "--seeds", "0,x", "--out", str(tmp_path / "t")]) == 2
    assert "--seeds" in capsys.readouterr().err
