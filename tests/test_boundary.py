"""The framework/algorithm boundary: no module under ``fedsim/algorithms/`` writes a trace record, times a
transfer or a computation itself, or changes the world's counters.  The world writes every world record
(``download``, ``compute``, ``upload``, ``server``), the version keeper every bookkeeping record (``dispatch``,
``apply``, ``round``, ``aggregate``, ``drop``, ``eval``), the client pipeline is timed by
``Context.run_client``, and an algorithm's own measurements go through ``Context.measure`` /
``Context.measurement``.

The source is read (AST), so the rule holds for every module, not only the ones a run exercises.  Server time
is taken through the context's service (``ctx.serve``), never the world's or the split timing's ``serve``: the
world writes the ``server`` record either way, and the context is the one door an algorithm goes through."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import simpy

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "fedsim" / "algorithms"

#: the trace's writing methods (fedsim.sim.trace.Trace)
TRACE_WRITES = {"emit", "put", "kind", "write_columns"}
#: the world's transfer and compute methods (fedsim.system.world.World).  ``client_chains`` (a round of whole
#: client chains the world times and records itself, the vector engine's) is a service like ``serve``.
WORLD_TIMING = {"download", "upload", "compute", "_transfer", "compute_pinned", "download_instant", "serve"}
#: the world's counters, which only the world's own processes change
WORLD_COUNTERS = {"bytes_up", "bytes_down", "busy_s", "energy"}


def _is_ctx(node: ast.AST) -> bool:
    """``ctx``, ``self.ctx``: the run's context, whose ``serve`` is the service an algorithm calls."""
    return (isinstance(node, ast.Name) and node.id == "ctx") or (isinstance(node, ast.Attribute) and node.attr == "ctx")


def _is_world(node: ast.AST) -> bool:
    """``world``, ``x.world`` (``ctx.world``, ``self.world``): an expression naming the run's world."""
    return (isinstance(node, ast.Name) and node.id == "world") or (isinstance(node, ast.Attribute) and node.attr == "world")


