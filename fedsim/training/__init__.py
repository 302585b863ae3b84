"""Local training of a run, along its jobs: the executor (:mod:`~fedsim.training.executor`: the worker model,
the data on the training device, evaluation), the execution modes (:mod:`~fedsim.training.modes`: in process,
systems-only, batched, remote), the cost and memory model (:mod:`~fedsim.training.cost_model`) and what a
training hands back (:mod:`~fedsim.training.results`).  The names below are the public ones."""
from __future__ import annotations

from fedsim.training.cost_model import TrainingCosts
from fedsim.training.executor import TrainingExecutor, sgd_config
from fedsim.training.modes import ExecutionMode, train_task
from fedsim.training.results import ClientWork, PendingTraining, TrainResult

__all__ = ["ClientWork", "ExecutionMode", "PendingTraining", "TrainResult", "TrainingCosts", "TrainingExecutor",
           "sgd_config", "train_task"]
