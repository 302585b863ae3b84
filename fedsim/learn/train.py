"""The former name of :mod:`fedsim.learn.sgd` (local SGD, its one step, local objectives, evaluation).

Kept only because earlier versions of docs/extending.md and docs/guide.md documented these names under
``fedsim.learn.train`` as the import path of user code (a local objective, a sample order, a trainer's SGD
step); existing user modules keep importing.  New code imports :mod:`fedsim.learn.sgd`, and nothing in fedsim
imports this module.
"""
from __future__ import annotations

from fedsim.learn.sgd import LocalObjective, PlainSGD, SampleOrder, TrainStats, sgd_step, static_bn_statistics

__all__ = ["LocalObjective", "PlainSGD", "SampleOrder", "TrainStats", "sgd_step", "static_bn_statistics"]
