"""Generated datasets cached by their options: the same arrays as generating them, and a systems-only run
whose trace does not depend on where its data came from."""
from __future__ import annotations

import filecmp

import numpy as np
import torch

from fedsim.learn.data import cache_dir, load_dataset
from fedsim.runner import run_scenario
from fedsim import scenario_from_mapping


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, s).x, getattr(b, s).x) and torch.equal(getattr(a, s).y, getattr(b, s).y)
               for s in ("train", "test"))


def test_cache_hit_equals_a_fresh_generation_and_keys_on_options(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSIM_CACHE_DIR", "off")
    assert cache_dir() is None
    fresh = load_dataset("mnist1d", options={"num_samples": 300})
    monkeypatch.setenv("FEDSIM_CACHE_DIR", str(tmp_path))
    first = load_dataset("mnist1d", options={"num_samples": 300})  # generates and stores
    assert len(list(tmp_path.glob("mnist1d-*.npz"))) == 1
    np.random.seed(5)
    state = np.random.get_state()[1].copy()
    hit = load_dataset("mnist1d", options={"num_samples": 300})
    assert np.array_equal(np.random.get_state()[1], state)
    assert _same(fresh, first) and _same(fresh, hit)
    other = load_dataset("mnist1d", options={"num_samples": 300, "seed": 7})
    assert len(list(tmp_path.glob("mnist1d-*.npz"))) == 2 and not torch.equal(other.train.x, fresh.train.x)


def test_an_unreadable_cache_file_is_regenerated(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSIM_CACHE_DIR", str(tmp_path))
    good = load_dataset("mnist1d", options={"num_samples": 200})
    (path,) = tmp_path.glob("mnist1d-*.npz")
    path.write_bytes(b"not a zip file")
    again = load_dataset("mnist1d", options={"num_samples": 200})
    assert _same(good, again)
    assert np.load(path)["x"].shape == (160, 40)  # rewritten whole


def test_systems_only_trace_is_the_same_from_the_cache_as_from_a_fresh_dataset(tmp_path, monkeypatch):
    sc = scenario_from_mapping({
        "name": "cached", "seed": 1,
        "data": {"name": "mnist1d", "num_clients": 8, "partition": {"method": "shards", "labels_per_client": 2},
                 "options": {"num_samples": 1000}},
        "model": {"name": "mlp"}, "train": {"batch_size": 16, "local_epochs": 1, "systems_only": True},
        "devices": {"mix": [{"profile": "jetson-nano"}], "jitter": 0.2},
        "algorithm": {"name": "fedavg", "clients_per_round": 4}, "stop": {"max_versions": 4},
        "eval": {"every_versions": None}, "output": {"figures": False},
    })
    monkeypatch.setenv("FEDSIM_CACHE_DIR", "off")
    run_scenario(sc, tmp_path / "fresh", progress=False)
    monkeypatch.setenv("FEDSIM_CACHE_DIR", str(tmp_path / "cache"))
    run_scenario(sc, tmp_path / "store", progress=False)
    run_scenario(sc, tmp_path / "hit", progress=False)
    assert len(list((tmp_path / "cache").glob("mnist1d-*.npz"))) == 1
    for run in ("store", "hit"):
        assert filecmp.cmp(tmp_path / "fresh" / "trace.jsonl", tmp_path / run / "trace.jsonl", shallow=False)


def test_a_cache_hit_does_not_import_the_generator(tmp_path, monkeypatch):
    """The generator's defaults are remembered beside the cache, equal to the package's own, so a run whose
    dataset is cached never imports ``mnist1d`` (and the scipy, requests and pyplot it pulls in)."""
    import json
    import os
    import subprocess
    import sys

    from mnist1d.data import get_dataset_args

    monkeypatch.setenv("FEDSIM_CACHE_DIR", str(tmp_path))
    load_dataset("mnist1d", options={"num_samples": 200})
    (memo,) = tmp_path.glob("mnist1d-defaults-*.json")
    assert json.loads(memo.read_text()) == {k: v for k, v in get_dataset_args(as_dict=True).items() if k != "url"}
    code = ("import sys; from fedsim.learn.data import load_dataset; load_dataset('mnist1d', options={'num_samples': 200}); "
            "print(sorted(m for m in ('mnist1d', 'requests', 'matplotlib.pyplot') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FEDSIM_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
    memo.write_text("not json")  # an unreadable memo: the package's defaults, written again
    assert _same(load_dataset("mnist1d", options={"num_samples": 200}), load_dataset("mnist1d", options={"num_samples": 200}))
    assert json.loads(memo.read_text()) == {k: v for k, v in get_dataset_args(as_dict=True).items() if k != "url"}
