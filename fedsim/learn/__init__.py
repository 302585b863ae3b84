"""PyTorch side of fedsim: datasets and partitioners, block models, local training, cost probes.

The names below are loaded on first use (PEP 562), so importing one submodule (``fedsim.learn.state``,
say) does not import every other one and its dependencies (pandas, the FLOP counter's dispatch mode)."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE: dict[str, tuple[str, ...]] = {
    "costs": ("FlopCost", "MemoryEstimate", "activation_bytes", "flops_per_sample", "memory_estimate",
              "state_bytes", "tensor_bytes"),
    "data": ("DATASETS", "TASKS", "ArrayDataset", "FederatedData", "load_dataset", "normalise_channels",
             "quadratic_problem"),
    "models": ("MODELS", "REGRESSION_MODELS", "BlockModel", "WidthGroup", "build_model", "split_model"),
    "partition": ("PARTITIONS", "partition", "partition_summary"),
    "submodel": ("SubModel", "extract", "full_submodel", "insert", "width_submodel"),
    "sgd": ("SGDConfig", "TrainStats", "batch_schedule", "evaluate", "local_sgd", "loss_for", "num_steps"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "ArrayDataset", "FederatedData", "DATASETS", "TASKS", "load_dataset", "normalise_channels", "quadratic_problem",
    "PARTITIONS", "partition", "partition_summary",
    "BlockModel", "WidthGroup", "MODELS", "REGRESSION_MODELS", "build_model", "split_model",
    "SubModel", "full_submodel", "width_submodel", "extract", "insert",
    "SGDConfig", "TrainStats", "num_steps", "batch_schedule", "local_sgd", "evaluate", "loss_for",
    "FlopCost", "flops_per_sample", "tensor_bytes", "state_bytes", "activation_bytes", "MemoryEstimate",
    "memory_estimate",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
