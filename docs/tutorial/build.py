"""Run the course's lessons and write each one as a Markdown page with its output and figures.

A lesson is a plain Python script in percent format: ``# %% [markdown]`` cells hold prose (each line
starts with ``#``), ``# %%`` cells hold code. This builder executes the code cells in order in one
namespace, as a notebook would, and writes ``NN-name.md`` beside the script: the prose, each code cell,
what it printed, and the figures it saved (PNG files under ``figures/``). A number the prose quotes is
written as ``{{expression:format}}`` (an f-string field, evaluated in the lesson's namespace after the
code cells above it), so the page quotes what this run measured, never a number typed by hand.  Cells
marked ``# %% solution`` (code) or ``# %% [markdown] solution`` (prose) are an exercise's worked solution:
they run like any other cell and are rendered collapsed, in a ``<details>`` block. The repository's host renders
the page with its figures, and the test suite runs the same executor on every lesson, so a lesson whose
run stops showing what its prose says fails CI.

The same run writes ``NN-name.ipynb`` beside the page: a Jupyter notebook (nbformat 4.5) of the same cells
with this run's outputs (what each code cell printed, as a ``stdout`` stream, then the figures it saved,
as ``image/png`` display data), the prose with its numbers filled in, and each worked solution after a
"Worked solution" heading cell, its cells tagged ``solution`` and collapsed (JupyterLab's ``source_hidden``
and ``outputs_hidden``).  A first cell tagged ``setup`` moves a notebook opened in ``docs/tutorial/`` to
the repository's root, where the script runs (Jupyter starts a kernel in the notebook's folder), so the
runs land in ``runs/tutorial/`` and the prose's links to their report.html work.  A prose cell with
``{{...}}`` fields keeps its template in the cell's metadata (``fedsim.prose``), so the notebook alone
can be run again and its page derived from that run: the test suite executes each committed notebook
that way (once; the script is not run a second time).  The bytes are deterministic: sorted keys, no
execution counts, no timestamps, cell ids by position.

    python docs/tutorial/build.py            # every lesson
    python docs/tutorial/build.py 03 05      # lessons whose file names start with 03 and 05

Runs go to a temporary working folder (a lesson writes its runs under ``runs/tutorial/``, relative to
where it runs); figures go to ``docs/tutorial/figures/`` through ``FEDSIM_TUTORIAL_FIGURES``.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Environment variable a lesson reads for the folder its figures go to.
FIGURES_ENV = "FEDSIM_TUTORIAL_FIGURES"


@dataclass
class Cell:
    """One cell of a lesson: ``kind`` is ``markdown`` or ``code``; ``line`` is where its text starts."""

    kind: str
    text: str
    line: int
    output: str = ""
    figures: list[str] = field(default_factory=list)
    #: part of an exercise's worked solution (``# %% solution`` or ``# %% [markdown] solution``): rendered
    #: collapsed, in one ``<details>`` block with the solution cells right after it
    solution: bool = False
    #: the notebook's own first cell (``SETUP``): run in the notebook, not shown on the page
    setup: bool = False
    #: the PNG bytes of each of ``figures``, read right after the cell ran (the notebook embeds them)
    images: list[bytes] = field(default_factory=list)


#: a number quoted in prose: ``{{expression}}`` or ``{{expression:format}}``, filled from the run
FIELD = re.compile(r"\{\{(.+?)\}\}")


def fill(text: str, namespace: dict[str, object], where: str = "") -> str:
    """Replace each ``{{...}}`` field of a prose cell with its value in ``namespace`` (as an f-string
    would), so the prose quotes the run above it.  A field naming nothing the lesson computed is an error."""
    def one(match: re.Match[str]) -> str:
        try:
            return eval("f" + repr("{" + match.group(1) + "}"), namespace)  # noqa: S307 - the lesson's own text
        except Exception as exc:
            raise ValueError(f"{where}: prose field {{{{{match.group(1)}}}}}: {type(exc).__name__}: {exc}") from exc
    return FIELD.sub(one, text)


def lessons() -> list[Path]:
    """The lessons, in course order (``NN-name.py``)."""
    return sorted(p for p in HERE.glob("[0-9][0-9]-*.py"))


def parse(path: Path) -> list[Cell]:
    """Split a percent-format script into cells (prose cells lose their leading ``# ``)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("# %%"):
        raise ValueError(f"{path.name}: a lesson starts with a '# %%' cell marker")
    cells: list[Cell] = []
    for i, line in enumerate(lines):
        if line.startswith("# %%"):
            kind = "markdown" if "[markdown]" in line else "code"
            cells.append(Cell(kind, "", i + 2, solution="solution" in line[4:].split()))
            continue
        cell = cells[-1]
        if cell.kind == "markdown":
            if line.strip() and not line.startswith("#"):
                raise ValueError(f"{path.name}:{i + 1}: a markdown cell's lines start with '#'")
            line = line[2:] if line.startswith("# ") else line[1:]
        cell.text += line + "\n"
    for cell in cells:
        body = cell.text.split("\n")
        while body and not body[0].strip():  # leading blank lines move the start
            body.pop(0)
            cell.line += 1
        cell.text = "\n".join(body).strip("\n")
    return [c for c in cells if c.text]


def execute(path: Path, figures: Path, workdir: Path) -> list[Cell]:
    """Run every code cell of the script ``path`` in one namespace inside ``workdir`` (see ``run``)."""
    return run(path, parse(path), figures, workdir)


def run(path: Path, cells: list[Cell], figures: Path, workdir: Path) -> list[Cell]:
    """Run the code cells in order in one namespace inside ``workdir``, as a notebook's kernel would, and
    fill the prose fields between them; record what each printed and which figures (PNG files written
    under ``figures``) it saved.  ``path`` is the lesson's script (its name in errors and tracebacks).  An
    exception stops the lesson and propagates: a lesson's own checks are plain ``assert`` statements."""
    figures.mkdir(parents=True, exist_ok=True)
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": str(path)}
    old_cwd, old_env = Path.cwd(), os.environ.get(FIGURES_ENV)
    os.environ[FIGURES_ENV] = str(figures)
    os.chdir(workdir)
    try:
        for cell in cells:
            if cell.kind != "code":
                cell.output = fill(cell.text, namespace, f"{path.name}:{cell.line}")
                continue
            before = {p.name: p.stat().st_mtime_ns for p in figures.glob("*.png")}
            out = io.StringIO()
            # blank lines in front keep the script's line numbers in a traceback
            code = compile("\n" * max(cell.line - 1, 0) + cell.text, str(path), "exec")
            with contextlib.redirect_stdout(out):
                exec(code, namespace)  # noqa: S102 - running the lesson is the point
            cell.output = out.getvalue()
            cell.figures = sorted(p.name for p in figures.glob("*.png")
                                  if before.get(p.name) != p.stat().st_mtime_ns)
            cell.images = [(figures / name).read_bytes() for name in cell.figures]
    finally:
        os.chdir(old_cwd)
        if old_env is None:
            os.environ.pop(FIGURES_ENV, None)
        else:
            os.environ[FIGURES_ENV] = old_env
    return cells


#: the summary line of a collapsed worked solution
SOLUTION = "Worked solution"


def render(path: Path, cells: list[Cell], figures_rel: str = "figures") -> str:
    """The lesson as Markdown: prose, code, its printed output and its figures; a line under the title
    links the lesson's notebook."""
    parts = [f"<!-- generated by docs/tutorial/build.py from {path.name}: edit the script, then rebuild -->"]
    cells = [c for c in cells if not c.setup]
    notebook_line = (f"*This lesson as a notebook, with this run's outputs: [`{path.with_suffix('.ipynb').name}`]"
                     f"({path.with_suffix('.ipynb').name}) ([how to open it](README.md#how-to-take-it)).*")
    for i, cell in enumerate(cells):
        if cell.solution and (i == 0 or not cells[i - 1].solution):
            parts.append(f"<details><summary>{SOLUTION}</summary>")
        if cell.kind == "markdown":
            text = cell.output or cell.text
            if i == 0 and text.startswith("# "):  # the title, then the link to the notebook
                title, _, rest = text.partition("\n")
                parts.extend(p for p in (title, notebook_line, rest.strip("\n")) if p)
            else:
                parts.append(text)
        else:
            parts.append(f"```python\n{cell.text}\n```")
            if cell.output.strip():
                parts.append(f"```text\n{cell.output.rstrip()}\n```")
            parts.extend(f"![{name}]({figures_rel}/{name})" for name in cell.figures)
        if cell.solution and (i == len(cells) - 1 or not cells[i + 1].solution):
            parts.append("</details>")
    return "\n\n".join(parts) + "\n"


def differences(page: str, rendered: str) -> list[str]:
    """The lines where a committed page differs from the page its lesson renders now (``-`` committed,
    ``+`` now), so a stale number in prose, output or code names itself; empty when the page is current."""
    import difflib
    return [line for line in difflib.unified_diff(page.splitlines(), rendered.splitlines(), "committed", "now",
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


#: the notebook's first cell: Jupyter starts a kernel in the notebook's folder, the lesson runs from the
#: repository's root (its runs under ``runs/tutorial/``, which the prose links as ``../../runs/...``)
SETUP = '''# Run from the repository's root, as the script does (Jupyter starts in the notebook's folder).
import os
from pathlib import Path

if Path.cwd().parts[-2:] == ("docs", "tutorial"):
    os.chdir(Path.cwd().parents[1])'''

#: tags of the cells the notebook adds or marks
SETUP_TAG, SOLUTION_TAG, HEADING_TAG = "setup", "solution", "solution-heading"

#: the markdown cell in front of each worked solution in the notebook
SOLUTION_HEADING = (f"#### {SOLUTION}\n\nTry the exercise first: the cells below are collapsed (click one, "
                    "or its `...`, to open it).")


def notebook_cells(path: Path) -> list[Cell]:
    """The notebook's cells for the script ``path``: the ``SETUP`` cell, then the script's cells."""
    return [Cell("code", SETUP, 0, setup=True), *parse(path)]


def _lines(text: str) -> list[str]:
    """A cell's source as Jupyter stores it: lines that keep their ``\\n``, the last without one."""
    return text.splitlines(keepends=True)


def notebook(path: Path, cells: list[Cell]) -> dict[str, object]:
    """The run ``cells`` (from ``run`` on ``notebook_cells(path)``) as an nbformat 4.5 notebook: prose with
    its fields filled (the template kept in the cell's metadata), code with what it printed and the
    figures it saved, worked solutions tagged and collapsed after a heading cell."""
    out: list[dict[str, object]] = []

    def add(kind: str, text: str, metadata: dict[str, object], outputs: list[dict[str, object]] | None = None,
            ) -> None:
        cell: dict[str, object] = {"cell_type": kind, "id": f"cell-{len(out):03d}", "metadata": metadata,
                                   "source": _lines(text)}
        if kind == "code":
            cell.update(execution_count=None, outputs=outputs or [])
        out.append(cell)

    for i, cell in enumerate(cells):
        if cell.solution and (i == 0 or not cells[i - 1].solution):
            add("markdown", SOLUTION_HEADING, {"tags": [HEADING_TAG]})
        metadata: dict[str, object] = {}
        if cell.solution:
            metadata = {"jupyter": {"outputs_hidden": True, "source_hidden": True}, "tags": [SOLUTION_TAG]}
        elif cell.setup:
            metadata = {"tags": [SETUP_TAG]}
        if cell.kind == "markdown":
            shown = cell.output or cell.text
            if FIELD.search(cell.text):
                metadata["fedsim"] = {"prose": cell.text}
            add("markdown", shown, metadata)
            continue
        outputs: list[dict[str, object]] = []
        if cell.output:
            outputs.append({"name": "stdout", "output_type": "stream", "text": _lines(cell.output)})
        for name, png in zip(cell.figures, cell.images):
            outputs.append({"data": {"image/png": base64.b64encode(png).decode("ascii"),
                                     "text/plain": [f"<figure {name}>"]},
                            "metadata": {}, "output_type": "display_data"})
        add("code", cell.text, metadata, outputs)
    return {"cells": out,
            "metadata": {"fedsim": {"generated_from": path.name},
                         "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def dumps(nb: dict[str, object]) -> str:
    """A notebook's file text, the same bytes for the same notebook (Jupyter's own layout: one-space
    indent, sorted keys)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def read_notebook(text: str, where: str = "notebook") -> list[Cell]:
    """The cells a notebook written by ``notebook`` runs: its code cells, its prose (the template where a
    cell keeps one), solution and setup cells marked by their tags; the solution headings are left out
    (``notebook`` writes them again).  Cells carry no script line (0)."""
    try:
        nb = json.loads(text)
        raw = nb["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: not a notebook ({type(exc).__name__}: {exc})") from exc
    cells: list[Cell] = []
    for cell in raw:
        tags = cell.get("metadata", {}).get("tags", [])
        if HEADING_TAG in tags:
            continue
        if cell.get("cell_type") not in ("markdown", "code"):
            raise ValueError(f"{where}: cell {cell.get('id')} is a {cell.get('cell_type')!r} cell")
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            text = cell.get("metadata", {}).get("fedsim", {}).get("prose", text)
        cells.append(Cell(cell["cell_type"], text, 0, solution=SOLUTION_TAG in tags, setup=SETUP_TAG in tags))
    return cells


def without_images(text: str) -> str:
    """A notebook's text with each embedded PNG replaced by its length, for comparing two runs' notebooks
    without comparing the renderer's bytes (the figures' bytes are checked against ``figures/``)."""
    nb = json.loads(text)
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                output["data"]["image/png"] = "<png>"
    return dumps(nb)


def build(path: Path, figures: Path = HERE / "figures") -> tuple[Path, Path]:
    """Run one lesson's notebook cells and write its Markdown page and its notebook beside it (its figures
    under ``figures``); returns their paths."""
    with tempfile.TemporaryDirectory(prefix="fedsim-tutorial-") as work:
        cells = run(path, notebook_cells(path), figures, Path(work))
    page, nb = path.with_suffix(".md"), path.with_suffix(".ipynb")
    page.write_text(render(path, cells), encoding="utf-8")
    nb.write_text(dumps(notebook(path, cells)), encoding="utf-8")
    return page, nb


def main(argv: list[str]) -> int:
    chosen = [p for p in lessons() if not argv or any(p.name.startswith(a) for a in argv)]
    if not chosen:
        print(f"build.py: no lesson matches {' '.join(argv)} (lessons: "
              f"{', '.join(p.name for p in lessons())})", file=sys.stderr)
        return 2
    for path in chosen:
        t0 = time.perf_counter()
        page, nb = build(path)
        root = HERE.parents[1]
        print(f"{page.relative_to(root)}, {nb.name}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
