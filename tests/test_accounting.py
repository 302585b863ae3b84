"""Every second, byte and joule the world charges is in the trace (the accounting invariant).

Each built-in scenario runs briefly, and so do the cases that cut work short: a synchronous round's deadline,
updates dropped as too stale, clients going offline (also mid split-learning exchange) and the run's end.
For each, the summary's bytes up and down, the server's busy time, the per-client compute and transmit joules
and seconds of ``energy.csv`` and the report's per-client seconds per phase equal their sums over the trace
(``tests/accounting.py``).  A cut upload is checked by hand on a fixed-rate link, and two deliberately broken
runs (a total changed, a cut record removed) show the check catches what it should.
"""
from __future__ import annotations

import json
import math
import shutil

import pytest

from accounting import accounting_mismatches, cut_records, trace_sums
from fedsim import load_scenario
from fedsim.runner import run_scenario
from fedsim.scenario import builtin_scenarios
from fedsim.system.devices import load_profile

SHORT = ["stop.max_time_s=2", "stop.max_versions=2", "output.figures=false", "eval.every_versions=null"]
#: scenarios whose algorithm trains for real (no systems-only mode), and the heavy one made smaller
TRAINS = {"semisfl": []}
SMALLER = {"cos2p": ["stop.max_time_s=0.5", "stop.max_versions=1", "algorithm.mask_rounds=1", "model.depth=4",
                     "output.checkpoints=null", "data.num_clients=2", "data.partition={method: iid}",
                     "devices.mix=[{profile: jetson-agx-orin-64gb}]"],
           "gas-cell-timing": ["data.options.num_samples=2000"]}


def _runs(out):
    """The run folders under ``out`` (a scenario of several algorithms writes one each)."""
    return sorted(p.parent for p in out.rglob("summary.json")
                  if (p.parent / "trace.jsonl").exists() or (p.parent / "trace.compact.gz").exists())


def _run(tmp_path, name, overrides):
    out = tmp_path / name
    run_scenario(load_scenario(name, overrides), out, progress=False)
    runs = _runs(out)
    assert runs
    return runs


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_builtin_scenario_accounts_for_everything(name, tmp_path):
    extra = TRAINS.get(name, ["train.systems_only=true"])
    for run in _run(tmp_path, name, SHORT + extra + SMALLER.get(name, [])):
        assert accounting_mismatches(run) == []


SYNC = ["data.num_clients=6", "model.name=logreg", "train.systems_only=true", "output.figures=false"]
#: a dedicated 1 Mbit/s uplink, no latency, and downlinks of 1 to 20 Mbit/s, so that some uploads miss a deadline
FIXED_UP = ["channel.uplink={model: fixed, mbps: 1.0}", "channel.downlink={model: fixed, mbps: [1.0, 20.0]}",
            "network.latency_s=0", "devices.jitter=0"]


def test_deadline_cuts_uploads_into_the_trace_with_what_they_sent(tmp_path):
    """On a 1 Mbit/s dedicated uplink with no latency, a cut upload sent (end - start) x 10^6 / 8 bytes (whole
    bytes) and spent airtime x the device's transmit power; the summary counts those bytes, not the plan."""
    sc = load_scenario("default", SYNC + FIXED_UP + [
        "algorithm=[{name: fedavg, clients_per_round: 5, deadline_s: 0.025}]", "stop={max_time_s: 1.0}",
        "devices.mix=[{profile: jetson-nano}]"])
    run_scenario(sc, tmp_path / "run", progress=False)
    cut = cut_records(tmp_path / "run")
    ups = cut[(cut["kind"] == "upload") & (cut["ended"] == "deadline")]
    assert len(ups) > 0
    tx_w = load_profile("jetson-nano").tx_power_w or 0.2  # the uplink's default when the profile has none
    for _, r in ups.iterrows():
        sent_s = r["end"] - r["start"] - r["wait"]
        assert r["bytes"] == math.floor(sent_s * 1e6 / 8 + 1e-6) or r["bytes"] == math.floor(sent_s * 1e6 / 8)
        assert r["bytes"] < r["planned_bytes"]
        assert r["airtime"] == pytest.approx(sent_s, rel=1e-9, abs=1e-12)
        assert r["energy"] == pytest.approx(r["airtime"] * tx_w, rel=1e-9)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    drops = cut[cut["ended"] == "deadline"]
    assert summary["dropped"] >= drops["client"].nunique()
    assert accounting_mismatches(tmp_path / "run") == []


