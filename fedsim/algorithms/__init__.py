"""Algorithms: the public bases an algorithm is written on, every built-in algorithm, and name resolution.

Write your own by subclassing a loop shape (``SyncRounds``, ``AsyncSlots``, ``SemiAsyncRounds``, or a built-in such as
``FedAvg``) with a ``name`` and a ``Config`` dataclass; name it in a scenario as ``module:Class`` (see
docs/extending.md).  Every class listed in ``__all__`` is importable from here; the modules are imported on
first use, so ``import fedsim.algorithms`` stays cheap.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Iterable

from fedsim.algorithms.base import (Algorithm, AsyncSlots, SemiAsyncConfig, SemiAsyncRounds, SlotScheduler, SlotsConfig,
                                    SyncRounds, TaskCounter, quorum, staleness_weight)
from fedsim.messages import Assignment, Contribution, LocalTrainer, TrainOutcome, Update, Work
import fedsim.components as components
from fedsim.errors import ConfigError

#: public class → module that defines it (imported on first access)
_BUILTINS: dict[str, str] = {
    "FedAvg": "fedavg", "RoundsConfig": "fedavg", "FedAsync": "fedasync", "FedBuff": "fedbuff", "CA2FL": "ca2fl",
    "FedProx": "fedprox", "Cos2P": "cos2p", "AsyncSFL": "sfl_async", "GAS": "sfl_async", "MiniBatchSFL": "sfl_sync",
    "S2FL": "sfl_sync", "SemiSFL": "semisfl", "FedSwitchSL": "semisfl", "SupervisedOnly": "semisfl",
    "SemiFL": "semifl", "FedSwitch": "semifl", "FedMatch": "semifl", "HeteroFL": "width", "FjORD": "width",
    "FedRolex": "width", "FedRAA": "fedraa", "RAMFedLite": "fedraa_baselines", "PruneFLLite": "fedraa_baselines",
    "EmbracingFL": "embracingfl", "ServerOptimizer": "server_opt", "ServerOptConfig": "server_opt",
    "SplitRounds": "sfl_base", "SplitSlots": "sfl_base", "SplitConfig": "sfl_base", "SplitSession": "sfl_base",
    "SplitRoundsConfig": "sfl_base", "SplitSlotsConfig": "sfl_base", "ServerStep": "server_opt",
}
_ALGORITHM_CLASSES = ("FedAvg", "FedAsync", "FedBuff", "CA2FL", "Cos2P", "AsyncSFL", "GAS", "MiniBatchSFL", "S2FL",
                      "SemiSFL", "FedSwitchSL", "SupervisedOnly", "SemiFL", "FedSwitch", "FedMatch", "HeteroFL",
                      "FjORD", "FedRolex", "FedProx", "FedRAA", "RAMFedLite", "PruneFLLite", "EmbracingFL")

__all__ = ["Algorithm", "AsyncSlots", "Assignment", "Contribution", "LocalTrainer", "SemiAsyncConfig", "SemiAsyncRounds",
           "SlotScheduler", "SlotsConfig", "SyncRounds", "TaskCounter", "TrainOutcome", "Update", "Work", "quorum",
           "staleness_weight", "registry", "resolve", *_BUILTINS]


def __getattr__(name: str) -> Any:
    module = _BUILTINS.get(name)
    if module is None:
        raise AttributeError(f"module 'fedsim.algorithms' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fedsim.algorithms.{module}"), name)


def registry() -> dict[str, type[Algorithm]]:
    """Built-in algorithm name → class, for scenarios and the CLI."""
    classes = [__getattr__(n) for n in _ALGORITHM_CLASSES]
    return {cls.name: cls for cls in classes}


def installed_algorithms() -> dict[str, type[Algorithm]]:
    """Algorithms installed packages register under the ``fedsim.algorithms`` entry point, by name (those that
    do not load are left out here; naming one in a scenario reports why)."""
    out = {}
    for name in components.installed("algorithm"):
        try:
            out[name] = resolve(name)
        except ConfigError:
            continue
    return out


def resolve(name: Any, field: str = "algorithm.name", base_dirs: Iterable[Path | str | None] = ()) -> type[Algorithm]:
    """The algorithm class ``name`` stands for: a class given to the Python API, a built-in name, a name a
    package registers under the ``fedsim.algorithms`` entry point, or ``module:Class``.  A bad name, a
    reference that does not import, or an object that is no ``Algorithm`` subclass is one ConfigError line."""
    if isinstance(name, str) and not components.is_reference(name):  # a plain name: the built-ins first
        builtins = registry()  # imports every built-in algorithm module, so only when a name may be one
        if name in builtins:
            return builtins[name]
    obj = components.find("algorithm", name, field, base_dirs)
    if obj is None:
        builtins = registry()
        extra = sorted(components.installed("algorithm"))
        allowed = ", ".join(sorted(builtins) + extra)
        raise ConfigError(field, f"unknown algorithm {name!r} (allowed: {allowed}; or module:Class for your own)")
    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise ConfigError(field, f"{name!r} is {type(obj).__name__} {obj!r}, not a subclass of "
                          "fedsim.algorithms.Algorithm")
    if not (isinstance(getattr(obj, "Config", None), type)):
        raise ConfigError(field, f"{name!r} has no Config dataclass")
    return obj
