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


# ------------------------------------------------------------------ two runs side by side (report.html)

import copy  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from fedsim import scenario_from_mapping  # noqa: E402
from fedsim.output.compare import compare  # noqa: E402
from fedsim.output.panels import DRAW_ORDER, client_breakdown, gather  # noqa: E402
from fedsim.output.side_by_side import NUMBERS, PLOT_W, SHARE_THRESHOLD, _LEFT  # noqa: E402
from fedsim.runner import run_scenario  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The tests' tiny FedAvg scenario twice, differing in one setting: a 30 ms deadline, which drops the
    slow-uplink clients, against none."""
    from conftest import TINY as TINY_MAPPING

    root = tmp_path_factory.mktemp("sbs")
    for name, deadline in (("a", None), ("b", 0.03)):
        raw = copy.deepcopy(TINY_MAPPING)
        raw["algorithm"] = {"name": "fedavg", "clients_per_round": 3, "deadline_s": deadline}
        raw["stop"] = {"max_versions": 6}
        run_scenario(scenario_from_mapping(raw), root / name, progress=False)
    return root


def _shares(run: Path) -> dict[str, float]:
    """Each breakdown label's seconds over all clients' time, from the run's trace (the panels' own table)."""
    s = json.loads((run / "summary.json").read_text())
    t = client_breakdown(gather(run), s["virtual_time_s"], s["num_clients"])
    return {k: float(t[k].sum()) / (len(t) * s["virtual_time_s"]) for k in DRAW_ORDER}


def _summary_numbers(run: Path) -> dict[str, float]:
    s = json.loads((run / "summary.json").read_text())
    return {"final_accuracy": s["final_accuracy"], "best_accuracy": s["best_accuracy"],
            "virtual_time_s": s["virtual_time_s"], "bytes": s["bytes_up"] + s["bytes_down"], "bytes_up": s["bytes_up"],
            "bytes_down": s["bytes_down"], "utilisation": s["server"]["utilisation"],
            "mean_staleness": s["mean_staleness"], "versions": s["versions"], "dropped": s["dropped"]}


def test_two_runs_differing_in_the_deadline_name_that_setting_and_the_moved_numbers(two_runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(two_runs / "a"), str(two_runs / "b"), "--out", str(out)]) == 0
    assert "report.html side by side" in capsys.readouterr().out
    diff = json.loads((out / "differences.json").read_text())
    # exactly the one setting that differs
    assert diff["settings"] == [{"key": "algorithm.deadline_s", "a": None, "b": 0.03}]
    # the numbers named are exactly those whose summaries differ
    na, nb = _summary_numbers(two_runs / "a"), _summary_numbers(two_runs / "b")
    assert {k for k, _, _ in NUMBERS} == set(na)
    want = {k for k in na if na[k] != pytest.approx(nb[k], rel=1e-9, abs=1e-12)}
    assert {n["key"] for n in diff["numbers"]} == want
    assert {"virtual_time_s", "dropped", "final_accuracy"} <= want and na["dropped"] == 0 and nb["dropped"] > 0
    for n in diff["numbers"]:
        assert (n["a"], n["b"]) == (pytest.approx(na[n["key"]]), pytest.approx(nb[n["key"]]))
    # the breakdown shares named are exactly those that moved more than the threshold (the deadline cuts the
    # waiting for the round's stragglers)
    sa, sb = _shares(two_runs / "a"), _shares(two_runs / "b")
    moved = {k for k in DRAW_ORDER if abs(sa[k] - sb[k]) > SHARE_THRESHOLD}
    assert {s["key"] for s in diff["shares"]} == moved and "round_wait" in moved
    assert sb["round_wait"] < sa["round_wait"]
    page = (out / "report.html").read_text()
    assert page.count("<li class='sbs-") == len(diff["settings"]) + len(diff["numbers"]) + len(diff["shares"])
    assert "data-key='algorithm.deadline_s'" in page and "No differences" not in page


def test_a_run_compared_with_its_copy_names_no_differences_and_a_tampered_copy_names_the_tampering(two_runs,
                                                                                                   tmp_path):
    copy_dir = tmp_path / "a-copy"
    shutil.copytree(two_runs / "a", copy_dir)
    compare([two_runs / "a", copy_dir], tmp_path / "same")
    diff = json.loads((tmp_path / "same" / "differences.json").read_text())
    assert diff["settings"] == [] and diff["numbers"] == [] and diff["shares"] == []
    assert "No differences" in (tmp_path / "same" / "report.html").read_text()
    # the check can fail: change one setting and one number of the copy, and exactly those are named
    sc = copy_dir / "scenario.yaml"
    sc.write_text(sc.read_text().replace("local_steps: 3", "local_steps: 4"))
    summ = copy_dir / "summary.json"
    summ.write_text(json.dumps({**json.loads(summ.read_text()), "mean_staleness": 1.5}))
    compare([two_runs / "a", copy_dir], tmp_path / "tampered")
    diff = json.loads((tmp_path / "tampered" / "differences.json").read_text())
    assert diff["settings"] == [{"key": "train.local_steps", "a": 3, "b": 4}]
    assert [n["key"] for n in diff["numbers"]] == ["mean_staleness"] and diff["shares"] == []


def test_more_than_two_runs_write_no_side_by_side_page(two_runs, tmp_path):
    shutil.copytree(two_runs / "a", tmp_path / "runs" / "c")
    compare([two_runs / "a", two_runs / "b", tmp_path / "runs" / "c"], tmp_path / "three")
    assert (tmp_path / "three" / "comparison.csv").exists() and not (tmp_path / "three" / "report.html").exists()


def test_the_side_by_side_page_loads_in_chromium_on_one_time_axis(two_runs, tmp_path):
    from test_report_browser import BROWSER, Chrome

    if BROWSER is None:
        pytest.skip("no Chromium installed")
    out = tmp_path / "cmp"
    compare([two_runs / "a", two_runs / "b"], out)
    chrome = Chrome(BROWSER, tmp_path / "profile")
    try:
        chrome.page("Runtime.enable")
        chrome.page("Log.enable")
        chrome.page("Page.enable")
        chrome.page("Page.navigate", url=(out / "report.html").resolve().as_uri())
        chrome.wait_for("Page.loadEventFired")
        assert chrome.errors() == []
        assert chrome.js("document.querySelectorAll('#sbs-timelines rect').length") > 20
        assert chrome.js("document.querySelectorAll('#sbs-breakdown rect').length") > 12
        # each run's end is drawn at its own time on the one axis: the longer run's at the axis' end
        ends = chrome.js("[...document.querySelectorAll('#sbs-timelines line[stroke-dasharray]')]"
                         ".map(l => +l.getAttribute('x1'))")
    finally:
        chrome.close()
    ta = json.loads((two_runs / "a" / "summary.json").read_text())["virtual_time_s"]
    tb = json.loads((two_runs / "b" / "summary.json").read_text())["virtual_time_s"]
    t_max = max(ta, tb)
    assert ends == [pytest.approx(_LEFT + PLOT_W * ta / t_max, abs=0.01), pytest.approx(_LEFT + PLOT_W * tb / t_max,
                                                                                        abs=0.01)]
    assert np.isclose(max(ends), _LEFT + PLOT_W)
