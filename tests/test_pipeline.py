"""The one pipeline: assignment → client task → Update with mask → pure server rule → VersionKeeper.apply.

Architecture checks read the source (what imports what, where ``apply`` records are written); the
state-operation checks are hand-worked.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from fedsim.messages import Update
from fedsim.learn.state import coverage_counts, masked_weighted_average, state_axpy, state_mix, state_sub

ROOT = Path(__file__).resolve().parents[1]
FEDSIM = ROOT / "fedsim"


def _module_name(path: Path) -> str:
    """The dotted name of a module file of a ``fedsim`` package: this tree's, or a synthetic one elsewhere."""
    parts = list(path.with_suffix("").parts)
    parts = parts[len(parts) - 1 - parts[::-1].index("fedsim"):]
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


#: the modules that show a finished run or folder: they live in fedsim/output/, not at the package top
OUTPUT_MODULES = ("report", "panels", "digest", "figures", "folder_report", "process", "compare", "side_by_side",
                  "svg", "svg_figures", "style", "paper")


@pytest.mark.fast
def test_output_code_lives_in_the_output_package_and_nothing_below_imports_it():
    """The output layer sits above the simulation: its modules are under ``fedsim/output/``, none of the old
    flat names is back at the package top, and no module of the layers a run is made of (sim, learn, system,
    algorithms, training) imports it."""
    assert sorted(p.stem for p in (FEDSIM / "output").glob("*.py") if p.stem != "__init__") == sorted(OUTPUT_MODULES)
    flat = ("report", "report_panels", "digest", "folder_report", "output_process", "compare")
    assert [n for n in flat if (FEDSIM / f"{n}.py").exists()] == []
    offenders = {}
    for layer in ("sim", "learn", "system", "algorithms", "training"):
        for path in (FEDSIM / layer).rglob("*.py"):
            bad = sorted(m for m in _imports(path) if m == "fedsim.output" or m.startswith("fedsim.output."))
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


# ------------------------------------------------------------------ layering: no paper in the generic layers
#: the generic layers every run uses: no module there serves one paper only
_GENERIC = ("learn", "sim")


def _paper_stems() -> set[str]:
    """The built-in algorithms' modules (``fedsim.algorithms.CATALOG``): a module named after one (``cos2p``,
    ``cos2p_rules``, ``gas_parts``, ``fedraa_schedulers``) belongs to that algorithm."""
    from fedsim.algorithms import CATALOG

    return {module for module, _cls, _config in CATALOG.values()}


def _paper_of(module: str, stems: set[str]) -> str | None:
    """The algorithm a ``fedsim.algorithms`` module belongs to; None for the loops and the shared modules."""
    parts = module.split(".")
    if len(parts) != 3 or parts[:2] != ["fedsim", "algorithms"]:
        return None
    owners = [s for s in stems if parts[2] == s or parts[2].startswith(s + "_")]
    return min(owners, key=len) if owners else None  # fedraa_baselines: Fed-RAA's


