"""The vector FedAvg engine writes the event engine's trace byte for byte, and refuses what it does not cover.

The event engine is the reference: SimPy processes every download, compute and upload as its own event.
The vector engine computes a round's chains in numpy and must reproduce the same records, in SimPy's order
(ties included: with one device class and a fixed link every client's events fall at the same instants),
the same energy table and the same totals.
"""
from __future__ import annotations

import copy
import filecmp
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.algorithms import FedAvg
from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.learn.data import ArrayDataset, FederatedData
from fedsim.build import Prepared
from fedsim.runner import run_scenario, run_variant
from fedsim import scenario_from_mapping
from fedsim.sim.trace import Trace, iter_trace

BASE: dict[str, Any] = {
    "name": "vector", "seed": 3, "data": {"num_clients": 60}, "model": {"name": "logreg"},
    "train": {"systems_only": True, "batch_size": 2, "local_epochs": 1},
    "devices": {"mix": [{"profile": "jetson-nano"}]},
    "channel": {"uplink": {"model": "fixed", "mbps": 5.0}, "downlink": {"model": "fixed", "mbps": 20.0}},
    "algorithm": {"name": "fedavg", "clients_per_round": 20},
    "stop": {"max_versions": 3}, "eval": {"every_versions": None},
    "output": {"figures": False, "flush_every": 50},
}


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        d = out
        *path, last = key.split(".")
        for k in path:
            d = d.setdefault(k, {})
        d[last] = value
    return out


def _prepared(clients: int, uneven: bool | list[int]) -> Prepared:
    n = 3 * clients if not isinstance(uneven, list) else sum(uneven)
    g = torch.Generator().manual_seed(0)
    train = ArrayDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g), 2, "stand-in")
    test = ArrayDataset(torch.randn(20, 4, generator=g), torch.randint(0, 2, (20,), generator=g), 2, "stand-in")
    if isinstance(uneven, list):  # these sizes, in client order
        parts = np.split(np.arange(n, dtype=np.int64), np.cumsum(uneven)[:-1])
    elif uneven:  # clients of 1..many samples: different step counts, FLOPs and compute times
        cuts = np.sort(np.random.default_rng(1).choice(np.arange(1, n), clients - 1, replace=False))
        parts = np.split(np.arange(n, dtype=np.int64), cuts)
    else:
        parts = np.array_split(np.arange(n, dtype=np.int64), clients)
    return Prepared(FederatedData(train, test), list(parts))


def _run(tmp: Path, engine: str, extra: dict, uneven: bool | list[int] = False) -> tuple[Path, dict]:
    sc = scenario_from_mapping(_merge(BASE, {**extra, "algorithm.engine": engine}))
    out = tmp / engine
    summary = run_variant(sc, sc.algorithms[0], out, _prepared(sc.data.num_clients, uneven), progress=False)
    return out, summary


