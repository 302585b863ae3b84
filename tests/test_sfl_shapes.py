"""The split-learning loop shapes (``SplitRounds``, ``SplitSlots``): the framework writes every ``dispatch``,
``apply``, ``round`` and ``drop`` record, and the records of a run are consistent with one another."""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fedsim import scenario_from_mapping
from fedsim.algorithms import SplitConfig, SplitRounds, SplitSession
from fedsim.runner import run_scenario
from fedsim.scenario import load_raw

ROOT = Path(__file__).resolve().parents[1]
#: the split-learning modules that supply decisions only
DECISION_MODULES = ["fedsim/algorithms/minibatch_sfl.py", "fedsim/algorithms/local_loss_sfl.py", "fedsim/algorithms/gas.py", "fedsim/algorithms/semisfl.py",
                    "fedsim/system/split_timing.py", "fedsim/learn/split.py", "fedsim/algorithms/semisfl_parts.py"]
#: the framework's records, and the calls and names that write them or run the loop
RECORDS = {"dispatch", "apply", "drop", "round", "aggregate"}
LOOP_CALLS = {"record_dispatch", "record_round", "apply", "commit", "install", "sample_clients", "launch",
              "start_slots", "staleness", "process"}
LOOP_NAMES = {"Contribution", "Update", "guarded", "TaskCounter"}


def _loop_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in LOOP_CALLS:
                found.append(f"{node.func.attr}() at line {node.lineno}")
            if (node.func.attr in ("emit", "put", "kind") and node.args
                    and any(isinstance(a, ast.Constant) and a.value in RECORDS for a in node.args[:2])):
                found.append(f"{node.func.attr}({ast.unparse(node.args[0])}, ...) at line {node.lineno}")
        elif isinstance(node, ast.Name) and node.id in LOOP_NAMES:
            found.append(f"{node.id} at line {node.lineno}")
    return found


@pytest.mark.parametrize("module", DECISION_MODULES)
def test_split_algorithms_write_no_framework_records(module):
    """Sampling, dispatch, drops, contributions, staleness and the one apply belong to the split
    loops (``fedsim/algorithms/loops``): an algorithm module supplies its client and server steps only."""
    assert _loop_uses(ast.parse((ROOT / module).read_text(encoding="utf-8"))) == []


def test_only_the_split_loops_write_framework_records():
    """The split family's base (``loops/split.py``) and its two loops are the only split modules that write the
    framework's records, and only inside their classes."""
    classes = {}
    for module in ("split.py", "split_rounds.py", "split_slots.py"):
        tree = ast.parse((ROOT / "fedsim/algorithms/loops" / module).read_text(encoding="utf-8"))
        classes.update({c.name: c for c in tree.body if isinstance(c, ast.ClassDef)})
        outside = [u for n in tree.body if not isinstance(n, ast.ClassDef) for u in _loop_uses(n)]
        assert outside == [], module
    # a loop's state dataclass names ``TaskCounter`` as a field's type only
    writers = {name for name, c in classes.items() if _loop_uses(c) and not name.endswith("State")}
    assert writers == {"SplitAlgorithm", "SplitRounds", "SplitSlots"}
    # the base's one writer is ``install`` (the family's one ctx.versions.apply); ``aggregate_clients`` only borrows
    # ``Update`` as the input of the one averaging rule
    install = [f.name for f in classes["SplitAlgorithm"].body if isinstance(f, ast.FunctionDef)
               and [u for u in _loop_uses(f) if not u.startswith("Update ")]]
    assert install == ["install"]


def _run(tmp_path: Path, scenario: str, **over) -> list[dict]:
    raw = load_raw(scenario)
    raw.update(output={"figures": False}, **over)
    run_scenario(scenario_from_mapping(raw), tmp_path, progress=False)
    return [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]