def test_deadline_cut_clients_sort_as_the_slowest(tmp_path):
    """A client whose uploads are cut spends its cut time uploading (not "waiting for the round"), so its time
    per task is the longest."""
    from fedsim.output.panels import client_breakdown, gather

    sc = load_scenario("default", SYNC + [
        "channel.uplink={model: fixed, mbps: [0.05, 5.0]}", "devices.jitter=0",
        "algorithm=[{name: fedavg, clients_per_round: 6, deadline_s: 0.3}]", "stop={max_time_s: 3.0}"])
    run_scenario(sc, tmp_path / "run", progress=False)
    cut = cut_records(tmp_path / "run")
    cut_clients = set(cut.loc[cut["kind"] == "upload", "client"].astype(int))
    assert cut_clients
    t_end = json.loads((tmp_path / "run" / "summary.json").read_text())["virtual_time_s"]
    table = client_breakdown(gather(tmp_path / "run"), t_end)
    slowest = set(table["per_task_s"].sort_values(ascending=False).index[:len(cut_clients)].astype(int))
    assert slowest == cut_clients


@pytest.mark.parametrize("case,name,overrides,ended", [
    ("drop", "fedasync", ["algorithm.max_staleness=0", "algorithm.concurrency=4", "stop={max_time_s: 1.5}"], None),
    ("offline", "default", ["algorithm=[{name: fedavg, clients_per_round: 4}]", "availability.model=exponential",
                            "availability.mean_on_s=0.05", "availability.mean_off_s=0.05", "stop={max_time_s: 1.5}"],
     "offline"),
    ("run end", "default", ["algorithm=[{name: fedavg, clients_per_round: 4}]", "stop={max_time_s: 0.1037}"],
     "run_end"),
    ("split offline", "async-sfl", ["availability.model=exponential", "availability.mean_on_s=0.2",
                                        "availability.mean_off_s=0.1", "stop={max_time_s: 1.5}",
                                        "train.systems_only=true", "output.figures=false"], "offline"),
])
def test_cut_work_is_accounted(case, name, overrides, ended, tmp_path):
    base = SYNC if name != "async-sfl" else []
    runs = _run(tmp_path, name, base + overrides)
    for run in runs:
        assert accounting_mismatches(run) == []
    if ended is not None:
        cut = cut_records(runs[0])
        assert (cut["ended"] == ended).any(), f"{case}: no work cut ({ended})"


def test_the_check_catches_a_wrong_total_and_a_missing_cut_record(tmp_path):
    """Deliberately broken: a summary off by one byte, and a trace without one cut upload, are both named."""
    sc = load_scenario("default", SYNC + FIXED_UP + [
        "algorithm=[{name: fedavg, clients_per_round: 5, deadline_s: 0.025}]", "stop={max_time_s: 0.5}"])
    run = tmp_path / "run"
    run_scenario(sc, run, progress=False)
    assert accounting_mismatches(run) == []
    # a total that is not the trace's
    bad = tmp_path / "bad_total"
    shutil.copytree(run, bad)
    s = json.loads((bad / "summary.json").read_text())
    s["bytes_up"] += 1
    (bad / "summary.json").write_text(json.dumps(s))
    assert any(m.startswith("bytes_up") for m in accounting_mismatches(bad, breakdown=False))
    # the world's totals with one cut upload's record lost (as before cut work was recorded)
    lost = tmp_path / "lost_cut"
    shutil.copytree(run, lost)
    lines = (lost / "trace.jsonl").read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if '"upload"' in line and '"ended"' in line
             and json.loads(line)["energy"] > 0)
    del lines[i]
    (lost / "trace.jsonl").write_text("\n".join(lines) + "\n")
    found = accounting_mismatches(lost, breakdown=False)
    assert any(m.startswith("bytes_up") for m in found)
    assert any("transmit J" in m for m in found)
    assert trace_sums(lost)["bytes_up"] < trace_sums(run)["bytes_up"]