def _package_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` (a ``fedsim`` folder) and the package's modules it imports, every import counted."""
    modules = {}
    for p in package.rglob("*.py"):
        parts = list(p.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def paper_modules_in_generic_layers(package: Path, stems: set[str]) -> list[str]:
    """Modules under ``package``/learn and ``package``/sim that one algorithm alone imports, or that are named
    after one (one line each)."""
    graph = _package_graph(package)
    found = []
    for name in sorted(graph):
        parts = name.split(".")
        if len(parts) < 3 or parts[1] not in _GENERIC:
            continue
        if any(parts[-1] == s or parts[-1].startswith(s + "_") for s in stems):
            found.append(f"{name}: named after an algorithm")
            continue
        owners = {_paper_of(m, stems) for m, deps in graph.items() if name in deps}
        if len(owners) == 1 and None not in owners:
            found.append(f"{name}: imported only by {owners.pop()}'s modules")
    return found


def _registered_kinds(package: Path) -> set[str]:
    """The record kinds registered with ``register_record_kind("kind", ...)`` anywhere under ``package``."""
    kinds = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("register_record_kind") \
                    and node.args and isinstance(node.args[0], ast.Constant):
                kinds.add(node.args[0].value)
    return kinds


def paper_names_in_generic_layers(package: Path, stems: set[str], framework_kinds: set[str]) -> list[str]:
    """Places under ``package``/learn and ``package``/sim that name an algorithm's records or modules: a schema
    table (``EVENT_FIELDS``) with a kind the framework does not write, a string that is a kind an algorithm module
    registers, or the dotted path of an algorithm's module (comments included)."""
    registered = _registered_kinds(package)
    found = []
    for layer in _GENERIC:
        for path in sorted((package / layer).rglob("*.py")):
            rel = f"{package.name}/{path.relative_to(package)}"
            text = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict) \
                        and "EVENT_FIELDS" in ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target):
                    keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
                    found += [f"{rel}:{node.lineno}: schema of {k!r}" for k in sorted(keys - framework_kinds)]
                if isinstance(node, ast.Constant) and node.value in registered:
                    found.append(f"{rel}:{node.lineno}: names the record kind {node.value!r}")
            for stem in sorted(stems):
                for spelled in (f"fedsim.algorithms.{stem}", f"fedsim/algorithms/{stem}"):
                    for hit in re.finditer(re.escape(spelled) + r"(?![\w])|" + re.escape(spelled) + r"_\w+", text):
                        found.append(f"{rel}:{text.count(chr(10), 0, hit.start()) + 1}: names {hit.group()}")
    return found


#: calls that make a module a loop shape: it dispatches, writes records as columns, or times whole client chains
_LOOP_CALLS = {"record_dispatch", "record_dispatches", "write_columns", "client_chains"}


def loop_code_outside_loops(package: Path) -> list[str]:
    """Modules under ``package``/algorithms, outside loops/ (and the Algorithm base, whose ``dispatch`` the event
    loops call), that do what a loop shape does."""
    found = []
    for path in sorted((package / "algorithms").rglob("*.py")):
        rel = path.relative_to(package / "algorithms")
        if rel.parts[0] == "loops" or rel.name == "algorithm.py":
            continue
        calls = {n.func.attr for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _LOOP_CALLS}
        if calls:
            found.append(f"algorithms/{rel}: {', '.join(sorted(calls))}")
    return found


def test_no_paper_code_in_the_generic_layers():
    """fedsim/learn and fedsim/sim serve every run: no module there is named after or imported only by one
    algorithm, and none names an algorithm's record kinds or modules (they register their schemas themselves)."""
    from fedsim.context import FRAMEWORK_KINDS

    stems = _paper_stems()
    assert {"cos2p", "gas", "semisfl", "fedraa", "embracingfl"} <= stems
    assert paper_modules_in_generic_layers(FEDSIM, stems) == []
    assert paper_names_in_generic_layers(FEDSIM, stems, set(FRAMEWORK_KINDS)) == []
    assert {"cos2p_round", "cos2p_eval", "activation", "dissimilarity", "server_step"} <= _registered_kinds(FEDSIM)


def test_the_vector_engine_is_a_loop():
    """The vector engine waits on the clock and writes the round's records: it lives under loops/ with the shapes,
    and no module outside loops/ does what a loop does."""
    assert (FEDSIM / "algorithms" / "loops" / "fedavg_vector.py").is_file()
    assert not (FEDSIM / "algorithms" / "fedavg_vector.py").exists()
    assert loop_code_outside_loops(FEDSIM) == []


def _old_layout(root: Path) -> Path:
    """A synthetic fedsim package laid out as before the move: paper code under learn/, paper schemas in the
    trace, the vector engine among the algorithms."""
    files = {
        "learn/state.py": "def mix(a, b):\n    return a\n",
        "learn/gaussian.py": '"""Per-label Gaussians."""\nimport math\n',
        "learn/semi.py": "from fedsim.learn.state import mix\n",
        "learn/cos2p.py": "import torch\n",
        "sim/trace.py": ('EVENT_FIELDS: dict = {\n    "dispatch": ("client",),\n'
                         '    # split learning (fedsim.algorithms.gas / minibatch_sfl)\n'
                         '    "server_step": ("step",),\n    "cos2p_round": ("round",),\n}\n'),
        "algorithms/gas.py": "from fedsim.learn.gaussian import LabelGaussians\nfrom fedsim.learn.state import mix\n",
        "algorithms/gas_parts.py": "from fedsim.learn.gaussian import weight_fn\n",
        "algorithms/semisfl.py": "from fedsim.learn.semi import FeatureQueue\n",
        "algorithms/fedavg.py": "from fedsim.learn.state import mix\n",
        "algorithms/cos2p.py": "def f():\n    from fedsim.learn.cos2p import final_keep\n",
        "algorithms/fedavg_vector.py": ("def rounds(world, keeper, trace):\n    world.client_chains(1)\n"
                                        "    keeper.record_dispatches(2)\n"),
    }
    for rel, text in files.items():
        path = root / "fedsim" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "fedsim"


@pytest.mark.fast
def test_the_layering_checks_fail_on_the_old_layout(tmp_path):
    """Each check above can fail: on a synthetic package laid out as before (learn/cos2p.py, learn/gaussian.py
    and learn/semi.py, Co-S²P's and the split schemas in the trace, fedavg_vector.py among the algorithms), each
    names what is wrong, and nothing else."""
    package = _old_layout(tmp_path)
    stems = {"cos2p", "gas", "semisfl", "fedavg", "minibatch_sfl"}
    assert paper_modules_in_generic_layers(package, stems) == [
        "fedsim.learn.cos2p: named after an algorithm",
        "fedsim.learn.gaussian: imported only by gas's modules",
        "fedsim.learn.semi: imported only by semisfl's modules",
    ]  # learn/state.py is imported by gas and fedavg: shared, not flagged
    assert paper_names_in_generic_layers(package, stems, {"dispatch"}) == [
        "fedsim/sim/trace.py:1: schema of 'cos2p_round'",
        "fedsim/sim/trace.py:1: schema of 'server_step'",
        "fedsim/sim/trace.py:3: names fedsim.algorithms.gas",
    ]
    assert loop_code_outside_loops(package) == ["algorithms/fedavg_vector.py: client_chains, record_dispatches"]
    # the moved layout passes: the paper modules beside their algorithm, the schemas registered there
    for old, new in (("learn/gaussian.py", "algorithms/gas_labels.py"), ("learn/semi.py", "algorithms/semisfl_parts.py"),
                     ("learn/cos2p.py", "algorithms/cos2p_parts.py"),
                     ("algorithms/fedavg_vector.py", "algorithms/loops/fedavg_vector.py")):
        (package / new).parent.mkdir(parents=True, exist_ok=True)
        (package / old).rename(package / new)
    (package / "sim/trace.py").write_text('EVENT_FIELDS: dict = {"dispatch": ("client",)}\n', encoding="utf-8")
    (package / "algorithms/cos2p.py").write_text('register_record_kind("cos2p_round", ("round",))\n', encoding="utf-8")
    assert paper_modules_in_generic_layers(package, stems) == []
    assert paper_names_in_generic_layers(package, stems, {"dispatch"}) == []
    assert loop_code_outside_loops(package) == []
    # a generic module that names a registered kind is caught, wherever the kind is registered
    (package / "learn/state.py").write_text('KIND = "cos2p_round"\n', encoding="utf-8")
    assert paper_names_in_generic_layers(package, stems, {"dispatch"}) == [
        "fedsim/learn/state.py:1: names the record kind 'cos2p_round'"]