def violations(source: str) -> list[str]:
    """Every place in ``source`` that touches the trace, calls a world transfer or compute method, or changes a
    world counter (one line each: line number and what)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "trace":
            found.append(f"{node.lineno}: reads the trace (.trace)")
        elif isinstance(node, ast.Name) and node.id == "trace" and isinstance(node.ctx, ast.Load):
            found.append(f"{node.lineno}: uses a name 'trace'")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in WORLD_TIMING and _is_world(node.func.value):
                found.append(f"{node.lineno}: calls world.{node.func.attr}")
            elif node.func.attr in ("serve", "aggregate") and isinstance(node.func.value, (ast.Name, ast.Attribute)) \
                    and not _is_ctx(node.func.value) and "timing" in ast.unparse(node.func.value):
                found.append(f"{node.lineno}: calls {ast.unparse(node.func)} (take server time with ctx.serve)")
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and sub.attr in WORLD_COUNTERS and _is_world(sub.value):
                    found.append(f"{node.lineno}: changes world.{sub.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # world.energy.compute_many(...), world.busy_s.fill(...): a counter changed through a method
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in WORLD_COUNTERS and _is_world(owner.value):
                found.append(f"{node.lineno}: changes world.{owner.attr} ({node.func.attr})")
    return found


MODULES = sorted(ALGORITHMS.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ALGORITHMS)) for p in MODULES])
def test_no_algorithm_module_writes_records_or_times_work(path: Path) -> None:
    assert not violations(path.read_text(encoding="utf-8")), f"{path.relative_to(ROOT)}: {violations(path.read_text(encoding='utf-8'))}"


def test_the_scan_covers_every_algorithm_module() -> None:
    names = {p.name for p in MODULES}
    assert {"algorithm.py", "pipeline.py", "sync_rounds.py", "async_slots.py", "semi_async.py", "split_rounds.py",
            "split_slots.py", "cos2p.py", "gas.py", "fedavg_vector.py", "semifl.py"} <= names


@pytest.mark.parametrize("snippet", [
    "ctx.trace.emit(ctx.env.now, 'drop', client=1)",                            # a bookkeeping record
    "self.trace.put(self._h, (now, 1))",                                         # a positional record
    "h = ctx.trace.kind('activation', ('client',))",                              # a record handle
    "trace.write_columns(parts, order)",                                          # a column write
    "yield from ctx.world.download(c, 10, version=0)",                            # a transfer
    "yield from world.upload(c, 10)",
    "yield from self.ctx.world.compute(c, 1e9, what='train')",                    # a computation
    "ctx.world.bytes_down += 10",                                                 # a counter
    "world.busy_s[c] += dt",
    "world.energy.compute_many(c, dt, p)",
    "self.world.download_instant(c, 10)",
    "yield from ctx.world.serve(None, 1.0, what='aggregate')",                    # server time, around the context
    "yield from world.serve(c, 0.5, what='apply')",
    "yield from self.timing.serve(None, 1e9, 'sfl-step')",                        # the split timing's old serve
    "yield from timing.aggregate(3, 1000)",
])
def test_the_scan_catches_what_the_old_modules_did(snippet: str) -> None:
    """Each line is one of the patterns this scan replaced (Co-S²P's mask job, split timing, GAS, the vector
    engine): the scan must flag it, so the module test above cannot pass vacuously."""
    source = "def f(ctx, self, world, trace, c, dt, p, parts, order, now):\n    " + snippet + "\n"
    assert violations(source), snippet


def test_the_scan_allows_the_services() -> None:
    source = ("def f(ctx, c):\n"
              "    ctx.measure('cos2p_round', round=1)\n"
              "    w = ctx.measurement('activation', ('client',))\n"
              "    yield from ctx.serve(None, 1.0, what='aggregate')\n"
              "    yield from self.ctx.serve(c, ctx.server_time(1e9), what='semi-supervised')\n"
              "    ctx.versions.record_drop(c, 'offline', None)\n"
              "    return ctx.world.bytes_up\n")
    assert violations(source) == []


def test_measurements_cannot_take_a_framework_record_name() -> None:
    """An algorithm's measurement named like a framework record would forge it: refused in one line."""
    from fedsim.context import FRAMEWORK_KINDS, Context
    from fedsim.sim.trace import Trace

    ctx = Context.__new__(Context)  # only the trace and the clock are needed here
    ctx.trace, ctx.env = Trace(None), simpy.Environment()
    for kind in sorted(FRAMEWORK_KINDS):
        with pytest.raises(ValueError, match="the framework writes"):
            ctx.measure(kind, client=0)
        with pytest.raises(ValueError, match="the framework writes"):
            ctx.measurement(kind, ("client",))
    ctx.measure("my_probe", value=1.5)
    write = ctx.measurement("my_step", ("step", "loss"))
    write(3, 0.25)
    with pytest.raises(TypeError, match="takes 2 values"):
        write(3)
    assert ctx.trace.records == [{"t": 0.0, "kind": "my_probe", "value": 1.5},
                                 {"t": 0.0, "kind": "my_step", "step": 3, "loss": 0.25}]


from fedsim.algorithms import ClientWork, FedAvg, client_task  # noqa: E402
from fedsim.learn.sgd import TrainStats  # noqa: E402
from fedsim.training import PendingTraining, TrainResult  # noqa: E402

SEEN: list = []


class OwnProgram(FedAvg):
    """A user's algorithm whose participation is a program of its own (for the test below)."""

    name = "own-program"

    def client_job(self, client, base, version, task, assignment):
        def start():  # runs when the client starts computing
            stats = TrainStats(steps=3, samples=24, mean_loss=0.5, last_loss=0.5)
            return PendingTraining(done=TrainResult(state=base, stats=stats, flops=2.0e9, upload_bytes=1000,
                                                    info={"program": "mine"}))

        return (yield from client_task(self.ctx, client, base, version, task=task, assignment=assignment,
                                       work=ClientWork(500, start), extra_downloads=(7,),
                                       extra_uploads=((11, "extra"),)))

    def before_apply(self, updates, weights, round_):
        SEEN.extend(updates)


