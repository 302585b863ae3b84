"""The README stays the front door, and every page it or the docs link to exists.

A moved section must not leave a dead link behind: every relative link (pages and images) in README.md
and docs/**/*.md is resolved against the file that holds it, and ``#anchor`` links into Markdown pages must
name one of that page's headings (GitHub's slug rule: lower case, punctuation dropped, spaces to '-')."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # a quick file: part of `pytest -m fast` (tests/README.md)

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", page.read_text(encoding="utf-8"), re.M)}


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 260, f"README.md has {lines} lines; keep it the front door and move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):      # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if dest.is_relative_to(ROOT / "runs"):  # a lesson's own output, written when it runs: test_tutorial.py
            continue                             # runs each lesson and checks that every such link resolves
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links that go nowhere: {broken}"
