"""Every lesson of the course (docs/tutorial/) runs end to end, and its committed page is current.

A lesson checks its own answers with plain ``assert`` statements (an exercise's expected outcome, shown
by the lesson's run), so running it here is what fails CI when fedsim stops doing what the lesson teaches.
The committed Markdown page must be, line for line, the page the lesson renders now: its code, what the code
printed and every number its prose quotes (``{{...}}`` fields, filled from the run), so a number that goes
stale fails here; the page links a report.html that the lesson's runs wrote; every figure the lesson saves must be committed beside it, so the page on the repository's
host is the lesson that CI runs."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial"

_spec = importlib.util.spec_from_file_location("tutorial_build", TUTORIAL / "build.py")
build = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = build  # its dataclasses look their module up
_spec.loader.exec_module(build)

LESSONS = build.lessons()


def test_the_course_has_at_least_six_lessons_all_in_the_index() -> None:
    assert len(LESSONS) >= 6
    index = (TUTORIAL / "README.md").read_text(encoding="utf-8")
    for lesson in LESSONS:
        assert f"({lesson.with_suffix('.md').name})" in index, f"{lesson.name} is not linked from the course index"


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_and_its_page_is_current(lesson: Path, tmp_path: Path) -> None:
    cells = build.execute(lesson, tmp_path / "figures", tmp_path)
    code = [c for c in cells if c.kind == "code"]
    assert len(code) >= 4
    assert any(c.output.strip() for c in code), "a lesson prints what its runs measured"
    saved = sorted({name for c in code for name in c.figures})
    assert saved, "a lesson shows at least one figure"
    assert any("assert " in c.text for c in code), "a lesson checks at least one exercise's answer"
    assert re.search(r"^## Exercises", "\n".join(c.text for c in cells if c.kind == "markdown"), re.M)

    solutions = _exercises_and_solutions(cells)
    assert solutions, "a lesson has exercises"
    for number, group in solutions:
        assert group, f"exercise {number} has no worked solution"
        code = [c for c in group if c.kind == "code"]
        if any(c.output.strip() for c in code):  # a solution that prints a number checks it
            assert any("assert " in c.text for c in code), f"exercise {number}'s solution checks nothing"

    page = lesson.with_suffix(".md")
    assert page.exists(), f"run `python docs/tutorial/build.py {lesson.name[:2]}` and commit {page.name}"
    text = page.read_text(encoding="utf-8")
    stale = [c.line for c in code if f"```python\n{c.text}\n```" not in text]
    assert not stale, f"{page.name} is older than {lesson.name} (cells at lines {stale}): rebuild it"
    changed = build.differences(text, build.render(lesson, cells))
    assert not changed, (f"{page.name} no longer matches its run (rebuild with `python docs/tutorial/build.py "
                         f"{lesson.name[:2]}`):\n" + "\n".join(changed[:20]))
    reports = re.findall(r"\]\(\.\./\.\./(runs/tutorial/[^)]+/report\.html)\)", text)
    assert reports, f"{page.name} links no report.html of its runs"
    for rel in reports:  # the page's link is relative to docs/tutorial/, the run's folder to the repository root
        assert (tmp_path / rel).is_file(), f"{page.name} links {rel}, which the lesson's runs did not write"
    for name in saved:
        assert (TUTORIAL / "figures" / name).exists(), f"figure {name} is not committed"
        assert f"(figures/{name})" in text, f"{page.name} does not show {name}"


def _exercises_and_solutions(cells: list) -> list[tuple[int, list]]:
    """Each numbered exercise after the ``## Exercises`` heading, with the solution cells that follow it
    (empty when the next thing is another exercise or the end)."""
    out: list[tuple[int, list]] = []
    started = False
    for cell in cells:
        if cell.kind == "markdown" and not cell.solution:
            started = started or bool(re.search(r"^## Exercises", cell.text, re.M))
            if started:
                out.extend((int(n), []) for n in re.findall(r"^(\d+)\. \*\*", cell.text, re.M))
        elif started and cell.solution and out:
            out[-1][1].append(cell)
    return out


def test_parse_splits_prose_and_code(tmp_path: Path) -> None:
    script = tmp_path / "99-demo.py"
    script.write_text("# %% [markdown]\n# # Title\n#\n# Prose.\n\n# %%\nx = 1\nprint(x)\n", encoding="utf-8")
    cells = build.parse(script)
    assert [c.kind for c in cells] == ["markdown", "code"]
    assert cells[0].text == "# Title\n\nProse."
    assert cells[1].text == "x = 1\nprint(x)" and cells[1].line == 7
    out = build.execute(script, tmp_path / "figs", tmp_path)
    assert out[1].output == "1\n"
    bad = tmp_path / "98-bad.py"
    bad.write_text("# %% [markdown]\nnot a comment\n", encoding="utf-8")
    with pytest.raises(ValueError, match="start with '#'"):
        build.parse(bad)


def _demo(tmp_path: Path, value: str) -> tuple[Path, list]:
    script = tmp_path / "97-demo.py"
    script.write_text("# %% [markdown]\n# # Demo\n\n# %%\n"
                      f"x = {value}\nprint(f'x = {{x}}')\n\n"
                      "# %% [markdown]\n# The run measured {{x:.2f}}, twice that is {{2 * x:.1f}}.\n",
                      encoding="utf-8")
    return script, build.execute(script, tmp_path / "figs", tmp_path)


def test_prose_fields_are_filled_from_the_run(tmp_path: Path) -> None:
    script, cells = _demo(tmp_path, "0.125")
    page = build.render(script, cells)
    assert "The run measured 0.12, twice that is 0.2." in page  # f-string rounding: 0.125 -> 0.12 (half-even)
    assert "{{" not in page and "```text\nx = 0.125\n```" in page


def test_a_stale_number_in_prose_or_output_fails_the_page_check(tmp_path: Path) -> None:
    script, cells = _demo(tmp_path, "0.125")
    committed = build.render(script, cells)
    assert build.differences(committed, committed) == []
    _, rerun = _demo(tmp_path, "0.5")  # the run changed; the committed page did not
    changed = build.differences(committed, build.render(script, rerun))
    assert "-The run measured 0.12, twice that is 0.2." in changed
    assert "+The run measured 0.50, twice that is 1.0." in changed
    assert "-x = 0.125" in changed and "+x = 0.5" in changed
    # code, output and prose lines each change once; the old check (code cells only) saw just the first
    assert len(changed) == 6


def test_a_prose_field_naming_nothing_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "96-bad.py"
    script.write_text("# %%\nx = 1\n\n# %% [markdown]\n# Quoted {{y:.2f}}.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"96-bad.py:5: prose field \{\{y:.2f\}\}: NameError"):
        build.execute(script, tmp_path / "figs", tmp_path)


def test_solutions_render_collapsed_and_a_missing_one_is_found(tmp_path: Path) -> None:
    script = tmp_path / "95-demo.py"
    script.write_text("# %% [markdown]\n# ## Exercises\n#\n# 1. **One.** Do it.\n\n# %% solution\nx = 2\n"
                      "print(x)\nassert x == 2\n\n# %% [markdown] solution\n# Because {{x}}.\n\n"
                      "# %% [markdown]\n# 2. **Two.** Left open.\n", encoding="utf-8")
    cells = build.execute(script, tmp_path / "figs", tmp_path)
    page = build.render(script, cells)
    assert ("<details><summary>Worked solution</summary>\n\n```python\nx = 2\nprint(x)\nassert x == 2\n```\n\n"
            "```text\n2\n```\n\nBecause 2.\n\n</details>") in page
    found = _exercises_and_solutions(cells)
    assert [(n, len(g)) for n, g in found] == [(1, 2), (2, 0)]  # exercise 2's missing solution shows
