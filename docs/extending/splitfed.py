"""Sequential SplitFed (SplitFed V2: Thapa, Chamikara, Camtepe and Sun, AAAI 2022), on fedsim's public API.

Each round the sampled clients hold the client part of the model (the first ``cut`` blocks) and the server
the rest.  Every local iteration each client runs its forward pass and uploads the cut layer's activations;
the server then takes the clients **one after another**: for each it computes the gradient it sends back
and takes an SGD step on that client's activations, so the next client meets the server part its
predecessor left.  At the end of the round the clients' models are averaged (the shape's FedAvg of the
client part).  MiniBatch-SFL instead takes one server step on all the clients' activations at once; with
one client per round the two coincide bit for bit, which a test checks (the ``family`` below shares
MiniBatch-SFL's client draws, so both train the same clients).

The shape (``SplitRounds``) owns the rounds, sampling, the exchange in virtual time, the server's queue,
drops, the aggregation and every record; this class writes the client's and the server's computation.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithms import SplitRounds, SplitRoundsConfig, SplitSession
from fedsim.errors import ConfigError


class SequentialSplitFed(SplitRounds):
    name = "sequential-splitfed"
    family = "minibatch-sfl"  # draw the same clients as MiniBatch-SFL (paired comparisons)

    @dataclass
    class Config(SplitRoundsConfig):
        """The split (``cut``, ``local_iterations``, ...) and ``clients_per_round``; nothing of its own."""

    def setup(self) -> None:
        super().setup()  # the cut model, its costs, self.computer, self.server, self.timing, self.wc
        steps = self.cfg.local_iterations or self.ctx.training.sgd.local_steps
        if steps is None:
            raise ConfigError("algorithm.local_iterations", "needs a common number of local iterations: "
                              "set it or train.local_steps")
        self.steps = int(steps)  # local iterations per round, common to the round's clients

    def client_forward(self, s: SplitSession, e: int) -> tuple[int, int]:
        idx = s.batches[e]
        if s.opt is not None:  # None in a systems-only run: sizes and times only
            s.act = self.computer.forward(s.opt.params, self.x_train[idx])
        return len(idx), self.timing.activation_upload_bytes(len(idx))

    def server_step(self, sessions: list[SplitSession], e: int) -> None:
        if not self.training:
            return
        for s in sessions:  # one client after another, each on the server part its predecessor left
            y = self.y_train[s.batches[e]]
            s.grad, _ = self.computer.activation_grad(self.server.params, s.act, y)
            grads, _ = self.computer.server_grads(self.server, s.act, y)
            self.server.step(grads)

    def client_backward(self, s: SplitSession, e: int) -> None:
        if s.opt is not None:
            self.computer.client_step(s.opt, self.x_train[s.batches[e]], s.grad)
