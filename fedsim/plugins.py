"""Packages that extend fedsim without fedsim importing them: the ``fedsim.plugins`` entry points.

Dependencies point one way: the measurement and theory package (``analysis``) reads fedsim's outputs and
APIs, and fedsim never imports it.  What analysis adds to a run (live theory probes) and to the command
line (``fedsim check``) it declares as a plugin in ``pyproject.toml``::

    [project.entry-points."fedsim.plugins"]
    analysis = "analysis.plugin"

A plugin module may define

* ``version_hooks``: a list of factories ``make(ctx) -> hook | None``; each hook is called as
  ``hook(ctx, final)`` at every model snapshot of a run and, if it has ``finish(run_dir)``, once at the end;
* ``commands``: a list of ``(name, help, configure)``, where ``configure(parser)`` adds the arguments and
  sets ``func`` (``func(args) -> exit code``).
"""
from __future__ import annotations

from functools import lru_cache
from importlib import metadata
from types import ModuleType
from typing import Any, Callable

GROUP = "fedsim.plugins"


@lru_cache(maxsize=1)
def plugins() -> tuple[ModuleType, ...]:
    """The installed plugin modules, in entry-point name order."""
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name)
    return tuple(ep.load() for ep in eps)


def plugin_version_hooks() -> list[Callable[[Any], Any]]:
    """Every plugin's version-hook factories."""
    return [make for mod in plugins() for make in getattr(mod, "version_hooks", ())]


def plugin_commands() -> list[tuple[str, str, Callable[[Any], None]]]:
    """Every plugin's command-line commands as ``(name, help, configure)``."""
    return [cmd for mod in plugins() for cmd in getattr(mod, "commands", ())]
