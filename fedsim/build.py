"""A scenario's data, partition and initial global model, built from the scenario alone.

The runner builds a run's inputs with these, and analysis code uses exactly the same functions to rebuild
them from a run folder's ``scenario.yaml`` when it re-measures saved checkpoints.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field as dc_field

import numpy as np
import torch

from fedsim.errors import ConfigError
from fedsim.learn.data import FederatedData, load_dataset
from fedsim.learn.models import build_model
from fedsim.learn.partition import partition
from fedsim.scenario import Scenario
from fedsim.sim.rng import Streams


@dataclass
class Prepared:
    data: FederatedData
    parts: list[np.ndarray]
    #: one-line findings of :func:`preflight` worth telling the user (e.g. the host device's memory)
    notes: list[str] = dc_field(default_factory=list)
    #: legitimate inputs that are probably not what was meant (``World.input_warnings``), said on stderr as
    #: ``fedsim: warning: ...`` once every check has passed, with or without a progress bar
    warnings: list[str] = dc_field(default_factory=list)
    #: the most simulated events any of the scenario's algorithms may run to (the preflight's estimate, an
    #: upper bound; inf where no stop rule bounds it): how big the run's outputs will be
    events: float = 0.0


def prepare_data(scenario: Scenario) -> Prepared:
    """Load the dataset and partition it across clients (both from named streams)."""
    streams = Streams(scenario.seed)
    d = scenario.data
    data = load_dataset(d.name, root=d.root, num_clients=d.num_clients, rng=streams.numpy("data", "load"), options=d.options,
                        base_dirs=(scenario.source_dir,))
    p = d.partition
    if data.train.task != "classification" and p.method in ("dirichlet", "dirichlet_client", "shards"):
        raise ConfigError("data.partition.method", f"'{p.method}' splits by class label, but dataset '{d.name}' is a "
                                                   f"{data.train.task} task without classes (allowed: iid, quantity, "
                                                   f"natural)")
    if p.method == "shards" and p.labels_per_client > data.train.num_classes:
        raise ConfigError("data.partition.labels_per_client", f"got {p.labels_per_client}, but dataset '{d.name}' has "
                          f"{data.train.num_classes} classes (allowed: 1 to {data.train.num_classes})")
    try:
        parts = partition(
            data.train.y.numpy(), d.num_clients, p.method, streams.numpy("data", "partition"), alpha=p.alpha,
            labels_per_client=p.labels_per_client, sigma=p.sigma, min_size=p.min_size, natural=data.natural_partition,
            size_weights=p.size_weights,
        )
    except ConfigError as exc:  # the partition module names its own arguments; say the scenario's path
        field = exc.field
        if field == "partition.num_clients":
            field = "data.num_clients"
        elif field.startswith("partition."):
            field = "data." + field
        raise ConfigError(field, exc.message) from None
    empty = [i for i, ix in enumerate(parts) if len(ix) == 0]
    if empty:
        raise ConfigError(
            "data.num_clients",
            f"{len(empty)} of {len(parts)} clients got no training samples from {d.name} ({len(data.train)} samples); "
            "use fewer clients or a partition with min_size >= 1",
        )
    return Prepared(data, parts)


#: In-place value fills of tensors: on a meta tensor (no values) each changes nothing.
_VALUE_FILLS = frozenset({"normal_", "uniform_", "zero_", "fill_", "erfinv_", "mul_", "add_", "sub_", "div_", "clamp_",
                          "copy_", "bernoulli_", "random_", "exponential_", "log_normal_", "cauchy_", "geometric_"})


class _SkipMetaInit(torch.overrides.TorchFunctionMode):
    """Skips weight initialisation of meta tensors (``torch.nn.init.*`` and in-place fills such as
    ``normal_``), which only sets values a meta tensor does not have.  Why: PyTorch runs ``normal_`` and most
    other meta-tensor fills through its Python reference implementations, whose first use imports the
    compiler stack (``torch._dynamo``, 1-2 s of a fresh process that otherwise never needs it).  Shapes,
    dtypes and the parameters themselves are unchanged."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        if isinstance(target, torch.Tensor) and target.is_meta and (
                getattr(func, "__module__", None) == "torch.nn.init" or getattr(func, "__name__", "") in _VALUE_FILLS):
            return target
        return func(*args, **kwargs)


#: Most parameter memory a simulated model may have (1 GiB of float32: 268 million parameters).  Models of
#: on-device training are far smaller; a larger one is a typo (``hidden: [100000, 100000]``), and building it
#: would exhaust the machine before any check could name the field.
MAX_MODEL_BYTES = 2**30


def build_global_model(scenario: Scenario, data: FederatedData) -> torch.nn.Module:
    """The scenario's model for its dataset.  It is first built without memory (PyTorch's meta device), so
    a model too large to build, or one that cannot take the dataset's inputs, is one ConfigError."""
    m = scenario.model
    shape, task = tuple(data.train.input_shape), getattr(data.train, "task", "classification")
    from fedsim.learn.models import REGRESSION_MODELS

    if m.name in REGRESSION_MODELS and task == "classification":
        raise ConfigError("model.name", f"got {m.name!r}, the regression model (one output, squared loss), but dataset "
                          f"'{data.train.name}' is a classification task (allowed: any other model)")
    build = functools.partial(build_model, m.name, shape, data.train.num_outputs, hidden=m.hidden, width=m.width,
                              depth=m.depth, bn=m.bn, options=m.options,
                              base_dirs=(scenario.source_dir,))
    try:
        with torch.device("meta"), _SkipMetaInit():
            probe = build(seed_generator=None)
    except ConfigError:
        raise
    except (RuntimeError, ValueError) as exc:  # e.g. a pooling layer left with a 0x0 image
        raise ConfigError("model.name", f"model {m.name!r} cannot take the inputs of dataset '{data.train.name}' "
                          f"(shape {shape}): {' '.join(str(exc).split())[:200]}") from None
    size = sum(p.numel() * p.element_size() for p in probe.parameters())
    if size > MAX_MODEL_BYTES:
        n = sum(p.numel() for p in probe.parameters())
        raise ConfigError("model", f"model {m.name!r} on inputs {shape} would have {n:,} parameters ({size / 1e9:.3g} GB; "
                          f"allowed: at most {MAX_MODEL_BYTES / 1e9:.3g} GB); lower model.hidden, model.width or model.depth")
    return build(seed_generator=Streams(scenario.seed).torch("model", "init"))
