"""The scenario-field reference (``fedsim reference``, docs/scenario-reference.md), generated from the section
and algorithm config dataclasses."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import yaml

from fedsim.config import to_mapping
from fedsim.scenario_sections import SECTIONS


def _reference_default(value: Any) -> str:
    if value is None:
        return "null"
    if dataclasses.is_dataclass(value):
        return "(section)"
    # one line, however long: a line break would split the reference's Markdown table row
    text = yaml.safe_dump(to_mapping(value), default_flow_style=True, width=float("inf")).strip()
    return text[:-4].strip() if text.endswith("...") else text


def field_reference(algorithms: Mapping[str, type]) -> str:
    """The scenario-field reference (Markdown), generated from the config dataclasses: every field with its
    type, default, allowed values and unit, and every algorithm of ``algorithms`` (name → class; the
    built-ins and those installed packages register).  ``fedsim reference`` prints it; docs/scenario-reference.md
    is this text for the built-ins (a test keeps it current)."""
    from fedsim.config import type_text, walk_fields

    def table(rows: list[Any]) -> list[str]:
        out = ["| field | type | default | allowed | meaning |", "|---|---|---|---|---|"]
        for f in rows:
            allowed = f.domain.describe(type_text(f.type).startswith("an integer")) if f.domain else ", ".join(f.choices)
            out.append(f"| `{f.path}` | {type_text(f.type)} | `{_reference_default(f.default)}` | {allowed} | {f.doc} |")
        return out

    lines = ["# Scenario field reference", "",
             "Generated from the config dataclasses by `fedsim reference` (do not edit by hand). Every field",
             "can be set in a scenario YAML or overridden as `section.field=value`. Numbers outside `allowed`,",
             "NaN and ±inf are refused with one line naming the field. With several algorithms, address one by",
             "label: `algorithm.<label>.field=value`.", "",
             "Top level: `name` (a string), `seed` (an integer >= 0), `algorithm` (a name, a mapping with `name`,",
             "optional `label` and the algorithm's fields below, or a list of them; `algorithm=a,b` on the command",
             "line), and the sections below. `stop` must name at least one of `max_versions`, `max_time_s`,",
             "`max_updates`. `modules` (written by a run into its `scenario.yaml`, rarely by hand): each user module a",
             "`module:attribute` reference imported, `{path, sha256}`; it is imported from that file's folder first,",
             "so the run folder repeats from any working directory, and a file changed since is said in one warning.",
             ""]
    for key, cls in SECTIONS.items():
        lines += [f"## `{key}`", ""]
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(cls.__name__ + "("):
            lines += [" ".join(doc.split()), ""]
        lines += table(walk_fields(cls, key)) + [""]
    lines += ["## `algorithm`", ""]
    for name, alg in sorted(algorithms.items()):
        lines += [f"### `{name}`", ""] + table(walk_fields(alg.Config, "algorithm")) + [""]
    return "\n".join(lines).rstrip() + "\n"
