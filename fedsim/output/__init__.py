"""What a finished run or folder is shown with: the trace digest, the run's figures and report.html, the
report of a sweep or seeds folder, the second process that draws them, and ``fedsim compare``.

The package sits above the simulation: nothing under ``sim/``, ``learn/``, ``system/`` or ``algorithms/``
imports it (tests/test_pipeline.py)."""

from importlib import resources


def static_text(name: str) -> str:
    """A file of ``fedsim/output/static/`` (the reports' JavaScript, CSS and HTML template), as text.

    Why files: they are linted and loaded in a browser as they are (tests/test_report_browser.py), and
    installed with the package (``[tool.setuptools.package-data]``).  A ``.css`` or ``.html`` file's one
    final newline is not part of its text (the page inlines it where it stands); a ``.js`` file is whole."""
    text = resources.files(__name__).joinpath("static", name).read_text(encoding="utf-8")
    return text[:-1] if name.endswith((".css", ".html")) and text.endswith("\n") else text
