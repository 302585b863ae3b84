"""Bringing your own algorithm, model, dataset and server optimiser: the public extension points.

The examples in docs/extending/ are written against the public API only and run here; FedNova and
FedAdam are checked against FedAvg bit for bit where they must coincide, SCAFFOLD against the closed-form
minimiser of a federated quadratic (where FedAvg stops at its client-drift fixed point).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsim
from fedsim.build import prepare_data
from fedsim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "extending"

MY_NETS = '''
from torch import nn

def make_net(input_shape, num_classes, hidden=32):
    n = 1
    for s in input_shape:
        n *= s
    return [nn.Sequential(nn.Flatten(), nn.Linear(n, hidden), nn.ReLU()), nn.Linear(hidden, num_classes)]
'''
MY_DATA = '''
import numpy as np

def load(rng, n=600):
    centres = rng.normal(0, 3, size=(3, 8))
    y = rng.integers(0, 3, size=n)
    x = (centres[y] + rng.normal(0, 1, size=(n, 8))).astype(np.float32)
    cut = n * 4 // 5
    return x[:cut], y[:cut], x[cut:], y[cut:]
'''
MY_ALGOS = '''
from fedsim.algorithms import FedAvg

class MyAvg(FedAvg):
    name = "myavg"
'''
MY_YAML = '''
name: mine
data: {name: "my_data:load", num_clients: 6, options: {n: 300}, partition: {method: iid}}
model: {name: "my_nets:make_net", options: {hidden: 16}}
train: {lr: 0.1, batch_size: 16, local_steps: 3}
algorithm: {name: "my_algos:MyAvg", clients_per_round: 3}
stop: {max_versions: 3}
eval: {every_versions: 1}
output: {figures: false}
'''


def _folder(tmp_path: Path) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    for name, text in (("my_nets.py", MY_NETS), ("my_data.py", MY_DATA), ("my_algos.py", MY_ALGOS), ("my.yaml", MY_YAML)):
        (d / name).write_text(textwrap.dedent(text))
    return d


def _fedsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from fedsim.cli import main; sys.exit(main())", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_own_model_data_and_algorithm_by_module_attribute(tmp_path):
    d = _folder(tmp_path)
    other = tmp_path / "elsewhere"  # run from another folder: names resolve from the scenario's folder
    other.mkdir()
    run = _fedsim("run", str(d / "my.yaml"), "--out", str(tmp_path / "out"), cwd=other)
    assert run.returncode == 0, run.stderr
    show = _fedsim("show", str(d / "my.yaml"), cwd=other)
    assert show.returncode == 0, show.stderr
    for ref in ("my_nets:make_net", "my_data:load", "my_algos:MyAvg"):
        assert ref in show.stdout
    metrics = list((tmp_path / "out").rglob("metrics.csv"))
    assert metrics, "the run wrote no metrics"


@pytest.mark.parametrize("override, field, words", [
    ("algorithm.name=my_algos:MyAvgg", "algorithm.name", "has no attribute 'MyAvgg'"),
    ("model.name=my_nets:make_nett", "model.name", "has no attribute 'make_nett'"),
    ("data.name=my_dataa:load", "data.name", "not found"),
    ("algorithm.name=my_nets:make_net", "algorithm.name", "not a subclass"),
])
def test_a_bad_reference_is_one_line_exit_2(tmp_path, override, field, words):
    d = _folder(tmp_path)
    out = _fedsim("show", str(d / "my.yaml"), override, cwd=d)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and words in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_a_module_that_fails_to_import_quotes_its_error(tmp_path):
    d = _folder(tmp_path)
    (d / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    out = _fedsim("show", str(d / "my.yaml"), "model.name=broken:f", cwd=d)
    assert out.returncode == 2 and "RuntimeError: no GPU here" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_factory_that_raises_is_one_line(tmp_path):
    d = _folder(tmp_path)
    out = _fedsim("run", str(d / "my.yaml"), "model.options.hidden=-3", "--out", str(tmp_path / "o"), cwd=d)
    assert out.returncode == 2 and "model.name" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_python_api_takes_the_objects_themselves(tmp_path):
    sys.path.insert(0, str(EXT))
    try:
        from fednova import FedNova
    finally:
        sys.path.remove(str(EXT))

    def blobs(rng, n=200):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int64)
        return x[:160], y[:160], x[160:], y[160:]

    globals()["blobs"] = blobs  # a top-level name, as a notebook's would be
    blobs.__qualname__ = "blobs"
    sc = fedsim.scenario_from_mapping({"data": {"name": blobs, "num_clients": 4, "partition": {"method": "iid"}},
                                       "model": {"name": "logreg"}, "algorithm": {"name": FedNova, "clients_per_round": 2},
                                       "stop": {"max_versions": 2}, "output": {"figures": False}})
    assert sc.algorithms[0].cls is FedNova and sc.algorithms[0].label == "fednova"
    assert sc.data.name.endswith(":blobs")
    run_scenario(sc, tmp_path / "api", progress=False)
    assert (tmp_path / "api" / "summary.json").exists() or list((tmp_path / "api").rglob("summary.json"))


def _tiny(algorithm: dict, **over) -> dict:
    base = {"data": {"name": "digits", "num_clients": 6, "partition": {"method": "dirichlet", "alpha": 0.5}},
            "model": {"name": "mlp", "hidden": 16}, "train": {"lr": 0.05, "batch_size": 16, "local_steps": 4},
            "devices": {"mix": [{"profile": "jetson-nano"}], "jitter": 0.0},
            "algorithm": algorithm, "stop": {"max_versions": 4}, "eval": {"every_versions": 1},
            "output": {"figures": False, "checkpoints": 4}}
    base.update(over)
    return base


def _final(out: Path) -> dict:
    return torch.load(sorted(out.rglob("v000004.pt"))[0])


def _run(mapping: dict, out: Path) -> dict:
    run_scenario(fedsim.scenario_from_mapping(mapping, source_dir=EXT), out, progress=False)
    return _final(out)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fednova_with_equal_local_steps_is_fedavg_bit_for_bit(tmp_path):
    a = _run(_tiny({"name": "fedavg", "clients_per_round": 3}), tmp_path / "avg")
    b = _run(_tiny({"name": "fednova:FedNova", "clients_per_round": 3}), tmp_path / "nova")
    assert _same(a, b)
    # with local epochs over unequal data sizes the steps differ, and FedNova does differ
    ep = {"lr": 0.05, "batch_size": 8, "local_epochs": 1}
    c = _run(_tiny({"name": "fedavg", "clients_per_round": 3}, train=ep), tmp_path / "avg2")
    d = _run(_tiny({"name": "fednova:FedNova", "clients_per_round": 3}, train=ep), tmp_path / "nova2")
    assert not _same(c, d)


def test_server_momentum_with_beta_0_and_lr_1_is_fedavg_bit_for_bit(tmp_path):
    a = _run(_tiny({"name": "fedavg", "clients_per_round": 3}), tmp_path / "avg")
    b = _run(_tiny({"name": "fedavg", "clients_per_round": 3,
                    "server_opt": {"name": "momentum", "lr": 1.0, "betas": [0.0, 0.99]}}), tmp_path / "m")
    assert _same(a, b)
    c = _run(_tiny({"name": "fedavg", "clients_per_round": 3, "server_opt": {"name": "adam", "lr": 0.01}}), tmp_path / "adam")
    assert not _same(a, c)


def test_fedadam_example_scenario_validates():
    sc = fedsim.load_scenario(str(EXT / "fedadam.yaml"))
    assert [s.label for s in sc.algorithms] == ["fedavg", "fedadam"]
    assert sc.algorithms[1].params.server_opt.name == "adam"


def test_server_opt_and_server_lr_together_are_refused():
    with pytest.raises(fedsim.errors.ConfigError, match="server_opt.lr"):
        fedsim.scenario_from_mapping(_tiny({"name": "fedavg", "server_lr": 0.5, "server_opt": {"name": "adam"}}))


def _quadratic(algorithm: str, rounds: int) -> dict:
    return {"data": {"name": "quadratic", "num_clients": 6, "partition": {"method": "natural"},
                     "options": {"builder": "heterogeneous", "dim": 5, "L": 1.0, "mu": 0.2, "hessian_spread": 0.5,
                                 "center_spread": 2.0, "samples": 16}},
            "model": {"name": "linear"}, "train": {"lr": 0.1, "batch_size": 16, "local_steps": 5},
            "devices": {"mix": [{"profile": "jetson-agx-orin-32gb"}], "jitter": 0.0},
            "algorithm": {"name": algorithm, "clients_per_round": 6}, "stop": {"max_versions": rounds},
            "eval": {"every_versions": rounds}, "output": {"figures": False, "checkpoints": rounds}}


def test_scaffold_reaches_the_global_minimiser_where_fedavg_drifts(tmp_path):
    rounds = 300
    runs = {}
    for alg in ("fedavg", "scaffold:Scaffold"):
        sc = fedsim.scenario_from_mapping(_quadratic(alg, rounds), source_dir=EXT)
        out = tmp_path / alg.split(":")[0]
        run_scenario(sc, out, progress=False)
        state = torch.load(sorted(out.rglob(f"v{rounds:06d}.pt"))[0])
        (w,) = [v for v in state.values() if v.is_floating_point()]
        runs[alg] = w.double().flatten().numpy()
    prep = prepare_data(sc)
    x, y = prep.data.train.x.double().numpy(), prep.data.train.y.double().numpy()
    eta, k = 0.1, 5
    A = [x[p].T @ x[p] / len(p) for p in prep.parts]
    b = [x[p].T @ y[p] / len(p) for p in prep.parts]
    w_star = np.linalg.solve(sum(A), sum(b))  # the global minimiser of (1/m) Σ f_i
    eye = np.eye(len(w_star))
    drift = [eye - np.linalg.matrix_power(eye - eta * a, k) for a in A]  # FedAvg's K full-batch steps: w ← M w + (I − M) c
    c = [np.linalg.solve(a, bb) for a, bb in zip(A, b)]
    w_fedavg = np.linalg.solve(sum(drift), sum(d @ ci for d, ci in zip(drift, c)))
    gap = np.linalg.norm(w_fedavg - w_star)
    assert gap > 1e-2  # the problem does drift
    assert np.linalg.norm(runs["fedavg"] - w_fedavg) < 1e-3 * gap
    assert np.linalg.norm(runs["scaffold:Scaffold"] - w_star) < 1e-3 * gap


def test_scaffold_costs_its_control_variates_on_both_links(tmp_path):
    import pandas as pd

    def bytes_of(alg: str) -> tuple[float, float]:
        out = tmp_path / alg.split(":")[0]
        run_scenario(fedsim.scenario_from_mapping(_quadratic(alg, 2), source_dir=EXT), out, progress=False)
        trace = pd.read_json(sorted(out.rglob("trace.jsonl"))[0], lines=True)
        return (trace.loc[trace.kind == "download", "bytes"].sum(), trace.loc[trace.kind == "upload", "bytes"].sum())

    down_avg, up_avg = bytes_of("fedavg")
    down_s, up_s = bytes_of("scaffold:Scaffold")
    assert down_s == 2 * down_avg and up_s == 2 * up_avg


@pytest.mark.parametrize("path", sorted(EXT.glob("*.py")))
def test_examples_are_short_and_use_public_names_only(path):
    text = path.read_text()
    assert len(text.splitlines()) < 120
    for line in text.splitlines():
        if line.startswith(("from fedsim", "import fedsim")):
            module = line.split()[1]
            assert module in ("fedsim", "fedsim.algorithms", "fedsim.config", "fedsim.errors", "fedsim.learn.state",
                              "fedsim.learn.sgd"), line


def test_a_package_registers_names_under_the_entry_points(tmp_path):
    """A distribution on the path declaring ``fedsim.algorithms`` / ``fedsim.models`` / ``fedsim.datasets``
    entry points: its names work like built-ins, and `fedsim scenarios` lists them."""
    pkg = tmp_path / "site"
    (pkg / "myext").mkdir(parents=True)
    (pkg / "myext" / "__init__.py").write_text(textwrap.dedent(MY_NETS) + textwrap.dedent(MY_DATA)
                                               + textwrap.dedent(MY_ALGOS))
    info = pkg / "myext-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myext\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[fedsim.algorithms]\nmyavg = myext:MyAvg\n\n[fedsim.models]\n"
                                           "tinynet = myext:make_net\n\n[fedsim.datasets]\nblobs = myext:load\n")
    scen = tmp_path / "ep.yaml"
    scen.write_text(MY_YAML.replace('"my_data:load"', "blobs").replace('"my_nets:make_net"', "tinynet")
                    .replace('"my_algos:MyAvg"', "myavg"))
    env = {**__import__("os").environ, "PYTHONPATH": f"{ROOT}{__import__('os').pathsep}{pkg}"}
    code = "import sys; from fedsim.cli import main; sys.exit(main())"
    listing = subprocess.run([sys.executable, "-c", code, "scenarios"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert listing.returncode == 0 and "algorithm `myavg` (myext:MyAvg)" in listing.stdout
    run = subprocess.run([sys.executable, "-c", code, "run", str(scen), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr


def test_width_algorithms_refuse_a_model_without_width_groups_in_one_line(tmp_path):
    d = _folder(tmp_path)
    out = _fedsim("run", str(d / "my.yaml"), "algorithm.name=heterofl", "--out", str(tmp_path / "o"), cwd=d)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_split_learning_cuts_a_user_block_list(tmp_path):
    d = _folder(tmp_path)
    out = _fedsim("run", str(d / "my.yaml"), "algorithm={name: async-sfl, cut: 1, concurrency: 2}",
                  "--out", str(tmp_path / "o"), cwd=d)
    assert out.returncode == 0, out.stderr


def test_a_loader_with_client_ids_gives_the_natural_partition_and_a_profile_file_beside_the_scenario(tmp_path):
    d = _folder(tmp_path)
    (d / "writers.py").write_text(textwrap.dedent('''
        import numpy as np

        def load(rng):
            x = rng.normal(size=(90, 4)).astype(np.float32)
            y = (x[:, 0] > 0).astype(np.int64)
            writer = np.repeat(["w-c", "w-a", "w-b"], 30)  # any labels; clients numbered in sorted order
            return x, y, x[:20], y[:20], writer
    '''))
    prof = (ROOT / "device_profiles" / "jetson-nano.yaml").read_text().replace("name: jetson-nano", "name: my-board")
    (d / "my-board.yaml").write_text(prof)
    sc = fedsim.load_scenario(str(d / "my.yaml"), ["data.name=writers:load", "data.num_clients=3", "data.options={}",
                                                   "data.partition.method=natural", "devices.mix=[{profile: my-board.yaml}]"])
    prep = prepare_data(sc)
    assert [list(p) for p in prep.parts] == [list(range(30, 60)), list(range(60, 90)), list(range(0, 30))]
    run_scenario(sc, tmp_path / "o", progress=False)
    assert "my-board" in (tmp_path / "o" / "energy.csv").read_text()


def _split(algorithm: dict, rounds: int = 3, **train) -> dict:
    return {"data": {"name": "digits", "num_clients": 6, "partition": {"method": "shards", "labels_per_client": 2}},
            "model": {"name": "mlp", "hidden": [32, 16]}, "train": {"lr": 0.05, "batch_size": 8, "local_steps": 3, **train},
            "devices": {"mix": [{"profile": "jetson-nano"}], "jitter": 0.0}, "algorithm": {"cut": 1, **algorithm},
            "stop": {"max_versions": rounds}, "eval": {"every_versions": rounds},
            "output": {"figures": False, "checkpoints": rounds}}


def _dispatched(out: Path) -> list[tuple[float, int]]:
    import json

    lines = sorted(out.rglob("trace.jsonl"))[0].read_text().splitlines()
    return [(r["t"], r["client"]) for r in map(json.loads, lines) if r["kind"] == "dispatch"]


def test_sequential_splitfed_example_is_minibatch_sfl_with_one_client(tmp_path):
    """The docs' sequential SplitFed: with one client a round it is MiniBatch-SFL bit for bit (same clients,
    through its family); with three, the server's sequential steps give another model."""
    seq = {"name": "splitfed:SequentialSplitFed"}
    mb = {"name": "minibatch-sfl", "batch_rule": "fixed"}
    a = _run(_split({**seq, "clients_per_round": 1}, rounds=4), tmp_path / "seq1")
    b = _run(_split({**mb, "clients_per_round": 1}, rounds=4), tmp_path / "mb1")
    assert _same(a, b) and _dispatched(tmp_path / "seq1") == _dispatched(tmp_path / "mb1")
    c = _run(_split({**seq, "clients_per_round": 3}, rounds=4), tmp_path / "seq3")
    d = _run(_split({**mb, "clients_per_round": 3}, rounds=4), tmp_path / "mb3")
    assert _dispatched(tmp_path / "seq3") == _dispatched(tmp_path / "mb3")
    assert not _same(c, d)


def test_sequential_splitfed_runs_systems_only_and_refuses_missing_steps(tmp_path):
    run_scenario(fedsim.scenario_from_mapping(_split({"name": "splitfed:SequentialSplitFed", "clients_per_round": 2},
                                                     systems_only=True), source_dir=EXT), tmp_path / "sys",
                 progress=False)
    assert _dispatched(tmp_path / "sys")
    sc = fedsim.scenario_from_mapping(_split({"name": "splitfed:SequentialSplitFed"}, local_steps=None,
                                             local_epochs=1), source_dir=EXT)
    with pytest.raises(fedsim.errors.ConfigError, match="algorithm.local_iterations"):
        run_scenario(sc, tmp_path / "o", progress=False)
