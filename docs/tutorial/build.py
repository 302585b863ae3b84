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

    python docs/tutorial/build.py            # every lesson
    python docs/tutorial/build.py 03 05      # lessons whose file names start with 03 and 05

Runs go to a temporary working folder (a lesson writes its runs under ``runs/tutorial/``, relative to
where it runs); figures go to ``docs/tutorial/figures/`` through ``FEDSIM_TUTORIAL_FIGURES``.
"""
from __future__ import annotations

import contextlib
import io
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
    """Run every code cell of ``path`` in one namespace inside ``workdir``; record what each printed and
    which figures (PNG files written under ``figures``) it saved.  An exception stops the lesson and
    propagates: a lesson's own checks are plain ``assert`` statements."""
    cells = parse(path)
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
            code = compile("\n" * (cell.line - 1) + cell.text, str(path), "exec")
            with contextlib.redirect_stdout(out):
                exec(code, namespace)  # noqa: S102 - running the lesson is the point
            cell.output = out.getvalue()
            cell.figures = sorted(p.name for p in figures.glob("*.png")
                                  if before.get(p.name) != p.stat().st_mtime_ns)
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
    """The lesson as Markdown: prose, code, its printed output and its figures."""
    parts = [f"<!-- generated by docs/tutorial/build.py from {path.name}: edit the script, then rebuild -->"]
    for i, cell in enumerate(cells):
        if cell.solution and (i == 0 or not cells[i - 1].solution):
            parts.append(f"<details><summary>{SOLUTION}</summary>")
        if cell.kind == "markdown":
            parts.append(cell.output or cell.text)
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


def build(path: Path) -> Path:
    """Run one lesson and write its Markdown page beside it; returns the page's path."""
    with tempfile.TemporaryDirectory(prefix="fedsim-tutorial-") as work:
        cells = execute(path, HERE / "figures", Path(work))
    page = path.with_suffix(".md")
    page.write_text(render(path, cells), encoding="utf-8")
    return page


def main(argv: list[str]) -> int:
    chosen = [p for p in lessons() if not argv or any(p.name.startswith(a) for a in argv)]
    if not chosen:
        print(f"build.py: no lesson matches {' '.join(argv)} (lessons: "
              f"{', '.join(p.name for p in lessons())})", file=sys.stderr)
        return 2
    for path in chosen:
        t0 = time.perf_counter()
        page = build(path)
        print(f"{page.relative_to(HERE.parents[1])}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
