"""Regenerate every paper's claims table at one commit: five recipes, the default seeds and the disjoint
stability seeds, into one folder.

    python -m figures.regenerate --out DIR [--resume] [--only gas fedraa ...] [--write-docs] [--estimate]

Each recipe runs with :data:`figures.claims.DEFAULT_SEEDS` and is judged again on
:data:`figures.claims.DEFAULT_STABILITY_SEEDS` (under ``DIR/NAME/stability``), so every table states its
seeds and how many rows keep their verdict on the second set.  ``DIR/TABLES.md`` collects the five claims
tables with the commit and the seed sets, and ``DIR/README_BLOCK.md`` is the block for the README's paper
table (one line per paper: the verdict counts and the stable rows).  ``--write-docs`` also replaces each
``docs/papers/NAME.md``'s claims table (between its ``<!-- claims:begin -->`` and ``<!-- claims:end -->``
markers) with the new one.  ``--resume`` reuses finished runs of identical scenarios (Co-S²P and SemiSFL
always do).  ``--estimate`` prints the expected wall time from :data:`MINUTES_PER_SEED` and exits.

Wall time: about 6.6 hours on two shared cores (see :func:`estimate_minutes`); run it on an otherwise idle
machine, with ``--resume`` after an interruption.
"""
from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path
from typing import Any, Sequence

from figures.claims import DEFAULT_SEEDS, DEFAULT_STABILITY_SEEDS, commit_hash

RECIPES: tuple[str, ...] = ("fedraa", "embracingfl", "semisfl", "cos2p", "gas")
#: wall minutes per seed of each full recipe on two shared cores, from the recorded full runs at three seeds
#: (docs/papers/*.md: Fed-RAA 19 min, SemiSFL 29 min, GAS 39 min, Co-S²P about 30 min), divided by three;
#: EmbracingFL's 12.5 min × 1.3 (Table 2's fixed 16-client world) × 1.4 (the choices' 9 extra runs per seed
#: on its 22), divided by three.  GAS measured at these settings (commit 0a94a82): its 492 runs of seeds 0–9
#: took 56 process-minutes on an otherwise idle two-core machine, and 1.5 minutes more to judge them.
MINUTES_PER_SEED: dict[str, float] = {"fedraa": 6.3, "embracingfl": 7.6, "semisfl": 9.7, "cos2p": 10.0, "gas": 5.8}
PAGES = {"fedraa": "fedraa", "embracingfl": "embracingfl", "semisfl": "semisfl", "cos2p": "cos2p", "gas": "gas"}
TITLES = {"fedraa": "Fed-RAA", "embracingfl": "EmbracingFL", "semisfl": "SemiSFL", "cos2p": "Co-S²P", "gas": "GAS"}
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


def estimate_minutes(recipes: Sequence[str] = RECIPES, seeds: Sequence[int] = DEFAULT_SEEDS,
                     stability_seeds: Sequence[int] = DEFAULT_STABILITY_SEEDS) -> float:
    """Expected wall minutes: per-seed cost × (seeds + stability seeds), summed over the recipes."""
    return sum(MINUTES_PER_SEED[r] * (len(seeds) + len(stability_seeds)) for r in recipes)


def _run(name: str, out: Path, resume: bool) -> None:
    mod = importlib.import_module(f"figures.{name}")
    kw: dict[str, Any] = {"seeds": list(DEFAULT_SEEDS), "stability_seeds": list(DEFAULT_STABILITY_SEEDS)}
    if "resume" in mod.make_all.__code__.co_varnames:
        kw["resume"] = resume
    mod.make_all(out / name, **kw)


