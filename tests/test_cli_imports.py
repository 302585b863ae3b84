"""Commands that only print answer without loading the libraries a run needs (behaviour, not timing):
which heavy modules are in ``sys.modules`` after ``fedsim.cli.main`` in a fresh interpreter."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pandas", "scipy", "matplotlib", "sklearn", "mnist1d", "simpy", "networkx")

CODE = ("import sys, fedsim.cli\n"
        "try:\n    code = fedsim.cli.main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))\n")


def _loaded(*argv: str) -> tuple[str, set[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", CODE, *argv], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    code, _, mods = out.stdout.strip().splitlines()[-1].partition(" ")
    return code, set(ast.literal_eval(mods))


@pytest.mark.parametrize("argv", [["--version"], ["scenarios"], ["profiles", "jetson-nano"]])
def test_listing_commands_load_none_of_the_run_libraries(argv):
    code, mods = _loaded(*argv)
    assert code in ("0", "None") and mods == set(), mods


def test_the_profile_table_needs_only_pandas():
    code, mods = _loaded("profiles")
    assert code == "0" and mods == {"pandas"}


@pytest.mark.parametrize("argv", [["show", "default"], ["reference"]])
def test_show_and_reference_load_no_data_or_plotting_libraries(argv):
    """Validating a scenario imports the algorithm modules (their config classes live there, next to code
    that needs torch and simpy at import), but nothing for data, tables or figures."""
    code, mods = _loaded(*argv)
    assert code == "0"
    assert not mods & {"pandas", "scipy", "matplotlib", "sklearn", "mnist1d", "networkx"}, mods
