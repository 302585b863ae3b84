"""Reading YAML written by users (scenarios, override values, device profiles): one ConfigError on one line
for bad YAML, a duplicate key, nesting too deep, or aliases that expand past a node budget ("billion
laughs"), measured on the node graph before any Python object is built."""
from __future__ import annotations

import math
import sys
from typing import Any

import yaml

from fedsim.errors import ConfigError


#: Deepest nesting of mappings and lists a scenario may have (real ones are 4-5 levels deep).
MAX_DEPTH = 32


class _ScenarioLoader(yaml.SafeLoader):
    """YAML as scenarios read it: a key given twice in one mapping is an error (the later one would
    silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice in one mapping",
                                                            key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_depth(value: Any, field: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` (walked without recursion, so any depth is safe)."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    while stack:
        v, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(path.split("[")[0][:80], f"nested more than {MAX_DEPTH} levels deep (allowed: at most "
                              f"{MAX_DEPTH} levels of mappings and lists)")
        if isinstance(v, dict):
            stack.extend((w, f"{path}.{k}" if path else str(k), depth + 1) for k, w in v.items())
        elif isinstance(v, list):
            stack.extend((w, f"{path}[{i}]", depth + 1) for i, w in enumerate(v))


#: Nodes (mappings, lists, scalars) that YAML aliases (``*name``) may add to a text once expanded.  Nodes
#: written out cost their own parsing time, so only the expansion is bounded: ten levels of nine aliases
#: (a "billion laughs", 9^10 nodes from 1 kB) would otherwise be walked node by node by the checks below
#: and the field checks after them.  Real scenarios reuse a device group or a link through an alias: tens
#: of nodes.  At this budget the walks after it take well under a second.
MAX_ALIAS_NODES = 100_000


def _alias_expansion(root: yaml.Node) -> tuple[int, float]:
    """(nodes written, nodes once every alias is expanded) of a composed YAML graph.  An alias shares the
    node it names, so the expanded size is counted once per node (memoised, without recursion): the cost
    is the text's size, whatever the expansion.  An alias inside the node it names (a recursive
    structure) expands without end: ``inf``."""
    size: dict[int, float] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            open_.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            continue
        if key in size:
            continue
        if key in open_:  # reached again while its own children are counted: a cycle
            return len(size), math.inf
        open_.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                return len(size), math.inf
            if id(child) not in size:
                stack.append((child, False))
    return len(size), size[id(root)]


def _check_expansion(node: yaml.Node | None, field: str, what: str) -> None:
    """Refuse a YAML graph whose aliases expand it by more than :data:`MAX_ALIAS_NODES` nodes, before
    anything walks it."""
    if node is None:
        return
    written, expanded = _alias_expansion(node)
    if math.isinf(expanded):
        raise ConfigError(field, f"{what} holds an alias inside the node it names (a structure that contains "
                          "itself; allowed: aliases to nodes defined before them)")
    if expanded - written > MAX_ALIAS_NODES:
        raise ConfigError(field, f"{what} expands through its aliases (*name) to {expanded:.3g} nodes from "
                          f"{written:,} written (allowed: aliases adding at most {MAX_ALIAS_NODES:,} nodes)")


def parse_yaml(text: str, field: str, what: str) -> Any:
    """YAML text of a scenario or an override value: one ConfigError (naming ``field``, on one line) for
    bad YAML, a duplicate key, aliases that expand past :data:`MAX_ALIAS_NODES` or nesting too deep.
    The text is composed into its node graph and measured before any Python object is built from it."""
    try:
        loader = _ScenarioLoader(text)
        try:
            node = loader.get_single_node()
            _check_expansion(node, field, what)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except ValueError as exc:  # int("1" * 5000): Python's limit on the digits of an integer read from text
        if isinstance(exc, ConfigError) or "digits" not in str(exc):
            raise
        raise ConfigError(field, f"{what} holds an integer of more than {sys.get_int_max_str_digits():,} digits "
                          "(allowed: integers of at most that many digits; every count and seed fits in 20)") from None
    except RecursionError:
        raise ConfigError(field, f"{what} is nested far too deep (allowed: at most {MAX_DEPTH} levels of mappings "
                          "and lists)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(field, f"{what} is not valid YAML{where}: {problem}") from None
    _check_depth(data, "" if field == "scenario" else field)
    return data
