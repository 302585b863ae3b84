"""The one pipeline: assignment → client task → Update with mask → pure server rule → VersionKeeper.apply.

Architecture checks read the source (what imports what, where ``apply`` records are written); the
state-operation checks are hand-worked.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fedsim.messages import Update
from fedsim.learn.state import coverage_counts, masked_weighted_average, state_axpy, state_mix, state_sub

ROOT = Path(__file__).resolve().parents[1]
FEDSIM = ROOT / "fedsim"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    """Modules imported by ``path``: every import statement, those inside functions and under
    ``if TYPE_CHECKING`` included (a type-only import that points upward is still a dependency); with
    ``top_level_only``, only the imports executed when the module is imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if top_level_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # not executed at import time
            if isinstance(child, ast.Import) and not (top_level_only and inside):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not (top_level_only and inside):
                base = child.module or ""
                if child.level:
                    pkg = _module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_name(path)
                    up = pkg.split(".")[: len(pkg.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in child.names)
            visit(child, nested)

    visit(tree, False)
    return found


def _import_graph() -> dict[str, list[str]]:
    """fedsim's modules and, for each, the fedsim modules it imports (every import counted)."""
    modules = {_module_name(p): p for p in FEDSIM.rglob("*.py")}
    return {name: sorted(m for m in _imports(path) if m in modules and m != name) for name, path in modules.items()}


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = dfs(n)
            if found:
                return found
    return None


def test_fedsim_never_imports_analysis():
    offenders = {}
    for path in FEDSIM.rglob("*.py"):
        bad = sorted(m for m in _imports(path, top_level_only=False) if m == "analysis" or m.startswith("analysis."))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}


def test_no_import_cycle_inside_fedsim():
    """No cycle among fedsim's modules, counting every import: those inside functions (a lazy import that points
    upward is still a cycle when it runs) and those under ``if TYPE_CHECKING`` (a type that points upward ties
    the two modules together as surely)."""
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.fast
def test_cycle_finder_sees_type_checking_imports(tmp_path):
    """The check above can fail: a cycle made only of a type-checking import is found."""
    mod = tmp_path / "fedsim" / "a.py"
    mod.parent.mkdir()
    mod.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedsim.b import B\n")
    found = _imports(mod)
    assert "fedsim.b" in found and "fedsim.b" not in _imports(mod, top_level_only=True)
    assert _find_cycle({"fedsim.a": ["fedsim.b"], "fedsim.b": ["fedsim.a"]}) == ["fedsim.a", "fedsim.b", "fedsim.a"]


@pytest.mark.fast
def test_messages_sit_at_the_bottom_of_the_import_graph():
    """``fedsim.messages`` (Assignment, Update, Contribution, Work) imports no fedsim module at run time, so the
    workers and the loop shapes can all name its types; type hints name only ``fedsim.learn`` data modules."""
    found = _imports(FEDSIM / "messages.py")
    run_time = {m for m in _imports(FEDSIM / "messages.py", top_level_only=True) if m.startswith("fedsim")}
    assert run_time == set()
    assert {m for m in found if m.startswith("fedsim") and not m.startswith("fedsim.learn")} == set()


@pytest.mark.fast
def test_scenario_module_never_imports_the_algorithms():
    """The scenario modules get the algorithm resolver passed in (scenario → algorithms → context → scenario
    would be a cycle at run time)."""
    modules = sorted(FEDSIM.glob("scenario*.py"))
    assert {p.name for p in modules} >= {"scenario.py", "scenario_sections.py", "scenario_loading.py",
                                         "scenario_reference.py"}
    for module in modules:
        found = _imports(module, top_level_only=False)
        assert not [m for m in found if m.startswith("fedsim.algorithms")], module.name


def test_dispatch_and_round_records_are_written_by_the_framework_only():
    """``dispatch`` records come from ``VersionKeeper.record_dispatch`` (the vector engine's column writer aside)."""
    writers = []
    for path in FEDSIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value == "dispatch"):
                writers.append(str(path.relative_to(ROOT)))
    assert writers == ["fedsim/versions.py"]


#: the loops' dispatch (``Algorithm.dispatch``, which the event loops call; the split loops dispatch their
#: sessions themselves), and the vector engine's column writer
_SHAPES = {"fedsim/algorithms/algorithm.py", "fedsim/algorithms/loops/split_rounds.py",
           "fedsim/algorithms/loops/split_slots.py"}
_COLUMN_WRITER = "fedsim/algorithms/loops/fedavg_vector.py"


def _dispatch_writers() -> set[str]:
    """Modules under fedsim/algorithms that call ``record_dispatch`` or write ``dispatch`` columns."""
    found = set()
    for path in (FEDSIM / "algorithms").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            columns = node.func.attr == "write_columns" and any(
                isinstance(c, ast.Constant) and c.value == "dispatch" for a in node.args for c in ast.walk(a))
            if node.func.attr in ("record_dispatch", "record_dispatches") or columns:
                found.add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.fast
def test_only_the_loop_shapes_dispatch():
    """Every built-in algorithm dispatches through a loop shape: only the shapes call ``record_dispatch`` (the
    vector engine writes its dispatch records as columns)."""
    assert _dispatch_writers() == _SHAPES | {_COLUMN_WRITER}


