"""Width-reduction baselines: HeteroFL, FjORD and FedRolex over the synchronous FedAvg round.

All three keep FedAvg's round (sampling, deadline, aggregation by the masked weighted average of
``fedsim.learn.state``) and differ only in what a client trains, so each is a FedAvg subclass that writes
the one template method ``assign(client, round_)``:

- **HeteroFL** (Diao et al., ICLR 2021): a client of width w trains the *prefix* sub-model keeping the
  first ⌈w·n⌉ units of every width group (channels, neurons, heads), fixed for the whole run.
- **FjORD** (Horváth et al., NeurIPS 2021), ordered dropout: the client downloads the prefix sub-model at
  its maximum width w_max and, at every local SGD step, draws a width p uniformly from its allowed set
  {p in ``allowed_widths`` : p <= w_max} ∪ {w_max} and trains the nested prefix sub-model of width p on
  that step's batch.  The draw comes from the client's training stream for the task, so it is
  deterministic per seed.
- **FedRolex** (Alam et al., NeurIPS 2022): a rolling window.  In round r (1, 2, ...) a client of width w
  keeps, in a width group of n units, the ⌈w·n⌉ units ``(r − 1 + j) mod n``, j = 0, 1, ...: the window
  starts one unit further each round and wraps around, so every unit is trained by weak clients in turn.

**Per-client width** comes from the client's device class (the ``profile`` of its group in
``devices.mix``): ``widths`` is either a table ``{device class: width}`` naming every class of the mix
(width in (0, 1]), or ``auto``: per class, the largest width in ``allowed_widths`` whose training memory
(``fedsim.learn.costs.memory_estimate`` of the extracted sub-model at the scenario's batch size) fits the
device's memory.  A class that cannot hold even its width is refused with one line naming the device,
the model and both memory figures.

**Costs** follow the sub-model (``fedsim.learn.submodel``): bytes in both directions are the extracted
tensors only, compute time comes from the FLOPs of the extracted module.  For FjORD the download and
upload are the w_max prefix (the server cannot know in advance which nested widths a client will draw;
every entry of the w_max prefix may change), compute is the sum over steps of the FLOPs of the prefix
sub-model actually trained at that step × its batch size, and memory is checked at w_max (the largest
sub-model a step can use).  FjORD's momentum buffer lives at the w_max shape; a step updates (and decays
the momentum of) only the entries of the prefix it trained.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping

import numpy as np
import torch

from fedsim.messages import Assignment, TrainOutcome
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import require
from fedsim.errors import ConfigError, DivergenceError
from fedsim.learn.submodel import extract, insert, width_submodel
from fedsim.learn.sgd import LocalObjective, TrainStats, batch_schedule, loss_for, num_steps, sgd_step
from fedsim.algorithms.configs import DEFAULT_WIDTHS, WidthConfig, check_width, device_classes

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.training import TrainingExecutor
    from fedsim.learn.models import BlockModel
    from fedsim.learn.submodel import SubModel
    from fedsim.context import Context
    from fedsim.scenario import Scenario

class WidthFedAvg(FedAvg):
    """FedAvg whose clients train a sub-model of a width given by their device class (abstract: a
    subclass writes :meth:`submodel_for`)."""

    name = "width-base"
    theorems = ()  # width sub-models (HeteroFL, FjORD, FedRolex): no theorem written for their setting
    fits_submodels = True

    Config = WidthConfig

    def __init__(self, ctx: "Context", config: Any) -> None:
        super().__init__(ctx, config)
        if not ctx.training.worker.width_groups():
            raise ConfigError("model.name", f"{self.name} trains narrower sub-models, but model "
                              f"{ctx.scenario.model.name!r} declares no width groups (built-ins with them: mlp, cnn, "
                              "alexnet_cifar, resnet20, vit, femnist_cnn; a model factory can return a BlockModel "
                              "with groups)")
        world = ctx.world
        classes = [world.device_class(c) for c in range(ctx.num_clients)]
        cfg = self.cfg
        allowed = sorted({float(w) for w in cfg.allowed_widths}, reverse=True)
        subs = [width_submodel(ctx.training.worker, w, scheme="prefix") for w in allowed]
        self.class_width: dict[str, float] = {}
        widths = np.zeros(ctx.num_clients, dtype=np.float64)
        fitted: dict[tuple[str, float], float] = {}  # (class, memory): groups of one class may differ in memory_mb
        for c, cls_name in enumerate(classes):
            key = (cls_name, float(world.device(c).memory_bytes))
            if key not in fitted:
                if isinstance(cfg.widths, Mapping):
                    fitted[key] = float(cfg.widths[cls_name])
                    sub = width_submodel(ctx.training.worker, fitted[key], scheme="prefix")
                    ctx.training.check_submodel_memory(c, sub)
                else:
                    fitted[key] = allowed[subs.index(ctx.training.fit_submodel(c, subs))]
            widths[c] = fitted[key]
            self.class_width.setdefault(cls_name, fitted[key])
        #: width of every client (from its device class and its group's memory)
        self.client_width = widths

    def memory_at(self, width: float) -> int:
        """Training memory of the prefix sub-model at ``width`` (bytes), as the run measures it."""
        training = self.ctx.training
        return int(training.submodel_costs(width_submodel(training.worker, width, scheme="prefix")).memory.total)

    # --------------------------------------------------------------------------------- assignment
    def assign(self, client: int, round_: int | None = None) -> Assignment:
        return Assignment(submodel=self.submodel_for(client, round_), round=round_)

    def submodel_for(self, client: int, round_: int | None) -> "SubModel":  # pragma: no cover - abstract
        raise NotImplementedError


class HeteroFL(WidthFedAvg):
    """HeteroFL: a fixed prefix sub-model per device class."""

    name = "heterofl"

    def submodel_for(self, client: int, round_: int | None) -> "SubModel":
        return width_submodel(self.ctx.training.worker, float(self.client_width[client]), scheme="prefix")


class FedRolex(WidthFedAvg):
    """FedRolex: the kept units roll by one per round (offset r − 1 in round r), with wrap-around."""

    name = "fedrolex"

    @staticmethod
    def offset(round_: int | None) -> int:
        """Window start of round ``round_`` (rounds count from 1; round 1 starts at unit 0)."""
        return max(0, int(round_ or 1) - 1)

    def submodel_for(self, client: int, round_: int | None) -> "SubModel":
        return width_submodel(self.ctx.training.worker, float(self.client_width[client]), scheme="rolling",
                              offset=self.offset(round_))


class FjORD(WidthFedAvg):
    """FjORD: ordered dropout, a nested prefix width drawn per local step (see the module docstring)."""

    name = "fjord"

    def client_widths(self, client: int) -> list[float]:
        """The widths ``client`` may draw at a step: the allowed widths up to its maximum, and the maximum."""
        top = float(self.client_width[client])
        return sorted({float(w) for w in self.cfg.allowed_widths if w <= top} | {top})

    def assign(self, client: int, round_: int | None = None) -> Assignment:
        top = float(self.client_width[client])
        sub = width_submodel(self.ctx.training.worker, top, scheme="prefix")
        trainer = OrderedDropoutTrainer(self.client_widths(client), sub)
        return Assignment(submodel=sub, trainer=trainer, round=round_, info={"widths": trainer.widths})


class OrderedDropoutTrainer:
    """FjORD's local training: per SGD step, draw a width uniformly from ``widths`` and train the nested
    prefix sub-model of that width on the step's batch.

    Called as ``trainer(module, training, client, indices, generator)`` with ``module`` the client's extracted
    w_max sub-model.  Batches follow :func:`fedsim.learn.sgd.batch_schedule` on ``generator`` (as plain
    local SGD does); the widths are drawn from the same generator before the batches, so both are fixed
    by the client's task stream.  Each step is :func:`fedsim.learn.sgd.sgd_step` (the scenario's lr,
    momentum, weight decay and clipping, the arithmetic of plain local SGD) on the nested sub-model's
    tensors; the momentum buffer has the w_max shape and a step touches only the entries of the prefix it
    trained.

    ``objective`` (a :class:`~fedsim.learn.sgd.LocalObjective`; give the same one to the assignment,
    which costs its extra tensors) is honoured as plain local SGD honours it: :meth:`begin` sees the
    downloaded w_max parameters, its loss term joins every step's loss, and its gradient term is added in
    w_max coordinates, of which the step keeps the entries of the nested prefix it trains.
    """

    def __init__(self, widths: list[float], top: "SubModel", objective: LocalObjective | None = None) -> None:
        self.widths = [float(w) for w in widths]
        self.top = top
        self.objective = objective
        #: widths drawn at each step of the last call (for tests and diagnostics)
        self.drawn: list[float] = []

    def draw(self, steps: int, generator: torch.Generator) -> list[float]:
        """``steps`` widths drawn uniformly from the allowed set with ``generator``."""
        if steps <= 0:
            return []
        idx = torch.randint(len(self.widths), (steps,), generator=generator)
        return [self.widths[int(i)] for i in idx]

    def __call__(self, module: "BlockModel", training: "TrainingExecutor", client: int, indices: np.ndarray,
                 generator: torch.Generator) -> TrainOutcome:
        sgd = training.sgd
        sgd.validate()
        loss_fn = loss_for(training.data.train.task)
        x, y = training.data.train.x, training.data.train.y
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.int64, device=x.device)
        steps = num_steps(len(idx), sgd)
        widths = self.draw(steps, generator)
        schedule = batch_schedule(len(idx), steps, sgd.batch_size, generator)
        self.drawn = list(widths)
        full_model = training.worker
        # the client's weights in full-model coordinates (entries outside its w_max prefix are never read)
        state, _ = insert(full_model.state_dict(), self.top, module.state_dict())
        state = {k: v.clone() for k, v in state.items()}
        param_names = [k for k, _ in full_model.named_parameters()]
        momentum = {k: torch.zeros_like(state[k]) for k in param_names}
        top: _Nested | None = None
        if self.objective is not None:
            self.objective.begin(dict(module.named_parameters()))
            top = _Nested(full_model, state, self.top, 0.0)
        nested: dict[float, _Nested] = {}
        losses: list[float] = []
        samples = 0
        flops = 0.0
        for step, (w, pos) in enumerate(zip(widths, schedule)):
            net = nested.get(w)
            if net is None:
                sub = width_submodel(full_model, w, scheme="prefix")
                net = nested[w] = _Nested(full_model, state, sub, training.submodel_costs(sub).flops.total)
            small = net.module
            net.load(state)
            small.train()
            b = idx[pos.to(idx.device)]  # positions drawn on the CPU, as in local_sgd
            out = small(x[b])
            loss = loss_fn(out, y[b])
            if self.objective is not None:
                term = self.objective.loss(out, y[b])
                if term is not None:
                    loss = loss + term
            value = float(loss.detach())
            if not math.isfinite(value):
                raise DivergenceError(f"training loss became {value} at step {step} of {steps} (lr={sgd.lr}); "
                                      f"lower the learning rate or set clip_norm")
            names, params = net.names, net.params
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
            buffers = [net.get(momentum, k) if sgd.momentum else None for k in names]  # zero-initialised
            objective = None if top is None else _AtTop(self.objective, top, net, state)  # type: ignore[arg-type]
            sgd_step(params, grads, buffers, sgd, objective=objective, names=names)
            if sgd.momentum:
                for k, buf in zip(names, buffers):
                    net.put(momentum, k, buf)  # type: ignore[arg-type]
            net.store(state)
            flops += net.flops * len(b)
            losses.append(value)
            samples += len(b)
        module.load_state_dict(extract(full_model, state, self.top).state_dict())
        mean = float(np.mean(losses)) if losses else float("nan")
        last = losses[-1] if losses else float("nan")
        return TrainOutcome(stats=TrainStats(steps=len(losses), samples=samples, mean_loss=mean, last_loss=last),
                            flops=flops)


class _AtTop(LocalObjective):
    """A client's objective seen from a nested step: its gradient term is computed on the w_max tensors
    (the current weights, the nested gradient with zeros elsewhere), and the nested entries are kept."""

    def __init__(self, inner: LocalObjective, top: "_Nested", net: "_Nested",
                 state: Mapping[str, torch.Tensor]) -> None:
        self.inner, self.top, self.net, self.state = inner, top, net, state

    def add_gradient(self, name: str, param: torch.Tensor, grad: torch.Tensor) -> None:
        at_top = self.top.get(self.state, name)
        mask = self.net.mask.get(name)
        inside = (torch.ones_like(at_top, dtype=torch.bool) if mask is None
                  else self.top.get({name: mask}, name).view(at_top.shape))
        full = torch.zeros_like(at_top)
        full[inside] = grad.reshape(-1)
        self.inner.add_gradient(name, at_top, full)
        grad.copy_(full[inside].view(grad.shape))


class _Nested:
    """One nested prefix sub-model of a FjORD client, built once per local training: its module and, per
    tensor, the 0/1 mask of its entries in the full model (``insert``'s coverage mask).  Prefix indices are
    sorted, so the masked entries in row-major order are exactly the sliced tensor's entries."""

    def __init__(self, full_model: "BlockModel", state: Mapping[str, torch.Tensor], sub: "SubModel",
                 flops: float) -> None:
        self.module = extract(full_model, state, sub)
        _, mask = insert(state, sub, self.module.state_dict())
        self.mask = {k: m.bool() for k, m in mask.items()}
        self.flops = flops
        self._tensors = self.module.state_dict(keep_vars=True)
        #: the module's parameters and their names, in order
        self.names = [k for k, _ in self.module.named_parameters()]
        self.params = [p for _, p in self.module.named_parameters()]

    def get(self, full: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
        m = self.mask.get(name)
        t = self._tensors[name]
        return full[name].clone() if m is None else full[name][m].view(t.shape)

    def put(self, full: dict[str, torch.Tensor], name: str, value: torch.Tensor) -> None:
        m = self.mask.get(name)
        if m is None:
            full[name] = value.detach().clone()
        else:
            full[name][m] = value.detach().reshape(-1).to(full[name].dtype)

    def load(self, full: Mapping[str, torch.Tensor]) -> None:
        """Write the current values of the full state into the module (parameters and buffers)."""
        with torch.no_grad():
            for name, t in self._tensors.items():
                t.copy_(self.get(full, name))

    def store(self, full: dict[str, torch.Tensor]) -> None:
        """Write the module's values back into the full state."""
        for name, t in self._tensors.items():
            self.put(full, name, t)
