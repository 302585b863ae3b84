"""PyTorch side of fedsim: datasets and partitioners, block models, local training, cost probes."""
from .costs import (FlopCost, MemoryEstimate, activation_bytes, flops_per_sample, memory_estimate, state_bytes,
                    tensor_bytes)
from .data import DATASETS, TASKS, ArrayDataset, FederatedData, load_dataset, normalise_channels, quadratic_problem
from .models import MODELS, REGRESSION_MODELS, BlockModel, WidthGroup, build_model, split_model
from .partition import PARTITIONS, partition, partition_summary
from .submodel import SubModel, extract, full_submodel, insert, width_submodel
from .train import SGDConfig, TrainStats, batch_schedule, evaluate, local_sgd, loss_for, num_steps

__all__ = [
    "ArrayDataset", "FederatedData", "DATASETS", "TASKS", "load_dataset", "normalise_channels", "quadratic_problem",
    "PARTITIONS", "partition", "partition_summary",
    "BlockModel", "WidthGroup", "MODELS", "REGRESSION_MODELS", "build_model", "split_model",
    "SubModel", "full_submodel", "width_submodel", "extract", "insert",
    "SGDConfig", "TrainStats", "num_steps", "batch_schedule", "local_sgd", "evaluate", "loss_for",
    "FlopCost", "flops_per_sample", "tensor_bytes", "state_bytes", "activation_bytes", "MemoryEstimate",
    "memory_estimate",
]
