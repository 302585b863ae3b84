"""Every lesson of the course (docs/tutorial/) runs end to end, and its committed page and notebook are current.

A lesson checks its own answers with plain ``assert`` statements (an exercise's expected outcome, shown
by the lesson's run), so running it here is what fails CI when fedsim stops doing what the lesson teaches.
The committed Markdown page must be, line for line, the page the lesson renders now: its code, what the code
printed and every number its prose quotes (``{{...}}`` fields, filled from the run), so a number that goes
stale fails here; the page links a report.html that the lesson's runs wrote; every figure the lesson saves must be committed beside it, so the page on the repository's
host is the lesson that CI runs.

What runs is the committed notebook (``NN-name.ipynb``), once: its cells must be the script's cells (a
notebook not rebuilt after the script changed fails before it runs), its code cells run in one namespace
in this process (a Jupyter kernel would cost a fresh interpreter and its imports per notebook), and the
page and the notebook that run renders must equal the committed ones; the notebook's embedded figures
must be the committed figure files."""
from __future__ import annotations

import base64
import importlib.util
import json
import re
import sys
from itertools import zip_longest
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
        assert f"({lesson.with_suffix('.ipynb').name})" in index, f"{lesson.stem}.ipynb is not linked from the index"
    assert "jupyter lab docs/tutorial/" in index and "pip install jupyterlab" in index


def check_current(lesson: Path, work: Path, committed_figures: Path) -> list:
    """Run the committed notebook of ``lesson`` in ``work`` and return its run cells; fail when the notebook
    is older than the script, or when the committed page or notebook is not what this run renders."""
    rebuild = f"rebuild with `python docs/tutorial/build.py {lesson.name[:2]}`"
    nb_path, page = lesson.with_suffix(".ipynb"), lesson.with_suffix(".md")
    for path in (nb_path, page):
        assert path.exists(), f"{path.name} is missing: {rebuild} and commit it"
    committed_nb = nb_path.read_text(encoding="utf-8")
    cells = build.read_notebook(committed_nb, nb_path.name)
    script = build.notebook_cells(lesson)
    key = lambda c: (c.kind, c.text, c.solution, c.setup)  # noqa: E731
    stale = [s.line if s else "end" for s, c in zip_longest(script, cells)
             if s is None or c is None or key(s) != key(c)]
    assert not stale, f"{nb_path.name} is older than {lesson.name} (cells at lines {stale}): {rebuild}"
    for s, c in zip(script, cells):  # a failing assert names its line in the script
        c.line = s.line
    cells = build.run(lesson, cells, work / "figures", work)

    text = page.read_text(encoding="utf-8")
    code = [c for c in cells if c.kind == "code" and not c.setup]
    stale = [c.line for c in code if f"```python\n{c.text}\n```" not in text]
    assert not stale, f"{page.name} is older than {lesson.name} (cells at lines {stale}): {rebuild}"
    changed = build.differences(text, build.render(lesson, cells))
    assert not changed, f"{page.name} no longer matches its run ({rebuild}):\n" + "\n".join(changed[:20])
    assert f"]({nb_path.name})" in text, f"{page.name} does not link {nb_path.name}"

    rendered = build.dumps(build.notebook(lesson, cells))
    changed = build.differences(build.without_images(committed_nb), build.without_images(rendered))
    assert not changed, f"{nb_path.name} no longer matches its run ({rebuild}):\n" + "\n".join(changed[:20])
    shown = []
    for cell in json.loads(committed_nb)["cells"]:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                name = re.fullmatch(r"<figure (.+)>", "".join(output["data"]["text/plain"])).group(1)
                shown.append(name)
                assert (committed_figures / name).exists(), f"figure {name} is not committed"
                assert base64.b64decode(output["data"]["image/png"]) == (committed_figures / name).read_bytes(), (
                    f"{nb_path.name} shows another {name} than the committed one: {rebuild}")
    assert shown == [name for c in code for name in c.figures], f"{nb_path.name} does not show its figures"
    return cells


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_lesson_runs_and_its_page_and_notebook_are_current(lesson: Path, tmp_path: Path) -> None:
    cells = [c for c in check_current(lesson, tmp_path, TUTORIAL / "figures") if not c.setup]
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
        code_cells = [c for c in group if c.kind == "code"]
        if any(c.output.strip() for c in code_cells):  # a solution that prints a number checks it
            assert any("assert " in c.text for c in code_cells), f"exercise {number}'s solution checks nothing"

    page = lesson.with_suffix(".md")
    text = page.read_text(encoding="utf-8")
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


#: a tiny lesson: a title, a code cell that prints and saves a "figure" (five bytes), a prose field, an
#: exercise and its worked solution
DEMO = ("# %% [markdown]\n# # Demo\n#\n# A tiny lesson.\n\n"
        "# %%\nimport os\nfrom pathlib import Path\n\nx = 2\nprint(f'x = {x}')\n"
        "(Path(os.environ['FEDSIM_TUTORIAL_FIGURES']) / '94-x.png').write_bytes(bytes([137, 80, 78, 71, x]))\n\n"
        "# %% [markdown]\n# The run measured {{x}}.\n\n"
        "# %% [markdown]\n# ## Exercises\n#\n# 1. **Double it.**\n\n"
        "# %% solution\ny = 2 * x\nprint(y)\nassert y == 2 * x\n")


