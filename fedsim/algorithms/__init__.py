"""Algorithms: the public bases an algorithm is written on, every built-in algorithm, and name resolution.

Write your own by subclassing a loop shape (``SyncRounds``, ``AsyncSlots``, ``SemiAsyncRounds``, or a built-in such as
``FedAvg``) with a ``name`` and a ``Config`` dataclass; name it in a scenario as ``module:Class`` (see
docs/extending.md).  Every class listed in ``__all__`` is importable from here; the modules are imported on
first use, so ``import fedsim.algorithms`` stays cheap.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import fedsim.components as components
from fedsim.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.algorithms.algorithm import Algorithm

#: public name → module that defines it (imported on first access: the configs and messages without torch, the
#: loops (``fedsim.algorithms.loops``) and the algorithms with it)
_BUILTINS: dict[str, str] = {
    "Algorithm": "algorithm", "TaskCounter": "algorithm", "build_algorithm": "algorithm", "client_task": "pipeline", "ClientWork": "training",
    "SyncRounds": "loops.sync_rounds", "AsyncSlots": "loops.async_slots", "SemiAsyncRounds": "loops.semi_async",
    "quorum": "loops.semi_async", "SlotScheduler": "loops.slots", "staleness_weight": "staleness",
    "LoopConfig": "configs", "SlotsConfig": "configs", "SemiAsyncConfig": "configs", "SemiConfig": "configs",
    "Assignment": "messages", "Contribution": "messages", "LocalTrainer": "messages", "TrainOutcome": "messages",
    "Update": "messages", "Work": "messages", "Exchange": "messages", "ExchangeError": "messages",
    "FedAvg": "fedavg", "RoundsConfig": "configs", "FedAsync": "fedasync", "FedBuff": "fedbuff", "CA2FL": "ca2fl",
    "FedProx": "fedprox", "Cos2P": "cos2p", "AsyncSFL": "gas", "GAS": "gas", "MiniBatchSFL": "minibatch_sfl",
    "S2FL": "minibatch_sfl", "SemiSFL": "semisfl", "FedSwitchSL": "semisfl", "SupervisedOnly": "semisfl",
    "SemiFL": "semifl", "FedSwitch": "semifl", "FedMatch": "semifl", "HeteroFL": "width", "FjORD": "width",
    "FedRolex": "width", "FedRAA": "fedraa", "RAMFedLite": "fedraa_baselines", "PruneFLLite": "fedraa_baselines",
    "EmbracingFL": "embracingfl", "LocalLossSFL": "local_loss_sfl", "ServerOptimizer": "server_opt",
    "ServerOptConfig": "configs",
    "SplitRounds": "loops.split_rounds", "SplitSlots": "loops.split_slots", "SplitConfig": "configs",
    "SplitSession": "loops.split",
    "SplitRoundsConfig": "configs", "SplitSlotsConfig": "configs", "ServerStep": "server_opt",
}
_ALGORITHM_CLASSES = ("FedAvg", "FedAsync", "FedBuff", "CA2FL", "Cos2P", "AsyncSFL", "GAS", "MiniBatchSFL", "S2FL",
                      "SemiSFL", "FedSwitchSL", "SupervisedOnly", "SemiFL", "FedSwitch", "FedMatch", "HeteroFL",
                      "FjORD", "FedRolex", "FedProx", "FedRAA", "RAMFedLite", "PruneFLLite", "EmbracingFL",
                      "LocalLossSFL")

__all__ = ["Algorithm", "AsyncSlots", "Assignment", "Contribution", "LocalTrainer", "SemiAsyncConfig", "SemiAsyncRounds",
           "SlotScheduler", "SlotsConfig", "SyncRounds", "TaskCounter", "TrainOutcome", "Update", "Work", "quorum",
           "staleness_weight", "registry", "resolve", "describe", "builtin", "BuiltinAlgorithm", "CATALOG", *_BUILTINS]


#: every built-in algorithm by name: (module, class, the name of its ``Config`` in ``fedsim.algorithms.configs``), so a
#: scenario naming one is loaded and checked without importing the algorithm (and torch); a test keeps it equal to
#: the classes themselves
CATALOG: dict[str, tuple[str, str, str]] = {
    "async-sfl": ("gas", "AsyncSFL", "AsyncSFLConfig"), "ca2fl": ("ca2fl", "CA2FL", "CA2FLConfig"),
    "cos2p": ("cos2p", "Cos2P", "Cos2PConfig"), "embracingfl": ("embracingfl", "EmbracingFL", "EmbracingFLConfig"),
    "fedasync": ("fedasync", "FedAsync", "FedAsyncConfig"), "fedavg": ("fedavg", "FedAvg", "FedAvgConfig"),
    "fedbuff": ("fedbuff", "FedBuff", "FedBuffConfig"), "fedmatch": ("semifl", "FedMatch", "FedMatchConfig"),
    "fedprox": ("fedprox", "FedProx", "FedProxConfig"), "fedraa": ("fedraa", "FedRAA", "FedRAAConfig"),
    "fedrolex": ("width", "FedRolex", "WidthConfig"), "fedswitch": ("semifl", "FedSwitch", "SemiFLConfig"),
    "fedswitch-sl": ("semisfl", "FedSwitchSL", "FedSwitchSLConfig"), "fjord": ("width", "FjORD", "WidthConfig"),
    "gas": ("gas", "GAS", "GASConfig"), "heterofl": ("width", "HeteroFL", "WidthConfig"),
    "local-loss-sfl": ("local_loss_sfl", "LocalLossSFL", "LocalLossSFLConfig"),
    "minibatch-sfl": ("minibatch_sfl", "MiniBatchSFL", "MiniBatchSFLConfig"),
    "prunefl-lite": ("fedraa_baselines", "PruneFLLite", "PruneFLLiteConfig"),
    "ramfed-lite": ("fedraa_baselines", "RAMFedLite", "RAMFedLiteConfig"), "s2fl": ("minibatch_sfl", "S2FL", "S2FLConfig"),
    "semifl": ("semifl", "SemiFL", "SemiFLConfig"), "semisfl": ("semisfl", "SemiSFL", "SemiSFLConfig"),
    "supervised-only": ("semisfl", "SupervisedOnly", "SupervisedOnlyConfig"),
}


@dataclass(frozen=True)
class BuiltinAlgorithm:
    """A built-in algorithm known by its name and its ``Config`` before its module is imported: what a scenario
    needs to be loaded, shown and checked.  :meth:`load` imports the class (and torch) when the run needs it."""

    name: str
    module: str
    qualname: str
    Config: type

    def load(self) -> "type[Algorithm]":
        return getattr(importlib.import_module(f"fedsim.algorithms.{self.module}"), self.qualname)


def builtin(name: str) -> BuiltinAlgorithm | None:
    """The built-in algorithm ``name``, not yet imported; None if no built-in has that name."""
    entry = CATALOG.get(name)
    if entry is None:
        return None
    from fedsim.algorithms import configs

    module, qualname, config = entry
    return BuiltinAlgorithm(name, module, qualname, getattr(configs, config))


def describe(name: Any, field: str = "algorithm.name", base_dirs: Iterable[Path | str | None] = ()) -> Any:
    """What a scenario needs of the algorithm ``name`` (its ``name`` and ``Config``): a built-in name gives a
    :class:`BuiltinAlgorithm` without importing it; anything else is :func:`resolve`'s class."""
    if isinstance(name, str) and not components.is_reference(name):
        found = builtin(name)
        if found is not None:
            return found
    return resolve(name, field, base_dirs)