def test_a_users_client_program_is_timed_and_recorded_by_the_framework(tmp_path) -> None:
    """The documented services, used as a user would: a ``client_job`` whose work is its own (``ClientWork``)
    with an extra download before the model and an extra upload after the update.  The world records each
    transfer and the computation with the sizes and FLOPs the program declared, in that order, and the
    pipeline builds the ``Update`` (weight, costs, the program's ``info``)."""
    import json

    from fedsim import scenario_from_mapping
    from fedsim.runner import run_scenario

    SEEN.clear()
    mapping = {"name": "own", "seed": 0, "data": {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}},
               "model": {"name": "mlp", "hidden": 8}, "algorithm": {"name": OwnProgram, "clients_per_round": 2},
               "stop": {"max_versions": 1}, "eval": {"every_versions": 100}, "output": {"figures": False}}
    run_scenario(scenario_from_mapping(mapping), tmp_path / "r", progress=False)
    records = [json.loads(line) for line in (tmp_path / "r" / "trace.jsonl").read_text().splitlines()]
    assert len(SEEN) == 2
    for u in SEEN:
        mine = [(r["kind"], r.get("bytes"), r.get("flops"), r.get("what")) for r in records
                if r.get("client") == u.client and r["kind"] in ("download", "compute", "upload")]
        assert mine == [("download", 7, None, None), ("download", 500, None, None), ("compute", None, 2.0e9, "train"),
                        ("upload", 1000, None, None), ("upload", 11, None, "extra")]
        first_model_download = [r for r in records if r["kind"] == "download" and r["client"] == u.client][1]
        assert u.download_time == first_model_download["start"]  # the model's download, after the extra one
        assert u.weight == 24.0 and u.info["program"] == "mine" and u.info["steps"] == 3
        assert u.costs == {"flops": 2.0e9, "bytes_up": 1000, "bytes_down": 500}


def test_every_loop_setting_is_a_typed_config_field() -> None:
    """A loop reads its settings off the typed ``Config`` (``LoopConfig.retry_s``), never off a class attribute: no
    built-in algorithm class declares ``retry_s``, and every built-in's ``Config`` has it as a field with a
    documented default (SemiFL's 1 s included), so ``algorithm.retry_s`` can be set, shown and checked."""
    import dataclasses

    from fedsim.algorithms import CATALOG, registry
    from fedsim.algorithms.configs import LoopConfig

    for name, cls in registry().items():
        declared = [k.__name__ for k in cls.__mro__ if "retry_s" in vars(k) and not dataclasses.is_dataclass(k)]
        assert declared == [], f"{name}: retry_s declared on the class by {declared}"
    for name, (_, _, config) in CATALOG.items():
        cfg = registry()[name].Config
        fields = {f.name: f for f in dataclasses.fields(cfg)}
        if "retry_s" in fields:
            assert issubclass(cfg, LoopConfig), f"{name}: {cfg.__name__} declares retry_s outside LoopConfig"
    semifl = {f.name: f.default for f in dataclasses.fields(registry()["semifl"].Config)}
    assert semifl["retry_s"] == 1.0


def test_semifl_takes_its_retry_from_the_config() -> None:
    from fedsim.algorithms import registry
    from fedsim.algorithms.configs import SemiFLConfig

    assert registry()["semifl"].work(SemiFLConfig(retry_s=2.5)).retry_s == 2.5
    with pytest.raises(Exception, match="retry_s"):
        SemiFLConfig(retry_s=0.0).validate("algorithm")


def test_the_former_learn_train_path_is_an_alias_only() -> None:
    """``fedsim.learn.train`` was renamed ``fedsim.learn.sgd`` (next to ``fedsim.training`` the old name read as
    the same thing); the old path stays importable for user code the earlier docs showed, holds nothing of its
    own, and no fedsim module imports it."""
    import fedsim.learn.sgd as sgd
    import fedsim.learn.train as old

    assert old.__all__ and all(getattr(old, n) is getattr(sgd, n) for n in old.__all__)
    tree = ast.parse(Path(old.__file__).read_text(encoding="utf-8"))
    assert not [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    users = []
    for path in (ROOT / "fedsim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            absolute = isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "fedsim.learn.train"
            relative = (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == "train"
                        and path.parent.name == "learn")
            plain = isinstance(node, ast.Import) and any(a.name == "fedsim.learn.train" for a in node.names)
            if absolute or relative or plain:
                users.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert users == []


def test_each_loop_is_paired_with_its_config_base() -> None:
    """A user's algorithm that subclasses a loop without a ``Config`` of its own gets the loop's typed config
    base (the fields the loop reads), not the empty ``Algorithm.Config``."""
    from fedsim.algorithms import AsyncSlots, SemiAsyncRounds, SplitRounds, SplitSlots, SyncRounds, Work
    from fedsim.algorithms.configs import (RoundsConfig, SemiAsyncConfig, SlotsConfig, SplitRoundsConfig,
                                           SplitSlotsConfig)

    pairs = {SyncRounds: RoundsConfig, AsyncSlots: SlotsConfig, SemiAsyncRounds: SemiAsyncConfig,
             SplitRounds: SplitRoundsConfig, SplitSlots: SplitSlotsConfig}
    for loop, config in pairs.items():
        assert loop.Config is config, loop.__name__
        assert isinstance(loop.work(config()), Work)  # the estimate reads the loop's own declaration