CASES = {
    # one device class, one fixed link, equal data: every client's events tie (SimPy's insertion order decides)
    "lockstep ties": {"devices.jitter": 0.0},
    "all clients, compact trace": {"algorithm.clients_per_round": 60, "output.trace_format": "compact"},
    "per-client rates, jitter, two device classes": {
        "channel.uplink.mbps": [1.0, 10.0], "channel.downlink.mbps": [5.0, 50.0], "devices.jitter": 0.3,
        "devices.mix": [{"profile": "jetson-nano", "weight": 1}, {"profile": "raspberry-pi-4", "weight": 2}]},
    "own throughputs and profiles, with jitter": {
        "devices.jitter": 0.2, "devices.mix": [{"profile": "jetson-nano", "flops_per_s": [2.0e3, 2.0e4]},
                                               {"profile": "raspberry-pi-4"}]},
    "fdma both ways, no latency": {"network.access": "fdma", "network.downlink_access": "fdma", "network.latency_s": 0.0},
    "path loss with fading and mobility": {"channel": {"preset": "gas-cell", "mobility": {"kind": "random_waypoint"}},
                                           "stop.max_versions": 4},
    # exact ties between different clients' different events: logreg on 4 features costs 32 FLOPs per sample
    # and 40 bytes, so at 384 FLOP/s a 3-sample client computes 0.25 s and a 6-sample one 0.5 s, and at
    # 1280 bit/s an upload takes 0.25 s: a small client's upload ends with a large one's compute, and SimPy
    # writes the compute first (its timeout was scheduled earlier), whatever the client numbers
    "ties across kinds": {"_sizes": [3, 6] * 10, "devices.mix": [{"profile": "jetson-nano", "flops_per_s": 384.0}],
                          "devices.jitter": 0.0, "channel.uplink.mbps": 0.00128, "channel.downlink": {"model": "ideal"},
                          "network.latency_s": 0.0},
    "evaluation clock and a time limit cut a round": {"eval.every_s": 0.7, "stop.max_versions": None,
                                                      "stop.max_time_s": 3.3, "network.access": "fdma"},
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_engine_writes_the_event_engines_trace(tmp_path, name):
    extra = dict(CASES[name])
    uneven = extra.pop("_sizes", name != "lockstep ties")
    a, sa = _run(tmp_path, "event", extra, uneven)
    b, sb = _run(tmp_path, "vector", extra, uneven)
    trace = "trace.compact.gz" if (a / "trace.compact.gz").exists() else "trace.jsonl"
    assert sa["trace_events"] > 100
    assert filecmp.cmp(a / trace, b / trace, shallow=False), f"{name}: traces differ"
    assert filecmp.cmp(a / "energy.csv", b / "energy.csv", shallow=False)
    for key in ("versions", "updates_applied", "bytes_up", "bytes_down", "energy_j", "server", "virtual_time_s",
                "stop_reason"):
        assert sa[key] == sb[key], key
    if name in ("lockstep ties", "ties across kinds"):  # the ties are real: many records share one instant
        recs = [(r["t"], r["kind"]) for r in iter_trace(a / trace, kinds=["download", "compute", "upload"])]
        times = [t for t, _ in recs]
        assert len(set(times)) < len(times) / 5
        if name == "ties across kinds":
            assert {k for t, k in recs if t == 0.5} == {"compute", "upload"}


def test_write_columns_gives_the_bytes_of_one_by_one_emits(tmp_path):
    """Mixed kinds merged in a given order, with constants, None, lists, nan and inf, flushing mid-way."""
    rng = np.random.default_rng(0)
    n = 300
    ta, tb = np.sort(rng.random(n)), np.sort(rng.random(n))
    fa = {"client": np.arange(n), "start": rng.random(n), "bytes": 40, "rate": [None if i % 7 else float(i) for i in range(n)],
          "what": "train", "x": np.where(np.arange(n) % 5 == 0, np.nan, 1.5)}
    fb = {"client": np.arange(n)[::-1].copy(), "ids": [[1, 2]] * n, "flag": True, "v": np.inf}
    order = np.argsort(np.concatenate([ta, tb]), kind="stable")

    def row(fields: dict, i: int) -> dict:
        return {k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) if isinstance(v, (np.ndarray, list)) else v
                for k, v in fields.items()}

    for fmt in ("jsonl", "compact", None):
        traces = {}
        for mode in ("emit", "columns"):
            tr = Trace(None if fmt is None else tmp_path / f"{fmt}-{mode}", flush_every=37, fmt=fmt or "jsonl")
            tr.emit(0, "start", a=1)
            if mode == "emit":
                for i in order.tolist():
                    kind, t, f, j = ("a", ta, fa, i) if i < n else ("b", tb, fb, i - n)
                    tr.emit(float(t[j]), kind, **row(f, j))
            else:
                tr.write_columns([("a", ta, fa), ("b", tb, fb)], order, chunk=100)
            tr.emit(2.0, "end", a=1)
            traces[mode] = json.dumps(tr.records) if fmt is None else None
            assert tr.count == 2 * n + 2
            tr.close()
        if fmt is None:
            assert traces["emit"] == traces["columns"]
        else:
            assert (tmp_path / f"{fmt}-emit").read_bytes() == (tmp_path / f"{fmt}-columns").read_bytes()


@pytest.mark.parametrize("override, field", [
    ("train.systems_only=false", "train.systems_only"),
    ("algorithm.deadline_s=5", "algorithm.deadline_s"),
    ("availability.model=bernoulli", "availability.model"),
    ("network.access=tdma", "network.access"),
    ("network.topology.kind=hierarchical", "network.topology.kind"),
])
def test_vector_engine_refuses_what_it_does_not_cover(capsys, tmp_path, override, field):
    args = ["run", "default", "algorithm=fedavg", "algorithm.engine=vector", "train.systems_only=true",
            "stop.max_time_s=null", "stop.max_versions=2", "output.figures=false", override,
            "--out", str(tmp_path / "out"), "--quiet"]
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and field in err and "engine: vector" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # refused before writing


def test_engine_is_plain_fedavgs_setting(capsys, tmp_path):
    """FedProx and the other algorithms built on FedAvg's rounds do not take the setting at all."""
    code = main(["run", "default", "algorithm=fedprox", "algorithm.engine=vector", "--out", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "algorithm.engine" in err and len(err.splitlines()) == 1


class _PlainAvg(FedAvg):
    """A user's FedAvg that changes nothing: it takes the vector loop its config asks for."""

    name = "plain-avg"


class _PickyAvg(FedAvg):
    """A user's FedAvg with its own client selection, which the vector loop would not call."""

    name = "picky-avg"

    def select(self, k, round_):
        return list(range(k))


def test_a_subclass_chooses_its_loop_from_its_config(tmp_path):
    """The loop comes from the config (``engine``), not from the class's identity: a subclass that overrides no
    decision runs the vector loop and writes FedAvg's trace; one that overrides a decision the vector loop never
    calls is refused in one line rather than run on the event loop in silence."""
    data = _merge(BASE, {"algorithm": {"name": "fedavg", "engine": "vector"}})
    run_scenario(scenario_from_mapping(data), tmp_path / "fedavg", progress=False)
    data["algorithm"]["name"] = _PlainAvg
    run_scenario(scenario_from_mapping(data), tmp_path / "plain", progress=False)
    trace = "trace.compact.gz" if (tmp_path / "fedavg" / "trace.compact.gz").exists() else "trace.jsonl"
    assert filecmp.cmp(tmp_path / "fedavg" / trace, tmp_path / "plain" / trace, shallow=False)
    data["algorithm"]["name"] = _PickyAvg
    with pytest.raises(ConfigError, match="overrides select.*engine: event"):
        run_scenario(scenario_from_mapping(data), tmp_path / "picky", progress=False)