def _check_consistent(records: list[dict]) -> dict[str, int]:
    """Every ``apply`` and every ``drop`` closes an earlier, still open ``dispatch`` of that client (an apply
    of the version it was dispatched); every ``apply`` has its staleness and belongs to the next version."""
    open_: dict[int, list[dict]] = {}
    counts = {"dispatch": 0, "apply": 0, "drop": 0, "aggregate": 0}
    version = 0
    pending_applies: list[dict] = []
    for r in records:
        kind = r["kind"]
        if kind in counts:
            counts[kind] += 1
        if kind == "dispatch":
            assert r["version"] == version
            open_.setdefault(r["client"], []).append(r)
        elif kind == "apply":
            mine = [d for d in open_.get(r["client"], []) if d["version"] == r["base_version"]]
            assert mine, f"apply without an open dispatch of client {r['client']} at version {r['base_version']}: {r}"
            d = mine[0]
            open_[r["client"]].remove(d)
            assert d["t"] <= r["t"] and d["round"] == r["round"] or d["round"] is None
            assert r["version"] == version + 1
            assert r["staleness"] == version - r["base_version"] >= 0
            assert r["staleness_s"] == pytest.approx(r["t"] - d["t"])
            pending_applies.append(r)
        elif kind == "drop":
            assert open_.get(r["client"]), f"drop without an open dispatch: {r}"
            # the participation under way is the latest: an earlier open one can only be a model already
            # uploaded and waiting in the server's buffer, which going offline does not lose
            open_[r["client"]].pop()
        elif kind == "aggregate":
            version += 1
            assert r["version"] == version
            assert sorted(r["clients"]) == sorted(a["client"] for a in pending_applies)
            assert r["n_updates"] == len(pending_applies)
            pending_applies = []
    return counts


def test_async_split_records_are_consistent_with_drops(tmp_path):
    # 4 s of virtual time: about 90 versions, 4 clients going offline and 4 updates dropped (seed 0)
    records = _run(tmp_path, "async-sfl", stop={"max_time_s": 4.0},
                   availability={"model": "exponential", "mean_on_s": 3.0, "mean_off_s": 1.0})
    counts = _check_consistent(records)
    assert counts["apply"] > 0 and counts["drop"] > 0 and counts["aggregate"] > 0
    assert all(r["round"] is None for r in records if r["kind"] == "drop")


@pytest.mark.parametrize("scenario", ["minibatch-sfl", "semisfl"])
def test_sync_split_records_are_consistent(tmp_path, scenario):
    records = _run(tmp_path, scenario, stop={"max_versions": 3})
    counts = _check_consistent(records)
    assert counts["apply"] > 0 and counts["aggregate"] == 3
    rounds = [r for r in records if r["kind"] == "round"]
    applies = [r for r in records if r["kind"] == "apply"]
    for rnd in rounds:  # one round record per installed version, naming exactly the applied clients
        assert sorted(rnd["clients"]) == sorted(a["client"] for a in applies if a["round"] == rnd["round"])



class PlainSFL(SplitRounds):
    """Vanilla split FL written as the shape's three decisions: the client's forward and backward step, and
    one server step on every client's activations."""

    name = "plain-sfl"
    family = "plain-sfl"

    @dataclass
    class Config(SplitConfig):
        clients_per_round: int = 3
        local_iterations: int | None = 2

    def setup(self) -> None:
        super().setup()
        self.steps = int(self.cfg.local_iterations)

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        idx = s.batches[e]
        s.act = self.computer.forward(s.opt.params, self.x_train[idx])
        return len(idx), self.timing.activation_upload_bytes(len(idx))

    def client_backward(self, s: SplitSession, e: int) -> None:
        self.computer.client_step(s.opt, self.x_train[s.batches[e]], s.grad)

    def server_step(self, sessions: list[SplitSession], e: int) -> None:
        ys = [self.y_train[s.batches[e]] for s in sessions]
        for s, y in zip(sessions, ys):
            s.grad, _ = self.computer.activation_grad(self.server.params, s.act, y)
        grads, _ = self.computer.server_grads(self.server, torch.cat([s.act for s in sessions]), torch.cat(ys))
        self.server.step(grads)


def test_a_split_algorithm_of_ones_own_writes_only_its_steps(tmp_path):
    """The shape's contract as a user meets it: three decisions run, with the framework's records, and train."""
    records = _run(tmp_path, "minibatch-sfl", algorithm={"name": PlainSFL, "cut": 1}, stop={"max_versions": 3})
    counts = _check_consistent(records)
    assert counts == {"dispatch": 9, "apply": 9, "drop": 0, "aggregate": 3}
    evals = [r for r in records if r["kind"] == "eval"]
    assert evals[-1]["loss"] < evals[0]["loss"]


def test_split_rounds_with_nobody_reachable_record_an_empty_round_and_let_time_pass(tmp_path):
    """Nobody online: the round is recorded empty and the next one starts ``idle_s`` later (virtual time
    passes, so the run reaches its horizon instead of spinning at one instant)."""
    records = _run(tmp_path, "minibatch-sfl", stop={"max_time_s": 6.0},
                   availability={"model": "bernoulli", "p": 0.05, "slot_s": 0.5})
    empty = [r for r in records if r["kind"] == "round" and not r["clients"]]
    assert empty and all(r["end"] - r["start"] == pytest.approx(1.0) for r in empty)
    assert not [r for r in records if r["kind"] == "apply" and r["round"] in {e["round"] for e in empty}]
    _check_consistent(records)