def references() -> dict[str, BuiltinAlgorithm]:
    """Every built-in algorithm by name, not imported (for ``fedsim reference``)."""
    return {name: builtin(name) for name in CATALOG}  # type: ignore[misc]


def __getattr__(name: str) -> Any:
    module = _BUILTINS.get(name)
    if module is None:
        raise AttributeError(f"module 'fedsim.algorithms' has no attribute {name!r}")
    path = {"messages": "fedsim.messages", "training": "fedsim.training"}.get(module, f"fedsim.algorithms.{module}")
    return getattr(importlib.import_module(path), name)


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
    from fedsim.algorithms.algorithm import Algorithm

    if not (isinstance(obj, type) and issubclass(obj, Algorithm)):
        raise ConfigError(field, f"{name!r} is {type(obj).__name__} {obj!r}, not a subclass of "
                          "fedsim.algorithms.Algorithm")
    if not (isinstance(getattr(obj, "Config", None), type)):
        raise ConfigError(field, f"{name!r} has no Config dataclass")
    from fedsim.algorithms.algorithm import uncalled_hooks, unread_config_fields

    # a hook its shape never calls would be silently ignored; a field an inherited method reads and the Config
    # left out would fail mid-run
    refused = uncalled_hooks(obj) or unread_config_fields(obj)
    if refused is not None:
        raise ConfigError(field, refused)
    return obj
