"""Asynchronous split federated learning with activation and model buffers, and GAS on top of it.

GAS: J. Yang and Y. Liu, "GAS: Generative Activation-Aided Asynchronous Split Federated Learning"
(spec gas.md §2.3–2.7).  ``async-sfl`` is GAS without generated activations (the paper's ablation).

Processes (all SimPy, owned by the loop shape ``loops.split_slots.SplitSlots``; arrival order comes from the devices,
links and the server queue; this module writes only the client and server computations):

* ``concurrency`` (C) client processes.  A client downloads the aggregated client model, then for each of
  its E local iterations: forward pass on its device → upload activations and labels → the server queues
  the request for a worker and, at the end of that service, computes ∂l/∂A with the server model *as it
  is then* (logit-adjusted with the client's label prior, eq. 6–7), folds the activations into the
  per-label Gaussians (eqs. 11–12) and puts them in the activation buffer → gradient download → backward
  pass.  It then uploads its client model into the model buffer; when that upload is acknowledged, an
  idle client drawn uniformly takes its slot with the client model current at that moment.
* The activation buffer is a ``simpy.Store``; a server-step process takes Q_s minibatches from it, draws
  the generated activations (GAS: each label topped up to ``per_label_target`` rows, once every label has
  been seen), queues for a worker for the step's FLOPs and, at the end of that service, takes one SGD step
  on the concatenation with plain cross-entropy.  Minibatches arriving meanwhile wait in the store for the
  next step.
* The model buffer is another ``simpy.Store``; the aggregator takes client models one by one and, at every
  Q_c-th, queues for the aggregation, averages the Q_c models (eq. 10) and installs a new version.  The
  client whose model completed the buffer is acknowledged after the aggregation, so its replacement starts
  from the new model (GAS Algorithm 1); the others are acknowledged at once.

Choices where the paper is silent (the code's choice is named where it differs):

* progress ``n`` of an activation = ``t·E + e + 1`` with t the version the client downloaded and e its
  local iteration (the paper's n = tE + e, shifted so that s(n) > 0); the code uses its own counter;
* the Gaussians are updated once per arriving minibatch with :meth:`LabelGaussians.update_batch`, which
  equals eqs. (11)–(12) row by row when ``gaussian_reg = 0`` (the default; the code adds 1e-5·I per merge);
* generation is drawn when the step is triggered; the step uses the server model at the end of its service;
* the gradient a client receives is computed before any step its own minibatch triggers (as in the code).

Measurements (trace events, their schemas registered below and in ``fedsim.algorithms.loops.split`` with
``fedsim.sim.trace.register_record_kind``): ``activation`` per arriving minibatch,
``server_step`` per server step (the buffer's clients and labels, B̂, Lemma 1's factor ρ, the buffer's
label distance from the population), and with ``measure_every`` a ``dissimilarity`` record: the server
gradient on the buffer with and without the generated rows against the population gradient, at the same
server weights (paired; for ``async-sfl`` the generated rows are a counterfactual draw that is not used).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from fedsim.algorithms.loops.split import SplitSession

from fedsim.algorithms.loops.split_slots import SplitSlots
from fedsim.config import positive
from fedsim.algorithms.gas_parts import LabelGaussians, lemma1_shrink_factor, weight_fn
from fedsim.algorithms.configs import AsyncSFLConfig, GASConfig
from fedsim.sim.trace import register_record_kind


# The records of async SFL and GAS (their schemas beside their writer, in the trace's table once this module is
# imported): a client's minibatch of activations was served, its gradient from server model ``server_step``;
# ``progress`` is n = tE + e + 1, the argument of the time weight s(n) of GAS's Gaussians.
register_record_kind("activation", ("client", "iteration", "samples", "server_step", "progress"))
# GAS Fig. 2a / Lemma 1: ||g_buffer - g_population||^2 of the server gradient at the same weights, on the real
# buffer and on the buffer plus generated rows (``used``: whether the step used them).
register_record_kind("dissimilarity", ("step", "version", "without_generation", "with_generation", "n_real",
                                       "n_generated", "shrink_factor", "used"))

@dataclass
class _Activation:
    client: int
    a: torch.Tensor | None
    y: torch.Tensor | None
    samples: int
    progress: int
    labels: np.ndarray


def _tv(counts: np.ndarray, prior: np.ndarray) -> float:
    tot = counts.sum()
    return float(0.5 * np.abs(counts / tot - prior).sum()) if tot > 0 else 0.0


class AsyncSFL(SplitSlots):
    """Asynchronous SFL on :class:`SplitSlots`: logit-adjusted client gradients, per-label Gaussians of the
    activations (for GAS's generation and the dissimilarity measurement), one SGD step per activation buffer."""

    name = "async-sfl"
    theorems = ()  # GAS without generation: GAS's theorem is written for GAS
    #: client-selection stream shared with GAS, so that a paired comparison dispatches the same clients
    family = "async-sfl"

    Config = AsyncSFLConfig

    # ---------------------------------------------------------------------------------- set-up
    def begin(self) -> None:
        ctx, cfg = self.ctx, self.cfg
        self.target = cfg.per_label_target if cfg.per_label_target is not None else ctx.training.sgd.batch_size
        self.gaussians: LabelGaussians | None = None
        if self.training and (cfg.generate or cfg.measure_every):
            params = {} if cfg.gaussian_weight in ("linear", "constant") else {"a": cfg.gaussian_weight_a,
                                                                              "b": cfg.gaussian_weight_b}
            self.s_of_n = weight_fn(cfg.gaussian_weight, **params)
            self.gaussians = LabelGaussians(self.num_classes, self.costs.activation_dim,
                                            covariance=cfg.gaussian_covariance, reg=cfg.gaussian_reg,
                                            device=ctx.device)
        self.population = self._population() if self.training and cfg.measure_every else None
        self.prior = self.label_counts.sum(0) / self.label_counts.sum()
        self.activation_counts = np.zeros(ctx.num_clients, dtype=np.int64)
        self.labels_seen = np.zeros(self.num_classes, dtype=bool)
        self._all_seen = False  # every label seen: labels_seen needs no more updates
        self._y_np = self.y_train.cpu().numpy()  # labels of a minibatch, read once per local iteration
        #: the measurements written per minibatch and per server step (stamped with the virtual time by the framework)
        self._record_activation = ctx.measurement("activation", ("client", "iteration", "samples", "server_step",
                                                                 "progress"))
        self._record_step = ctx.measurement("server_step", ("step", "version", "n_real", "n_generated", "clients",
                                                            "label_counts", "shrink_factor", "tv_real", "tv_union"))

    def _population(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed sample of the whole training set (the population of eq. 2) for dissimilarity checks."""
        n = len(self.y_train)
        k = min(self.cfg.measure_samples, n)
        idx = np.sort(self.ctx.streams.numpy("sfl", "measure", "population").choice(n, size=k, replace=False))
        return self.x_train[idx], self.y_train[idx]

    # ---------------------------------------------------------------------------------- client
    def open_session(self, s: SplitSession) -> None:
        s.extra["prior"] = self.log_prior(s.client) if (self.training and self.cfg.logit_adjust) else None
        s.extra["steps"] = len(s.batches)

    def client_forward(self, s: SplitSession, e: int) -> _Activation:
        idx = s.batches[e]
        if self.training:
            s.x, y = self.x_train[idx], self.y_train[idx]
        else:
            y = None
        a = self.computer.forward(s.opt.params, s.x) if s.opt is not None else None
        return _Activation(s.client, a, y, len(idx), s.base_version * s.extra["steps"] + e + 1, self._y_np[idx])

    def client_backward(self, s: SplitSession, e: int) -> None:
        if s.opt is not None:
            self.computer.client_step(s.opt, s.x, s.grad)

    # ---------------------------------------------------------------------------------- server
    def server_gradient(self, s: SplitSession, msg: _Activation, e: int) -> torch.Tensor | None:
        """∂l/∂A with the server model as it is now (logit-adjusted), the Gaussians, the ``activation`` record."""
        grad = None
        if self.training:
            grad, _ = self.computer.activation_grad(self.server.params, msg.a, msg.y, s.extra["prior"])
            if self.gaussians is not None:
                self.gaussians.update_batch(msg.a, msg.y, float(self.s_of_n(float(msg.progress))))
        self.activation_counts[msg.client] += 1
        if not self._all_seen:
            self.labels_seen[msg.labels] = True
            self._all_seen = bool(self.labels_seen.all())
        self._record_activation(msg.client, e, msg.samples, self.server_steps, msg.progress)
        return grad

    def plan_server_step(self, msgs: list[_Activation]) -> tuple[int, tuple]:
        """The buffer's labels and, for GAS (or a counterfactual measurement), the generated activations."""
        ctx, cfg = self.ctx, self.cfg
        labels = np.concatenate([m.labels for m in msgs])
        counts = np.bincount(labels, minlength=self.num_classes)
        step = self.server_steps + 1
        gen = None
        if self.gaussians is not None:
            stream = ("gas", "generate", step) if cfg.generate else ("gas", "counterfactual", step)
            gen = self.gaussians.generate_for_buffer(torch.as_tensor(labels, device=ctx.device), self.target,
                                                     ctx.streams.torch(*stream))
        n_real = int(labels.size)
        if gen is not None:
            n_gen = gen.n_generated if cfg.generate else 0
        elif cfg.generate and self._all_seen:  # systems-only: the top-up count needs no tensors
            n_gen = int(np.maximum(self.target - counts, 0).sum())
        else:
            n_gen = 0
        return n_real + n_gen, (step, counts, gen, n_real, n_gen)

    def server_step(self, msgs: list[_Activation], plan: tuple) -> None:
        ctx, cfg = self.ctx, self.cfg
        step, counts, gen, n_real, n_gen = plan
        if self.training:
            a_real = torch.cat([m.a for m in msgs])
            y_real = torch.cat([m.y for m in msgs])
            a_gen = self.as_activation(gen.activations) if gen is not None and gen.n_generated else None
            if cfg.measure_every and step % cfg.measure_every == 0:
                self._measure(step, a_real, y_real, a_gen, gen.labels if a_gen is not None else None)
            if n_gen:
                a_cat, y_cat = torch.cat([a_real, a_gen]), torch.cat([y_real, gen.labels])
            else:
                a_cat, y_cat = a_real, y_real
            grads, _ = self.computer.server_grads(self.server, a_cat, y_cat)
            self.server.step(grads)
        self.server_steps = step
        union = counts + np.maximum(self.target - counts, 0) * (n_gen > 0)
        self._record_step(step, ctx.version, n_real, n_gen, [m.client for m in msgs], counts.tolist(),
                          lemma1_shrink_factor(n_real, n_gen), _tv(counts, self.prior), _tv(union, self.prior))

    def _measure(self, step: int, a_real: torch.Tensor, y_real: torch.Tensor, a_gen: torch.Tensor | None,
                 y_gen: torch.Tensor | None) -> None:
        """GAS Fig. 2a / Lemma 1: ‖g_buffer − g_population‖² with and without the generated rows."""
        ctx = self.ctx
        x_pop, y_pop = self.population
        g_pop = self.server_grad_vector(self.computer.forward(self.wc, x_pop), y_pop)
        g_real = self.server_grad_vector(a_real, y_real)
        d_without = float((g_real - g_pop).pow(2).sum())
        n_gen = 0 if a_gen is None else int(a_gen.shape[0])
        if n_gen:
            g_mix = self.server_grad_vector(torch.cat([a_real, a_gen]), torch.cat([y_real, y_gen]))
            d_with = float((g_mix - g_pop).pow(2).sum())
        else:
            d_with = d_without
        ctx.measure("dissimilarity", step=step, version=ctx.version, without_generation=d_without,
                    with_generation=d_with, n_real=int(a_real.shape[0]), n_generated=n_gen,
                    shrink_factor=lemma1_shrink_factor(int(a_real.shape[0]), n_gen), used=bool(self.cfg.generate))


class GAS(AsyncSFL):
    """GAS: asynchronous SFL whose server steps add generated activations for under-represented labels."""

    name = "gas"
    theorems = ("gas",)  # GAS Lemma 1 / Theorem 1

    Config = GASConfig
