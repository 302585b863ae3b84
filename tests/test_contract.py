"""The extension contract: no silent no-ops, no hidden flags, user errors named as the user's.

Each test here failed before the fix it guards (issue: server_opt ignored by a user's rule, a FedAsync
variant drawing other clients, AsyncSlots hiding each update's base model, class hooks failing as instance
methods, a user's exception reported as an internal error, a natural partition silently dropping clients).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import fedsim
from fedsim.algorithms import AsyncSlots, FedAsync, FedBuff, Update
from fedsim.errors import ConfigError
from fedsim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "extending"


def _tiny(algorithm: dict, versions: int = 4, **over) -> dict:
    base = {"data": {"name": "digits", "num_clients": 6, "partition": {"method": "dirichlet", "alpha": 0.5}},
            "model": {"name": "mlp", "hidden": 16}, "train": {"lr": 0.05, "batch_size": 8, "local_epochs": 1},
            "devices": {"mix": [{"profile": "jetson-nano"}, {"profile": "jetson-agx-orin-32gb"}], "jitter": 0.1},
            "algorithm": algorithm, "stop": {"max_versions": versions}, "eval": {"every_versions": versions},
            "output": {"figures": False, "checkpoints": versions}}
    base.update(over)
    return base


def _run(mapping: dict, out: Path) -> tuple[dict, list[dict]]:
    """The last checkpoint and the trace of one run."""
    run_scenario(fedsim.scenario_from_mapping(mapping, source_dir=EXT), out, progress=False)
    state = torch.load(sorted(out.rglob("v*.pt"))[-1])
    trace = [json.loads(line) for line in sorted(out.rglob("trace.jsonl"))[0].read_text().splitlines()]
    return state, trace


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------------- server_opt on any rule

def test_server_opt_applies_to_a_user_sync_rule(tmp_path):
    """The docs' FedNova with FedAdam's server optimiser: it used to be accepted, saved and ignored."""
    nova = {"name": "fednova:FedNova", "clients_per_round": 3}
    plain, _ = _run(_tiny(nova), tmp_path / "plain")
    adam, _ = _run(_tiny({**nova, "server_opt": {"name": "adam", "lr": 0.03}}), tmp_path / "adam")
    assert not _same(plain, adam)
    # the optimiser's identity step (momentum with β₁ = 0 at η = 1) installs the rule's output itself
    ident, _ = _run(_tiny({**nova, "server_opt": {"name": "momentum", "lr": 1.0, "betas": [0.0, 0.9]}}), tmp_path / "id")
    assert _same(plain, ident)
    half, _ = _run(_tiny({**nova, "server_lr": 0.5}), tmp_path / "half")
    assert not _same(plain, half)


def test_server_step_is_applied_once_to_the_rule_output(tmp_path):
    """A rule that returns the same model it got: with server_lr the installed model stays the initial one
    (the step is toward the rule's output, not toward anything the shape computes itself)."""
    from fedsim.algorithms.server_opt import ServerOptConfig, ServerStep

    base = {"w": torch.tensor([1.0, 2.0])}
    agg = {"w": torch.tensor([3.0, 6.0])}
    assert torch.equal(ServerStep(0.5)(base, agg)["w"], torch.tensor([2.0, 4.0]))
    assert ServerStep(1.0)(base, agg) is agg  # the defaults leave the rule's output untouched
    sgd = ServerStep(1.0, ServerOptConfig(name="sgd", lr=0.25))
    assert torch.equal(sgd(base, agg)["w"], torch.tensor([1.5, 3.0]))


def test_server_opt_applies_to_ca2fl(tmp_path):
    """CA2FL's own rule used to ignore server_opt (only FedBuff's rule read it)."""
    alg = {"name": "ca2fl", "concurrency": 3, "buffer_size": 2}
    plain, _ = _run(_tiny(alg, train={"lr": 0.05, "batch_size": 8, "local_steps": 3}), tmp_path / "plain")
    adam, _ = _run(_tiny({**alg, "server_opt": {"name": "adam", "lr": 0.03}},
                         train={"lr": 0.05, "batch_size": 8, "local_steps": 3}), tmp_path / "adam")
    assert not _same(plain, adam)


# ------------------------------------------------------------------------------------- async variants

def _dispatches(trace: list[dict]) -> list[tuple[float, int]]:
    return [(r["t"], r["client"]) for r in trace if r["kind"] == "dispatch"]


def test_a_fedasync_subclass_changing_only_the_rule_draws_the_same_clients(tmp_path):
    """The docs' hinge FedAsync is the built-in with staleness: hinge bit for bit, and draws the same clients
    (it inherits fedasync's streams); a subclass naming its own family draws others."""
    cfg = {"alpha": 0.6, "concurrency": 3}
    train = {"lr": 0.05, "batch_size": 8, "local_steps": 3}
    mine, t_mine = _run(_tiny({"name": "fedasync_hinge:HingeFedAsync", **cfg, "hinge_a": 2.0, "hinge_b": 1.0},
                              versions=12, train=train), tmp_path / "mine")
    built, t_built = _run(_tiny({"name": "fedasync", **cfg, "staleness": "hinge", "staleness_a": 2.0,
                                 "staleness_b": 1.0}, versions=12, train=train), tmp_path / "builtin")
    assert _dispatches(t_mine) == _dispatches(t_built) and len(_dispatches(t_mine)) > 12
    assert _same(mine, built)
    stale = [r["staleness"] for r in t_mine if r["kind"] == "apply"]
    assert max(stale) > 1  # the hinge's discount was exercised


class _Renamed(FedAsync):
    """A user's variant that changes the rule's code only (here: not even its result), with any signature."""

    name = "renamed"

    def server_rule(self, batch, base, *rest):
        return super().server_rule(batch, base, *rest)


def test_a_renamed_fedasync_subclass_draws_fedasyncs_clients(tmp_path):
    """Keyed on its own name, a subclass used to draw other clients than the built-in it extends."""
    train = {"lr": 0.05, "batch_size": 8, "local_steps": 3}
    a, ta = _run(_tiny({"name": "fedasync", "concurrency": 3}, versions=6, train=train), tmp_path / "a")
    b, tb = _run(_tiny({"name": _Renamed, "concurrency": 3}, versions=6, train=train), tmp_path / "b")
    assert _dispatches(ta) == _dispatches(tb) and _same(a, b)


class _OwnStreams(FedAsync):
    name = "own-streams"
    family = "own-streams"  # says otherwise: streams of its own


def test_a_subclass_that_names_its_own_family_draws_its_own_clients(tmp_path):
    train = {"lr": 0.05, "batch_size": 8, "local_steps": 3}
    _, a = _run(_tiny({"name": "fedasync", "concurrency": 3}, versions=6, train=train), tmp_path / "a")
    _, b = _run(_tiny({"name": _OwnStreams, "concurrency": 3}, versions=6, train=train), tmp_path / "b")
    assert _dispatches(a) != _dispatches(b)


def test_shape_defaults_and_the_builtins_flags():
    assert (AsyncSlots.refill_on_arrival, AsyncSlots.serve_each, AsyncSlots.client_slots) == (True, False, False)
    assert (FedAsync.refill_on_arrival, FedAsync.serve_each) == (False, True)
    assert (FedBuff.refill_on_arrival, FedBuff.serve_each) == (True, False)
    for flag in ("refill_on_arrival", "serve_each", "client_slots", "update_kind"):
        assert flag in FedAsync.__dict__ or flag in AsyncSlots.__dict__
        assert f"``{flag} = " in AsyncSlots.__doc__  # every flag documented with its default
    doc = (ROOT / "docs" / "extending.md").read_text()
    for flag in ("refill_on_arrival", "serve_each", "client_slots", "update_kind", "family", "fits_submodels", "download_models",
                 "upload_what", "step_what", "version_per_round", "idle_s", "watch_participation"):
        assert f"`{flag}" in doc, flag


class _Bases(FedAsync):
    """Checks that each update's base model reaches the rule: the very state its task was dispatched with."""

    name = "bases-check"

    def __init__(self, ctx, config):
        super().__init__(ctx, config)
        self.bases_of: dict[int, dict] = {}
        self.checked = 0

    def client_job(self, client, base, version, task, assignment):
        self.bases_of[id(assignment)] = base
        return super().client_job(client, base, version, task, assignment)

    def server_rule(self, batch: list[Update], base, bases):
        for u, b in zip(batch, bases):
            assert b is self.bases_of.pop(id(u.info["assignment"]))
            self.checked += 1
        return super().server_rule(batch, base, bases)


def test_async_slots_pass_each_updates_base_model(tmp_path):
    """Several clients re-dispatched at one version (a buffer of 2, refilled on arrival) get their own bases."""
    sc = fedsim.scenario_from_mapping(_tiny({"name": _Bases, "concurrency": 4, "max_staleness": 100}, versions=10,
                                            train={"lr": 0.05, "batch_size": 8, "local_steps": 2}))
    run_scenario(sc, tmp_path / "o", progress=False)
    trace = [json.loads(x) for x in next((tmp_path / "o").rglob("trace.jsonl")).read_text().splitlines()]
    assert sum(r["kind"] == "apply" for r in trace) == 10


def test_an_async_rule_without_bases_is_refused_when_the_class_is_made():
    with pytest.raises(TypeError, match=r"server_rule must take \(self, batch, base, bases\)"):
        class Old(FedAsync):  # noqa: F841 - the old two-argument signature
            def server_rule(self, batch, base):
                return base, [1.0]


# ------------------------------------------------------------------------------------- hooks and user errors

def test_a_class_hook_written_as_an_instance_method_is_refused_in_one_line():
    with pytest.raises(TypeError, match=r"buffer_size_of must be a @classmethod"):
        class Buffered(FedBuff):  # noqa: F841
            def buffer_size_of(self, config):
                return 3


def _fedsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from fedsim.cli import main; sys.exit(main())", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


BROKEN = '''
from fedsim.algorithms import FedAvg

class Broken(FedAvg):
    name = "broken"

    def server_rule(self, updates, base):
        seen = {}
        return seen[(18, 0)]
'''


def test_an_exception_in_user_code_names_it_and_exits_4(tmp_path):
    (tmp_path / "my_algos.py").write_text(textwrap.dedent(BROKEN))
    (tmp_path / "s.yaml").write_text(textwrap.dedent('''
        data: {name: digits, num_clients: 4}
        model: {name: mlp, hidden: 8}
        train: {local_steps: 1}
        algorithm: {name: "my_algos:Broken", clients_per_round: 2}
        stop: {max_versions: 2}
        output: {figures: false}
    '''))
    out = _fedsim("run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 4, out.stderr
    lines = [x for x in out.stderr.strip().splitlines() if x.startswith("fedsim:")]  # not the progress bar
    assert len(lines) == 1 and "internal error" not in lines[0] and "Traceback" not in out.stderr, out.stderr
    line = BROKEN.strip().splitlines().index("        return seen[(18, 0)]") + 2  # the file starts with a newline
    assert lines[0].startswith("fedsim: error in your code: my_algos:Broken.server_rule (")
    assert f"my_algos.py:{line}): KeyError: (18, 0)" in lines[0]


def test_an_internal_error_is_still_internal():
    from fedsim.components import user_code_error

    try:
        fedsim.algorithms.staleness_weight(-1.0)
    except ValueError as exc:
        assert user_code_error(exc) is None


# ------------------------------------------------------------------------------------- natural partition

def test_a_natural_partition_with_fewer_clients_than_ids_is_refused(tmp_path):
    (tmp_path / "sites.py").write_text(textwrap.dedent('''
        import numpy as np

        def load(rng):
            x = rng.normal(size=(80, 4)).astype(np.float32)
            y = (x[:, 0] > 0).astype(np.int64)
            return x, y, x[:10], y[:10], np.repeat(np.arange(8), 10)
    '''))
    with pytest.raises(ConfigError, match=r"data.num_clients: 5 clients requested but the dataset has 8 natural "
                                          r"clients \(30 samples of the last 3 would go unused\)"):
        from fedsim.build import prepare_data

        prepare_data(fedsim.scenario_from_mapping({"data": {"name": "sites:load", "num_clients": 5,
                                                            "partition": {"method": "natural"}},
                                                   "model": {"name": "logreg"}, "stop": {"max_versions": 1}},
                                                  source_dir=tmp_path))


from dataclasses import dataclass  # noqa: E402

from fedsim.algorithms import MiniBatchSFL, ServerOptConfig  # noqa: E402


class _SplitWithOpt(MiniBatchSFL):
    name = "split-with-opt"

    @dataclass
    class Config(MiniBatchSFL.Config):
        server_opt: ServerOptConfig | None = None


def test_a_split_config_with_server_opt_is_refused_rather_than_ignored(tmp_path):
    sc = fedsim.scenario_from_mapping(_tiny({"name": _SplitWithOpt, "cut": 1, "clients_per_round": 2,
                                             "server_opt": {"name": "adam"}}, train={"local_steps": 2}))
    with pytest.raises(ConfigError, match="algorithm.server_opt: split learning has no server rule"):
        run_scenario(sc, tmp_path / "o", progress=False)


def test_every_name_in_the_contract_table_is_exported():
    """The docs' table of public names: each bare name imports from fedsim.algorithms, each dotted one from
    its module."""
    import importlib
    import re

    import fedsim.algorithms as algorithms

    doc = (ROOT / "docs" / "extending.md").read_text()
    table = doc[doc.index("## The public names"):doc.index("## What every algorithm sees")]
    names = [n for row in table.splitlines() if row.startswith("| `")
             for n in re.findall(r"`([A-Za-z_][\w.]*)(?:\([^`]*\))?`", row.split("|")[1])]
    assert len(names) > 20
    for name in names:
        if "." in name:
            module, _, attr = name.rpartition(".")
            try:
                obj = importlib.import_module(name)
            except ImportError:
                obj = getattr(importlib.import_module(module), attr)
            assert obj is not None, name
        else:
            assert name in algorithms.__all__ and getattr(algorithms, name) is not None, name


from fedsim.algorithms import SlotsConfig  # noqa: E402
from fedsim.learn.state import masked_weighted_average  # noqa: E402


class _MeanOfTwo(AsyncSlots):
    """A user's AsyncSlots algorithm on the shape's config base, with the server step's fields."""

    name = "mean-of-two"

    @dataclass
    class Config(SlotsConfig):
        server_lr: float = 1.0
        server_opt: ServerOptConfig | None = None

    @classmethod
    def buffer_size_of(cls, config):
        return 2

    def server_rule(self, batch, base, bases):
        return masked_weighted_average(batch, base), [1.0 / len(batch)] * len(batch)


def test_a_user_async_slots_algorithm_on_slots_config_gets_the_server_step(tmp_path):
    train = {"lr": 0.05, "batch_size": 8, "local_steps": 2}
    plain, trace = _run(_tiny({"name": _MeanOfTwo, "concurrency": 3}, versions=5, train=train), tmp_path / "a")
    half, _ = _run(_tiny({"name": _MeanOfTwo, "concurrency": 3, "server_lr": 0.5}, versions=5, train=train),
                   tmp_path / "b")
    assert not _same(plain, half)
    assert sum(r["kind"] == "apply" for r in trace) == 10  # two updates a version
    # the shape's default flags: one aggregate service per full buffer, none per arrival
    assert [r["what"] for r in trace if r["kind"] == "server"] == ["aggregate"] * 5