def _built_demo(tmp_path: Path) -> tuple[Path, Path]:
    """The tiny lesson, built: its script, page and notebook in ``tmp_path``, its figure under ``figs/``."""
    script = tmp_path / "94-demo.py"
    script.write_text(DEMO, encoding="utf-8")
    build.build(script, tmp_path / "figs")
    (tmp_path / "work").mkdir()
    return script, tmp_path / "figs"


@pytest.mark.fast
def test_the_notebook_is_the_run_in_nbformat_4(tmp_path: Path) -> None:
    script, figs = _built_demo(tmp_path)
    text = script.with_suffix(".ipynb").read_text(encoding="utf-8")
    nb = json.loads(text)
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    cells = nb["cells"]
    assert [(c["cell_type"], c["metadata"].get("tags", [])) for c in cells] == [
        ("code", ["setup"]), ("markdown", []), ("code", []), ("markdown", []), ("markdown", []),
        ("markdown", ["solution-heading"]), ("code", ["solution"])]
    ids = [c["id"] for c in cells]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", i) for i in ids)
    assert all(c.get("execution_count") is None for c in cells)  # nothing that changes from run to run
    setup, title, code, measured, _, heading, solution = cells
    assert "".join(setup["source"]) == build.SETUP and setup["outputs"] == []
    assert title["source"] == ["# Demo\n", "\n", "A tiny lesson."]
    assert code["outputs"][0] == {"name": "stdout", "output_type": "stream", "text": ["x = 2\n"]}
    image = code["outputs"][1]
    assert image["output_type"] == "display_data" and image["data"]["text/plain"] == ["<figure 94-x.png>"]
    assert base64.b64decode(image["data"]["image/png"]) == bytes([137, 80, 78, 71, 2])
    assert measured["source"] == ["The run measured 2."]  # filled, as the page has it
    assert measured["metadata"]["fedsim"]["prose"] == "The run measured {{x}}."
    assert "".join(heading["source"]).startswith("#### Worked solution")
    assert solution["metadata"]["jupyter"] == {"outputs_hidden": True, "source_hidden": True}
    assert solution["outputs"] == [{"name": "stdout", "output_type": "stream", "text": ["4\n"]}]
    # the notebook reads back as the cells it was written from, and a rebuild writes the same bytes
    key = lambda c: (c.kind, c.text, c.solution, c.setup)  # noqa: E731
    assert [key(c) for c in build.read_notebook(text)] == [key(c) for c in build.notebook_cells(script)]
    build.build(script, figs)
    assert script.with_suffix(".ipynb").read_text(encoding="utf-8") == text
    assert "*This lesson as a notebook, with this run's outputs: [`94-demo.ipynb`](94-demo.ipynb)" in (
        script.with_suffix(".md").read_text(encoding="utf-8").split("\n\n")[2])  # under the title
    check_current(script, tmp_path / "work", figs)  # the built lesson is current


@pytest.mark.fast
def test_the_setup_cell_moves_a_notebook_in_docs_tutorial_to_the_root(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs" / "tutorial").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "docs" / "tutorial")
    exec(build.SETUP, {})  # noqa: S102
    assert Path.cwd() == tmp_path
    exec(build.SETUP, {})  # anywhere else it stays (the builder and the tests run lessons in a scratch folder)
    assert Path.cwd() == tmp_path


@pytest.mark.fast
def test_a_stale_notebook_fails_before_it_runs(tmp_path: Path) -> None:
    script, figs = _built_demo(tmp_path)
    script.write_text(DEMO.replace("x = 2", "x = 3"), encoding="utf-8")  # the script changed, not rebuilt
    with pytest.raises(AssertionError, match=r"94-demo.ipynb is older than 94-demo.py \(cells at lines \[7\]\)"):
        check_current(script, tmp_path / "work", figs)
    assert not (tmp_path / "work" / "figures").exists()  # it failed before running anything
    script.write_text(DEMO.replace("measured {{x}}", "gave {{x}}"), encoding="utf-8")  # prose counts too
    with pytest.raises(AssertionError, match=r"cells at lines \[15\]"):
        check_current(script, tmp_path / "work", figs)
    script.write_text(DEMO + "\n# %%\nprint(x)\n", encoding="utf-8")  # a cell added at the end
    with pytest.raises(AssertionError, match=r"cells at lines \[28\]"):
        check_current(script, tmp_path / "work", figs)


@pytest.mark.fast
def test_a_notebook_with_stale_outputs_or_figures_fails(tmp_path: Path) -> None:
    script, figs = _built_demo(tmp_path)
    nb = script.with_suffix(".ipynb")
    good = nb.read_text(encoding="utf-8")
    edited = json.loads(good)
    edited["cells"][2]["outputs"][0]["text"] = ["x = 9\n"]  # an output edited by hand
    nb.write_text(build.dumps(edited), encoding="utf-8")
    stale_output = r'(?s)94-demo.ipynb no longer matches its run.*-.*"x = 9\\n".*\+.*"x = 2\\n"'
    with pytest.raises(AssertionError, match=stale_output):
        check_current(script, tmp_path / "work", figs)
    nb.write_text(good, encoding="utf-8")
    (figs / "94-x.png").write_bytes(b"other")  # the committed figure is not the one the notebook shows
    with pytest.raises(AssertionError, match="94-demo.ipynb shows another 94-x.png than the committed one"):
        check_current(script, tmp_path / "work", figs)
