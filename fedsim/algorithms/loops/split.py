"""What every split-federated-learning algorithm shares: the cut model, its costs, timing, the two sides,
and a participation (:class:`SplitSession`); the two loops the family runs on are
:mod:`fedsim.algorithms.loops.split_rounds` and :mod:`fedsim.algorithms.loops.split_slots`.

The global model is kept as two halves: ``wc`` (the aggregated client part) and the server part, which
the server trains step by step.  A model *version* (``VersionKeeper.commit``) is one client-side aggregation
("global iteration"); the evaluated model is ``wc`` composed with the server part as it is then.

Client state is data: a participating client holds its own copy of ``wc`` (and its momentum buffer) only
for the duration of its participation.  The server's optimizer state persists for the run.

``train.systems_only`` runs the same processes with no tensors at all (costs still come from the real model);
``cost_input_shape`` (and ``cost_model``) then let the costs be those of a model built for another input
shape (e.g. the GAS AlexNet, ``cost_model: alexnet_cifar``, on 3×32×32 CIFAR images, while the partition
comes from an offline dataset); no model is trained then, so the cut refers to that cost model.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedsim.algorithms.algorithm import Algorithm
from fedsim.algorithms.configs import SplitConfig
from fedsim.config import require
from fedsim.errors import UserCodeError
from fedsim.learn.losses import label_log_prior
from fedsim.learn.models import build_model
from fedsim.learn.split import SideOptimizer, SplitComputer, SplitCosts, check_cut, merge_state, split_costs, split_state
from fedsim.learn.state import masked_weighted_average
from fedsim.learn.sgd import batch_schedule, num_steps
from fedsim.messages import Contribution, Exchange, ExchangeError, Update, Work
from fedsim.sim.trace import register_record_kind

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.context import Context

__all__ = ["SplitAlgorithm", "SplitSession"]

# The record every split algorithm writes per server-side SGD step (MiniBatch-SFL, S2FL, SemiSFL, GAS): the
# client of each buffered minibatch (the per-client share of the buffer is read from here), the real rows' label
# counts, generated rows, Lemma 1's factor rho = (n_real^2 + n_generated^2) / (n_real + n_generated)^2 (GAS; 1.0
# without generation), and the total-variation distance of the real (and real + generated) label mix from the
# population's (null where not measured).
register_record_kind("server_step", ("step", "version", "n_real", "n_generated", "clients", "label_counts",
                                     "shrink_factor", "tv_real", "tv_union"))


class SplitAlgorithm(Algorithm):
    """Base of the SFL family: set-up of the halves, costs, timing, client sessions and aggregation."""

    name = "sfl-base"
    family = ""  # not a named algorithm: its subclasses name their own streams
    Config = SplitConfig

    @classmethod
    def work(cls, config: Any) -> Work:
        """Split learning: every local step exchanges activations and gradients with the server; a fixed
        ``local_iterations`` sets the steps per task.  Families add their clients per round."""
        return Work(steps_per_task=config.local_iterations, steps_field="local_iterations", exchanges_per_step=True)

    def __init__(self, ctx: "Context", config: Any) -> None:
        super().__init__(ctx, config)
        # the split shapes install the averaged client part, not a rule's aggregate: no server step to apply
        require(self.server_step_of is None, "algorithm.server_opt", "split learning has no server rule for a server "
                "optimiser to step on (the server part trains by SGD itself); remove server_opt")

    def _prepared(self) -> None:
        """After every ``setup`` (``build_algorithm`` calls it): the declared exchange (:meth:`exchange`),
        checked before the simulation starts; the shapes run it."""
        super()._prepared()
        #: the declared exchange, fixed for the run
        self.exchange_plan: Exchange = self._declared_exchange()

    # ---------------------------------------------------------------------------------- the exchange
    def exchange(self) -> Exchange:
        """What each local iteration moves and computes (``fedsim.messages.Exchange``), asked once after
        :meth:`setup` (so it may read ``self.costs`` and ``self.cfg``).  The default is classic split learning:
        every iteration uploads its activations, waits and gets their gradient back."""
        return Exchange()

    def uploads(self, e: int) -> bool:
        """Whether local iteration ``e`` uploads activations under the declared exchange (a ``client_forward``
        returns its upload only on those)."""
        return self.exchange_plan.uploads(e)

    def check_exchange(self, plan: Exchange) -> None:
        """What this shape cannot run of a declared exchange: raise ``ExchangeError`` saying why (the shapes
        override it; a subclass that adds a restriction calls ``super()``).

        Here: with ``gradient=False``, the ``client_backward`` that runs must be written for it: the class that
        defines it must itself declare an exchange without a gradient.  One inherited from a class whose own
        exchange has the gradient (a built-in's, which applies the server's gradient) would run on a gradient
        that never comes."""
        if not plan.gradient:
            owner = next(k for k in type(self).__mro__ if "client_backward" in vars(k))
            try:
                owners_plan = owner.exchange(self)  # the exchange the class that wrote client_backward declares
            except Exception:  # noqa: BLE001 - that class's declaration cannot be read here: judge nothing
                owners_plan = None
            if isinstance(owners_plan, Exchange) and owners_plan.gradient:
                raise ExchangeError(f"Exchange(gradient=False), but client_backward() is {owner.__qualname__}'s, "
                                    "which applies the server's gradient; write a client_backward that trains "
                                    "without one (e.g. on a local loss, see docs/extending/local_loss.py)")

    def _declared_exchange(self) -> Exchange:
        """:meth:`exchange`'s declaration, or one line naming that method and what is wrong (exit 4): a bad
        declaration is refused before anything runs, never run as something else."""
        try:
            plan = self.exchange()
            if not isinstance(plan, Exchange):
                raise ExchangeError(f"exchange() returned {type(plan).__name__}, not a fedsim.messages.Exchange")
            self.check_exchange(plan)
        except ExchangeError as exc:
            raise self.refusal("exchange", exc) from None
        return plan

    def refusal(self, method: str, cause: BaseException) -> UserCodeError:
        """The one-line error (exit 4) for a declaration or a return value of this class's ``method`` that the
        split shapes cannot run as it stands, naming where that method is written."""
        fn = getattr(type(self), method)
        code = getattr(fn, "__code__", None)
        where = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', method)}"
        return UserCodeError(where, f"{code.co_filename}:{code.co_firstlineno}" if code else "?", cause)

    def setup(self) -> None:
        """The halves, their costs and timing, per-client sizes and label counts (``build_algorithm`` calls it
        before the simulation starts, so a bad cut is reported first)."""
        super().setup()
        ctx, cfg = self.ctx, self.cfg
        self.training = not ctx.scenario.train.systems_only
        task = getattr(ctx.data.train, "task", "classification")
        require(task == "classification", "data.name",
                f"split learning here trains classifiers (label priors, cross-entropy); dataset "
                f"'{ctx.data.train.name}' is a {task} task (use fedavg, fedasync, fedbuff or ca2fl)")
        model = ctx.training.worker
        if cfg.cost_input_shape is not None:
            require(not self.training, "algorithm.cost_input_shape",
                    "only allowed with train.systems_only: true (a trained model's costs come from that model)")
            name = cfg.cost_model or ctx.scenario.model.name
            hidden = ctx.scenario.model.hidden if cfg.cost_model is None else None
            probe = build_model(name, tuple(cfg.cost_input_shape), ctx.data.train.num_classes, hidden=hidden,
                                width=ctx.scenario.model.width)
            check_cut(probe, cfg.cut)
            self.costs: SplitCosts = split_costs(probe, tuple(cfg.cost_input_shape), cfg.cut)
            self.computer = None
            self.order = list(ctx.global_state)
            self.wc = {}
        else:
            check_cut(model, cfg.cut)
            self.computer = SplitComputer(model, cfg.cut)
            self.costs = split_costs(model, ctx.training.input_shape, cfg.cut)
        self.timing = ctx.split_timing(cfg.timing, self.costs)
        self.order = list(ctx.global_state)
        sgd = ctx.training.sgd
        if self.computer is not None:
            wc, ws = split_state(ctx.global_state, cfg.cut)
            self.wc = {k: v.clone() for k, v in wc.items()}
            self.server = SideOptimizer(ws, sgd)
        self.server_steps = 0
        y = ctx.data.train.y.cpu().numpy()
        m = ctx.data.train.num_classes
        self.num_classes = m
        self.label_counts = np.stack([np.bincount(y[p], minlength=m) for p in ctx.parts]) if ctx.num_clients else None
        self.sizes = np.array([len(p) for p in ctx.parts], dtype=np.int64)
        self.x_train, self.y_train = ctx.data.train.x, ctx.data.train.y

    # ---------------------------------------------------------------------------------- clients
    def local_iterations(self, client: int) -> int:
        """E: ``local_iterations`` if set, else the scenario's local steps (or epochs) for this client."""
        if self.cfg.local_iterations is not None:
            return int(self.cfg.local_iterations)
        return num_steps(int(self.sizes[client]), self.ctx.training.sgd)

    def schedule(self, client: int, task: int, steps: int, batch: int) -> list[np.ndarray]:
        """Dataset indices of each minibatch of one participation (the client's stream for this task)."""
        gen = self.ctx.streams.torch("client", client, "task", task)
        part = self.ctx.parts[client]
        positions = batch_schedule(len(part), steps, batch, gen)
        if not positions:
            return []
        # one index for the whole participation, then a view per minibatch (not one tensor → numpy
        # conversion and one gather per minibatch)
        flat = part[torch.cat(positions).numpy()]
        ends = list(itertools.accumulate(p.shape[0] for p in positions))
        return [flat[a:b] for a, b in zip([0, *ends[:-1]], ends)]

    def client_optimizer(self, state: dict[str, torch.Tensor]) -> SideOptimizer:
        """A participation's own optimizer: momentum is local to one participation (as in local SGD).

        Choice: GAS's code shares one optimizer object (and its momentum) across all clients; a real
        deployment cannot, since each client trains on its own device.
        """
        return SideOptimizer(state, self.ctx.training.sgd)

    def log_prior(self, client: int) -> torch.Tensor:
        return label_log_prior(torch.as_tensor(self.label_counts[client], dtype=torch.float32,
                                               device=self.x_train.device))

    # ---------------------------------------------------------------------------------- server
    def aggregate_clients(self, states: list[dict[str, torch.Tensor]], clients: list[int]) -> dict[str, torch.Tensor]:
        """GAS eq. (10): the models averaged with |D_k| weights (or uniformly, as GAS's code does)."""
        w = self.client_weights(clients)
        return masked_weighted_average([Update(client=c, tensors=s, weight=wi) for s, c, wi in zip(states, clients, w)],
                                       states[0])

    def full_state(self) -> dict[str, torch.Tensor]:
        return merge_state(self.wc, self.server.params, self.order)

    def client_weights(self, clients: list[int]) -> list[float]:
        """Each client model's weight in the average (eq. 10): |D_k|, or 1 (``aggregate_weights: uniform``)."""
        return [1.0 if self.cfg.aggregate_weights == "uniform" else float(self.sizes[c]) for c in clients]

    def client_shares(self, clients: list[int]) -> list[float]:
        """Each client model's share in the average, as the ``apply`` records report it."""
        w = self.client_weights(clients)
        total = sum(w)
        return [x / total for x in w]

    def install(self, applied: list[Contribution], *, round_: int | None = None,
                round_record: dict[str, Any] | None = None) -> None:
        """Install the aggregated client part with the server part as it is now: the shapes' one call of
        ``VersionKeeper.apply``, which writes the ``apply`` records (staleness from ``VersionKeeper.staleness``), the
        round's record and the ``aggregate`` record."""
        ctx = self.ctx
        state = self.full_state() if self.training else ctx.global_state
        ctx.versions.apply(state, applied, self.client_shares([a.client for a in applied]), round_=round_,
                           round_record=round_record)

    def server_grad_vector(self, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        grads, _ = self.computer.server_grads(self.server, a, y)
        return torch.cat([g.reshape(-1) for g in grads]).to(torch.float64)

    def as_activation(self, rows: torch.Tensor) -> torch.Tensor:
        """Flattened rows (e.g. generated, float64) in the cut layer's shape and the model's dtype."""
        dtype = next(iter(self.server.params.values())).dtype
        return rows.to(dtype).reshape(rows.shape[0], *self.costs.activation_shape)


@dataclass
class SplitSession:
    """One client's participation: its minibatches (dataset indices), its own copy of the client model and
    optimizer (None in systems-only runs), and what it exchanged last with the server (activations up, their
    gradient down).  ``extra`` holds what an algorithm keeps per participation (a label prior, an RNG)."""

    client: int
    task: int
    base_version: int
    download_time: float
    batches: list[np.ndarray]
    opt: SideOptimizer | None = None
    x: torch.Tensor | None = None
    act: torch.Tensor | None = None
    grad: torch.Tensor | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the trace's id of this participation (its ``dispatch`` record's ``task``), carried to its apply
    trace_task: int | None = None


