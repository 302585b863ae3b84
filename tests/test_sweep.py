"""Sweeps: one run per value, and the time-to-accuracy table agrees with each run's own metrics."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.sweep import split_grid, time_to_accuracy


def test_split_grid_finds_every_list():
    grid, rest = split_grid(["train.lr=0.1", "channel.uplink.mbps=1,5,20", "channel.downlink.mbps=[5, 10]",
                             "devices.jitter=0,0.2"])
    assert grid == [("channel.uplink.mbps", ["1", "5", "20"]), ("devices.jitter", ["0", "0.2"])]
    assert rest == ["train.lr=0.1", "channel.downlink.mbps=[5, 10]"]
    for bad in (["train.lr=0.1"], ["train.lr=0.1,"], ["train.lr=1,1"], ["train.lr=1,2", "train.lr=3,4"]):
        with pytest.raises(ConfigError):
            split_grid(bad)


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
    assert list(table["channel.uplink.mbps"]) == [0.25, 1.0, 4.0]
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


# a tiny systems-only FedAvg world whose runs take well under a second each
TINY = ["data.num_clients=4", "data.partition={method: iid}", "model={name: mlp, hidden: 8}", "algorithm=fedavg",
        "algorithm.clients_per_round=4", "train.systems_only=true", "train.local_steps=2", "stop={max_versions: 2}",
        "output.figures=false"]
GRID = ["channel.uplink.mbps=0.5,2", "devices.jitter=0,0.3"]


def _traces(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("trace.jsonl"))}


def test_grid_with_seeds_on_two_jobs_gives_the_serial_runs(tmp_path):
    """A 2×2 grid × 2 seeds in 2 processes writes the same 8 traces, byte for byte, as the serial sweep."""
    from fedsim.sweep import run_sweep

    serial = run_sweep("fedasync", GRID + TINY, tmp_path / "serial", target=None, seeds=[0, 1], progress=False)
    par = run_sweep("fedasync", GRID + TINY, tmp_path / "jobs", target=None, seeds=[0, 1], jobs=2, progress=False)
    a, b = _traces(tmp_path / "serial"), _traces(tmp_path / "jobs")
    assert len(a) == 8 and list(a) == list(b)
    assert "channel.uplink.mbps=0.5,devices.jitter=0.3/seed-1/trace.jsonl" in a
    assert all(a[k] == b[k] for k in a)
    # the seeds differ (jitter draws), so the equality above compares different runs, not one run 8 times
    assert a["channel.uplink.mbps=2,devices.jitter=0.3/seed-0/trace.jsonl"] != \
        a["channel.uplink.mbps=2,devices.jitter=0.3/seed-1/trace.jsonl"]
    cols = ["channel.uplink.mbps", "devices.jitter", "runs", "virtual_time_s", "virtual_time_s_std", "bytes_total"]
    pd.testing.assert_frame_equal(serial[cols], par[cols])
    # sweep.csv is the mean and std over the seeds of sweep_runs.csv
    runs = pd.read_csv(tmp_path / "jobs" / "sweep_runs.csv")
    assert len(runs) == 8 and set(runs["seed"]) == {0, 1}
    table = pd.read_csv(tmp_path / "jobs" / "sweep.csv")
    assert len(table) == 4 and (table["runs"] == 2).all()
    for _, r in table.iterrows():
        g = runs[(runs["channel.uplink.mbps"] == r["channel.uplink.mbps"]) & (runs["devices.jitter"] == r["devices.jitter"])]
        assert r["virtual_time_s"] == pytest.approx(g["virtual_time_s"].mean())
        assert r["virtual_time_s_std"] == pytest.approx(g["virtual_time_s"].std())
    slow = table[table["channel.uplink.mbps"] == 0.5]["virtual_time_s"].min()
    assert slow > table[table["channel.uplink.mbps"] == 2]["virtual_time_s"].max()


def test_two_key_grid_draws_heatmaps_and_one_key_a_line(tmp_path):
    from fedsim.sweep import run_sweep

    run_sweep("fedasync", GRID + TINY, tmp_path / "g", target=None, progress=False)
    assert (tmp_path / "g" / "sweep_heatmap.png").exists() and not (tmp_path / "g" / "sweep.png").exists()
    run_sweep("fedasync", GRID[:1] + TINY, tmp_path / "l", target=None, seeds=[0, 1], progress=False)
    assert (tmp_path / "l" / "sweep.png").exists() and not list((tmp_path / "l").glob("sweep_heatmap*"))


def test_sweep_resume_reuses_finished_points_and_reruns_an_incomplete_one(tmp_path, capsys):
    import json

    out = tmp_path / "s"
    args = ["sweep", "fedasync", *GRID, *TINY, "--out", str(out), "--quiet"]
    assert main(args) == 0
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    assert len(stamps) == 4
    # one point was killed midway (no summary), another interrupted
    killed = out / "channel.uplink.mbps=2,devices.jitter=0"
    (killed / "summary.json").unlink()
    stopped = out / "channel.uplink.mbps=0.5,devices.jitter=0.3" / "summary.json"
    stopped.write_text(json.dumps({**json.loads(stopped.read_text()), "status": "interrupted"}))
    capsys.readouterr()
    # without --resume the folder is refused; with it only the two unfinished points run
    assert main(args) == 2 and "--out" in capsys.readouterr().err
    assert main(args + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert "2 of 4 runs already finished" in err and err.count("incomplete run") == 2
    assert "killed midway" in err and "'interrupted'" in err
    after = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    changed = {p.parent.name for p in after if after[p] != stamps.get(p)}
    assert changed == {killed.name, stopped.parent.name}
    assert json.loads(stopped.read_text())["status"] == "ok"
    assert len(pd.read_csv(out / "sweep_runs.csv")) == 4
    # another scenario in the same folder: one line, exit 2, nothing run
    code = main(["sweep", "fedasync", *GRID, *TINY, "train.local_steps=3", "--out", str(out), "--quiet", "--resume"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("fedsim: error: --resume: ") and "another scenario" in err
    assert len(err.splitlines()) == 1
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == after


def test_seeds_resume_runs_only_the_missing_seed(tmp_path, capsys):
    out = tmp_path / "r"
    base = ["run", "fedasync", *TINY, "--out", str(out), "--quiet"]
    assert main(base + ["--seeds", "0,1"]) == 0
    stamp = (out / "seed-0" / "summary.json").stat().st_mtime_ns
    assert main(base + ["--seeds", "0,1,2", "--resume"]) == 0
    assert (out / "seed-0" / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "seed-2" / "summary.json").exists()
    assert sorted(pd.read_csv(out / "seeds.csv")["seed"]) == [0, 1, 2]
    # a single run: finished → reused
    single = tmp_path / "one"
    assert main(["run", "fedasync", *TINY, "--out", str(single), "--quiet"]) == 0
    stamp = (single / "summary.json").stat().st_mtime_ns
    assert main(["run", "fedasync", *TINY, "--out", str(single), "--quiet", "--resume"]) == 0
    assert (single / "summary.json").stat().st_mtime_ns == stamp
    capsys.readouterr()
    assert main(["run", "fedasync", *TINY, "--out", str(single), "--resume", "--force"]) == 2


def test_sweep_default_folder_is_numbered_and_bad_jobs_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "fedasync", GRID[0], *TINY, "--quiet"]
    assert main(args) == 0 and main(args) == 0
    assert (tmp_path / "runs" / "sweep-fedasync" / "sweep.csv").exists()
    assert (tmp_path / "runs" / "sweep-fedasync-2" / "sweep.csv").exists()
    assert main(args + ["--out", "runs/sweep-fedasync", "--force"]) == 0
    capsys.readouterr()
    for bad in (["--jobs", "0"], ["--jobs", "-3"]):
        code = main(args + bad)
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("fedsim: error: --jobs: got") and len(err.splitlines()) == 1
    assert not (tmp_path / "runs" / "sweep-fedasync-3").exists()


def test_ray_sweep_gives_the_serial_runs(tmp_path):
    pytest.importorskip("ray")
    from fedsim.sweep import run_sweep

    run_sweep("fedasync", GRID[:1] + TINY, tmp_path / "serial", target=None, progress=False)
    run_sweep("fedasync", GRID[:1] + TINY, tmp_path / "ray", target=None, ray="local", jobs=2, progress=False)
    a, b = _traces(tmp_path / "serial"), _traces(tmp_path / "ray")
    assert len(a) == 2 and a == b


def test_bad_ray_address_is_one_line(tmp_path, capsys):
    code = main(["sweep", "--ray", "fedasync", GRID[0], *TINY, "--out", str(tmp_path / "s"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("fedsim: error: --ray: got 'fedasync'") and "\n" not in err
    assert not (tmp_path / "s").exists()
