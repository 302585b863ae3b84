"""tests/README.md maps every test file to the package it guards, and the fast subset (``pytest -m fast``)
has a file in every package of the map: a new test file left off the map, a stale name, or a package
with nothing fast fails here, with the names to fix."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent
FAST = re.compile(r"pytest\.mark\.fast\b")


def map_problems(readme: str, sources: dict[str, str]) -> list[str]:
    """What is wrong with the map ``readme`` given the test files ``sources`` (name → text): files not
    named, named twice, named but absent, and packages (``## `` sections that name files) without a file
    in the fast subset."""
    sections: dict[str, list[str]] = {}
    title = ""
    for line in readme.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
        for name in re.findall(r"\btest_\w+\.py\b", line):
            if title:
                sections.setdefault(title, []).append(name)
    named = [n for names in sections.values() for n in names]
    problems = [f"{n} is not in tests/README.md" for n in sorted(set(sources) - set(named))]
    problems += [f"{n} is named twice" for n in sorted({n for n in named if named.count(n) > 1})]
    problems += [f"{n} is in tests/README.md but not in tests/" for n in sorted(set(named) - set(sources))]
    for title, names in sections.items():
        if not any(FAST.search(sources.get(n, "")) for n in names):
            problems.append(f"no file of '{title}' is in the fast subset")
    return problems


def _sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(TESTS.glob("test_*.py"))}


def test_every_test_file_is_on_the_map_and_every_package_has_a_fast_test():
    assert map_problems((TESTS / "README.md").read_text(encoding="utf-8"), _sources()) == []


def test_the_check_catches_a_missing_file_a_stale_name_and_a_package_with_nothing_fast():
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    sources = _sources()
    # a new file nobody put on the map
    assert map_problems(readme, {**sources, "test_new_thing.py": "def test_x(): pass"}) == [
        "test_new_thing.py is not in tests/README.md"]
    # a file removed, its name left behind
    gone = {k: v for k, v in sources.items() if k != "test_rng.py"}
    assert map_problems(readme, gone) == ["test_rng.py is in tests/README.md but not in tests/"]
    # a package whose fast files lose their marker
    section = readme.split("## `fedsim/system/`")[1].split("\n## ")[0]
    unmarked = {k: (FAST.sub("pytest.mark.slow", v) if k in section else v) for k, v in sources.items()}
    assert map_problems(readme, unmarked) == ["no file of '`fedsim/system/`: devices, channels, medium, server, "
                                              "world' is in the fast subset"]
    # a name given twice
    assert map_problems(readme + "\n- `test_rng.py`\n", sources) == ["test_rng.py is named twice"]


def test_the_fast_marker_is_registered():
    """An unregistered marker is a typo pytest only warns about; registered, ``-m fast`` selects it."""
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    markers = config["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("fast:") for m in markers)


def test_the_slow_first_files_exist():
    """conftest's SLOW_FIRST names files that exist (a renamed file would silently drop back to the end)."""
    from conftest import SLOW_FIRST

    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    assert [n for n in SLOW_FIRST if not (TESTS / n).is_file()] == []