def counts(claims_md: str) -> dict[str, int]:
    """Verdict counts of a claims table's rows (bold or plain), and its stable rows from the stability line.
    Only the claims table itself counts (from its ``| claim`` header to its last row): a recipe's other
    tables after it, such as GAS's checks against the authors' code, are not claims of the paper."""
    out = {"yes": 0, "partly": 0, "no": 0, "n/a": 0}
    inside = False
    for line in claims_md.splitlines():
        if line.startswith("| claim"):
            inside = True
        elif inside and not line.startswith("|"):
            break
        m = re.match(r"^\|.*\| \**(yes|partly|no|n/a)\** \|$", line) if inside else None
        if m:
            out[m.group(1)] += 1
    agree = re.search(r"(\d+) of (\d+) rows agree", claims_md)
    if agree:
        out["stable"], out["rows"] = int(agree.group(1)), int(agree.group(2))
    return out


def replace_block(page: str, table: str) -> str | None:
    """``page`` with the text between its claims markers replaced by ``table``; None without the markers."""
    if BEGIN not in page or END not in page:
        return None
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table.rstrip()}\n{END}{tail}"


def collect(out: Path, recipes: Sequence[str], commit: str, *, write_docs: bool = False,
            docs: Path | None = None) -> str:
    """Write ``out/TABLES.md`` and ``out/README_BLOCK.md`` from the recipes' claims tables (and, with
    ``write_docs``, each paper page's claims block); returns the README block."""
    seeds = " ".join(map(str, DEFAULT_SEEDS))
    stab = " ".join(map(str, DEFAULT_STABILITY_SEEDS))
    parts = [f"# Claims tables at commit `{commit}`\n\nSeeds {seeds}; stability seeds {stab}.  Written by "
             f"`python -m figures.regenerate`.\n"]
    block = ["| paper | yes | partly | no | n/a | rows stable on the second seed set |", "|---|---|---|---|---|---|"]
    docs = docs or Path(__file__).resolve().parents[1] / "docs" / "papers"
    for name in recipes:
        path = out / name / "claims.md"
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        parts += [f"## {TITLES[name]}\n", text]
        c = counts(text)
        stable = f"{c['stable']} of {c['rows']}" if "stable" in c else "not measured"
        block.append(f"| {TITLES[name]} | {c['yes']} | {c['partly']} | {c['no']} | {c['n/a']} | {stable} |")
        if write_docs:
            page = docs / f"{PAGES[name]}.md"
            new = replace_block(page.read_text(encoding="utf-8"), text)
            if new is None:
                print(f"{page.name}: no claims markers; paste {path} by hand")
            else:
                page.write_text(new, encoding="utf-8")
    text = "\n".join(block) + f"\n\nCommit `{commit}`, seeds {seeds}, stability seeds {stab}.\n"
    (out / "TABLES.md").write_text("\n".join(parts), encoding="utf-8")
    (out / "README_BLOCK.md").write_text(text, encoding="utf-8")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m figures.regenerate", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder (one sub-folder per recipe)")
    p.add_argument("--only", nargs="+", choices=RECIPES, default=None, help="these recipes only")
    p.add_argument("--resume", action="store_true", help="reuse finished runs of identical scenarios")
    p.add_argument("--write-docs", action="store_true", help="replace the claims block of docs/papers/NAME.md")
    p.add_argument("--estimate", action="store_true", help="print the expected wall time and exit")
    args = p.parse_args(argv)
    recipes = tuple(args.only or RECIPES)
    minutes = estimate_minutes(recipes)
    if args.estimate:
        print(f"about {minutes / 60:.1f} h of wall time on two shared cores ({', '.join(recipes)}; seeds "
              f"{len(DEFAULT_SEEDS)} + {len(DEFAULT_STABILITY_SEEDS)} stability)")
        return 0
    from tqdm import tqdm

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = commit_hash()
    for name in tqdm(recipes, desc="recipes", unit="recipe", dynamic_ncols=True):
        _run(name, out, args.resume)
    print(collect(out, recipes, commit, write_docs=args.write_docs))
    if commit_hash() != commit:
        print(f"warning: the checkout moved from {commit} to {commit_hash()} during the run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
