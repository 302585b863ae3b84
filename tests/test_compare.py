"""``fedsim compare``: every run under the folders given is one row (its own summary's numbers), the
figures overlay them, and bad folders are one line."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from fedsim.cli import main

TINY = ["data.num_clients=4", "data.partition={method: iid}", "model.name=logreg", "train.local_steps=2",
        "stop={max_versions: 2}", "output.figures=false", "--quiet"]


def test_compare_lists_every_run_with_its_own_numbers(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["run", "default", *TINY, "algorithm.fedavg.clients_per_round=4", "--out", str(runs / "two")]) == 0
    assert main(["run", "fedasync", *TINY, "--seeds", "0,1", "--out", str(runs / "seeds")]) == 0
    # a run killed midway keeps its summary with status interrupted: listed, with that status
    stopped = runs / "seeds" / "seed-1" / "summary.json"
    stopped.write_text(json.dumps({**json.loads(stopped.read_text()), "status": "interrupted"}))
    out = tmp_path / "cmp"
    capsys.readouterr()
    assert main(["compare", str(runs / "two"), str(runs / "seeds"), "--out", str(out), "--target", "0.2"]) == 0
    printed = capsys.readouterr().out
    table = pd.read_csv(out / "comparison.csv")
    assert list(table["run"]) == ["two/fedavg", "two/fedbuff", "seeds/seed-0", "seeds/seed-1"]
    for _, r in table.iterrows():
        s = json.loads((tmp_path / "runs" / r["run"] / "summary.json").read_text())
        assert (r["algorithm"], r["seed"], r["status"]) == (s["algorithm"], s["seed"], s["status"])
        assert r["final_accuracy"] == pytest.approx(s["final_accuracy"])
        assert r["bytes_up"] == s["bytes_up"] and r["energy_j"] == pytest.approx(s["energy_j"])
        m = pd.read_csv(tmp_path / "runs" / r["run"] / "metrics.csv")
        hit = m[m["accuracy"] >= 0.2]
        assert r["time_to_target_s"] == pytest.approx(hit["t"].iloc[0] if len(hit) else float("inf"))
    assert "interrupted" in table["status"].tolist()
    md = (out / "comparison.md").read_text()
    assert md.count("\n") == 2 + 4 and "| seeds/seed-1 | fedasync | 1 | interrupted |" in md and md in printed
    assert " kB |" in md or " MB |" in md  # bytes for people
    for name in ("compare_accuracy.png", "compare_bytes.png", "compare_energy.png"):
        assert (out / name).stat().st_size > 0


def test_compare_bad_folders_are_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for args, words in ((["compare", str(tmp_path / "missing")], "does not exist"),
                        (["compare", str(tmp_path / "empty")], "holds no fedsim run"),
                        (["compare", str(tmp_path / "file.txt")], "is not a folder")):
        code = main(args + ["--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith("fedsim: error: RUN_DIR: ") and words in err and "\n" not in err
    assert not (tmp_path / "o").exists()