def test_apply_records_are_written_in_one_place():
    """Only ``VersionKeeper.apply`` emits ``apply`` events; algorithms return (state, weights) from pure rules."""
    writers = []
    for path in FEDSIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "apply"):
                writers.append(str(path.relative_to(ROOT)))
    assert writers == ["fedsim/versions.py"]


def _emitted_kinds(path: Path) -> set[str]:
    kinds = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            kinds.add(node.args[1].value)
    return kinds


@pytest.mark.fast
def test_context_is_split_into_a_training_executor_and_a_version_keeper():
    """The training executor computes and records nothing about versions; the version keeper writes the
    bookkeeping records and computes nothing (evaluation runs on the executor); the context only wires them."""
    versions, context = (FEDSIM / f"{m}.py" for m in ("versions", "context"))
    training_modules = sorted((FEDSIM / "training").glob("*.py"))
    assert len(training_modules) >= 4
    for module in training_modules:
        assert _emitted_kinds(module) == set() and "fedsim.versions" not in _imports(module, top_level_only=False)
    assert {"dispatch", "apply", "round", "aggregate", "eval"} <= _emitted_kinds(versions)
    assert not {"fedsim.learn.sgd", "fedsim.learn.submodel.extract"} & _imports(versions, top_level_only=False)
    assert _emitted_kinds(context) == set()
    training = FEDSIM / "training" / "executor.py"
    tree = ast.parse(training.read_text(encoding="utf-8"))
    executor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrainingExecutor")
    assigned = {t.attr for n in ast.walk(executor) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute)}
    assert not {"version", "global_state", "trace"} & assigned


def test_masked_average_coverage_counts_hand_worked():
    base = {"w": torch.tensor([10.0, 20.0, 30.0]), "n": torch.tensor(5)}
    u1 = Update(client=0, tensors={"w": torch.tensor([1.0, 2.0, 3.0]), "n": torch.tensor(7)},
                mask={"w": torch.tensor([1.0, 1.0, 0.0])}, weight=1.0)
    u2 = Update(client=1, tensors={"w": torch.tensor([4.0, 5.0, 6.0]), "n": torch.tensor(6)},
                mask={"w": torch.tensor([0.0, 1.0, 0.0])}, weight=3.0)
    out = masked_weighted_average([u1, u2], base)
    torch.testing.assert_close(out["w"], torch.tensor([1.0, 4.25, 30.0]))
    assert out["n"].item() == 7  # counters: the largest contributor, never an average
    lo, mean, n = coverage_counts([u1, u2], base)
    # entry-wise N_q^i = (1, 2, 0): min 0, mean 1
    assert (lo, mean, n) == (0.0, 1.0, 3)


def test_integer_counters_follow_one_rule():
    a = {"w": torch.tensor([1.0]), "n": torch.tensor(4)}
    b = {"w": torch.tensor([3.0]), "n": torch.tensor(9)}
    d = state_sub(b, a)
    assert d["w"].item() == 2.0 and d["n"].item() == 9  # a delta carries a counter's new value
    assert state_axpy(a, d, 0.5)["n"].item() == 9 and state_axpy(a, d, 0.5)["w"].item() == 2.0
    assert state_mix(b, a, 0.25)["n"].item() == 9  # mixing never lowers a counter
    assert state_mix(b, a, 0.25)["w"].item() == pytest.approx(2.5)


def test_no_class_is_built_at_run_time_and_no_loop_is_chosen_by_class_identity():
    """An algorithm picks its loop from its config: no ``__new__`` building classes, no three-argument
    ``type(...)``, no ``type(self) is X`` deciding what runs."""
    found = []
    for path in FEDSIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            rel = str(path.relative_to(ROOT))
            if isinstance(node, ast.FunctionDef) and node.name == "__new__":
                found.append(f"{rel}: def __new__")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" \
                    and len(node.args) == 3:
                found.append(f"{rel}: type(name, bases, dict)")
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
                    and ast.unparse(node.left) in ("type(self)", "type(cls)") \
                    and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                found.append(f"{rel}: {ast.unparse(node)}")
    assert found == []


def test_show_and_reference_import_no_torch():
    """``fedsim show`` and ``fedsim reference`` read only the algorithms' configs, which live apart from torch
    code (``fedsim.algorithms.configs``): neither command imports torch."""
    import subprocess
    import sys

    code = ("import io, sys, contextlib\nfrom fedsim.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['show', 'default']) == 0\n    assert main(['show', 'heterofl']) == 0\n"
            "    assert main(['reference']) == 0\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_catalog_names_each_builtin_and_its_config():
    """The catalog that lets a scenario be loaded without importing the algorithms names, for every built-in, the
    class the registry holds and that class's own ``Config``."""
    from fedsim.algorithms import CATALOG, builtin, registry

    classes = registry()
    assert set(CATALOG) == set(classes)
    for name, cls in classes.items():
        handle = builtin(name)
        assert handle is not None and handle.load() is cls and handle.Config is cls.Config, name
