"""FedAvg on the peers' workload (README.md here) with Apple's pfl (pfl-research) simulator, PyTorch.

Stock pfl pieces: FederatedDataset (make_dataset_fn + user_sampler), PyTorchModel,
FederatedAveraging, SimulatedBackend with the WeightByDatapoints postprocessor,
NNAlgorithmParams / NNTrainHyperParams, a TrainingProcessCallback. One process,
`torch.set_num_threads(1)`, as pure_loop.py. pfl's simulator trains every user on ONE
in-memory model object: it snapshots the weights, runs local SGD in place, takes the
difference, and restores the weights (no copies, no messages, no worker processes).

How the workload maps onto pfl, and what differs (see README.md here):
  * Client sampling: pfl's 'random' user sampler draws each user independently (with
    replacement, from pfl's own seeds). A FederatedDataset takes any `callable() -> user_id`
    as its user sampler, so ScheduledUserSampler replays common.sample_clients(r) for
    r = 1..30, 10 users a round, in that order.
  * Sample order: pfl's Dataset.iter(batch) walks the user's data in stored order, last
    partial batch kept (ceil(n/16) steps). So each user's Dataset is built with its rows
    already in the order numpy default_rng(1000*r + cid).permutation(n) gives: the same
    batches as common.local_train (valid because E = 1 local epoch).
  * Weighting: stock FedAvg averages user updates with weight 1 each; the stock
    WeightByDatapoints postprocessor makes it n_k / sum n_j, as the workload says.
  * Arithmetic: pfl's FedAvg averages model *differences* and applies them through a
    central optimizer (here SGD lr=1.0): w + sum_k n_k (w_k - w) / N, in float32, instead
    of sum_k (n_k / N) w_k. Same maths, different rounding (~1e-7 relative per round);
    the effect on the weights is measured in README.md here.
  * Evaluation: a small callback evaluates the global model after rounds 10, 20, 30 with
    common.accuracy (pfl's CentralEvaluationCallback evaluates before round 1 and after
    0-based iterations 10, 20, i.e. rounds 11, 21, so its schedule does not fit). pfl
    itself also evaluates each user's local model before and after training in every
    iteration where `iteration % evaluation_frequency == 0`, which always includes
    iteration 0; evaluation_frequency = 30 keeps that to round 1 only (20 small forward
    passes). pfl's default per-iteration metrics print to stdout is left on.
  * SGD steps are counted with an optimizer step post-hook (torch public API) on every
    local optimizer pfl creates, i.e. the optimizer steps that actually ran.

Usage: python pfl_sim.py [--threads K]
Multi-worker (pfl's own scaling mode, torch.distributed with gloo on CPU):
    torchrun --standalone --nproc_per_node 2 pfl_sim.py
Each rank trains its share of every round's users and pfl all-reduces the summed updates;
each rank prints its own RESULT line, with its own sgd_steps (the ranks' sum is 402).
"""
import time

T0 = time.perf_counter()  # before the heavy imports, so "startup" includes them

import argparse  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

# PyTorchModel must be imported before any pfl data class is used: it selects the torch ops.
from pfl.model.pytorch import PyTorchModel  # noqa: E402  isort: skip
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.aggregate.weighting import WeightByDatapoints  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.pytorch import PyTorchTensorDataset  # noqa: E402
from pfl.hyperparam import NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics, StringMetricName, Weighted  # noqa: E402
from pfl.version import __version__ as PFL_VERSION  # noqa: E402

import common as c  # noqa: E402

assert c.LOCAL_EPOCHS == 1, "pre-permuting a user's rows equals per-epoch shuffling only for E=1"
T_IMPORTED = time.perf_counter()


class Net(nn.Module):
    """The workload's MLP, built by common.make_model (same seed, same init), plus the
    `loss` and `metrics` methods that pfl's PyTorchModel requires."""

    def __init__(self):
        super().__init__()
        self.mlp = c.make_model()
        self.loss_fn = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.mlp(x)

    def loss(self, x, y):
        return self.loss_fn(self.mlp(x), y)

    @torch.no_grad()
    def metrics(self, x, y):
        logits = self.mlp(x)
        return {
            "loss": Weighted(nn.functional.cross_entropy(logits, y, reduction="sum").item(), len(y)),
            "accuracy": Weighted((logits.argmax(1) == y).sum().item(), len(y)),
        }


class ScheduledUserSampler:
    """pfl user sampler (`callable() -> user_id`) replaying the workload's schedule."""

    def __init__(self):
        self._it = ((r, cid) for r in range(1, c.ROUNDS + 1) for cid in c.sample_clients(r))
        self.round = 0  # round of the user returned last; read by make_user_dataset

    def __call__(self) -> int:
        self.round, cid = next(self._it)
        return cid


class RoundCallback(TrainingProcessCallback):
    """Timestamps rounds and evaluates the global model after rounds 10, 20, 30."""

    def __init__(self, on_round=None):
        self.t = []  # t[0]: start of round 1; t[r]: end of round r
        self.acc = {}
        self.on_round = on_round  # a check of the weights round by round; None in the timed runs

    def on_train_begin(self, *, model):
        self.t.append(time.perf_counter())
        return Metrics()

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        rnd = central_iteration + 1
        metrics = Metrics()
        if rnd % c.EVAL_EVERY == 0:
            self.acc[rnd] = c.accuracy(model.pytorch_model)
            metrics[StringMetricName("Central val | accuracy")] = self.acc[rnd]
            print(f"round {rnd:2d}  test acc {self.acc[rnd]:.4f}", flush=True)
        if self.on_round is not None:
            self.on_round(rnd, model.pytorch_model.mlp)
        self.t.append(time.perf_counter())
        return False, metrics


def run(on_round=None):
    """Build the pfl objects and run 30 central iterations; returns (callback, sgd steps)."""
    c.partition()  # load data + partition up front (counted as startup, as in pure_loop.py)
    sampler = ScheduledUserSampler()

    def make_user_dataset(cid):
        x, y = c.client_data(cid)
        order = torch.from_numpy(np.random.default_rng(1000 * sampler.round + cid).permutation(len(y)))
        return PyTorchTensorDataset((x[order], y[order]), user_id=cid)

    steps = [0]

    def count_step(_opt, _args, _kwargs):
        steps[0] += 1

    def local_sgd(params, lr):
        opt = torch.optim.SGD(params, lr=lr, momentum=0.0)
        opt.register_step_post_hook(count_step)
        return opt

    net = Net()
    model = PyTorchModel(
        model=net,
        local_optimizer_create=local_sgd,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),  # w += weighted mean diff
    )
    train_data = FederatedDataset(make_user_dataset, sampler)
    backend = SimulatedBackend(
        training_data=train_data,
        val_data=None,  # no validation cohort (val_cohort_size=None)
        postprocessors=[WeightByDatapoints()],
    )
    algorithm_params = NNAlgorithmParams(
        central_num_iterations=c.ROUNDS,
        evaluation_frequency=c.ROUNDS,  # local before/after-training eval only in iteration 0
        train_cohort_size=c.CLIENTS_PER_ROUND,
        val_cohort_size=None,
    )
    train_params = NNTrainHyperParams(
        local_num_epochs=c.LOCAL_EPOCHS, local_learning_rate=c.LR, local_batch_size=c.BATCH
    )
    cb = RoundCallback(on_round)
    FederatedAveraging().run(
        algorithm_params=algorithm_params,
        backend=backend,
        model=model,
        model_train_params=train_params,
        model_eval_params=None,
        callbacks=[cb],
    )
    return cb, steps[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(ap.parse_args().threads)
    cb, steps = run()
    per_round = [b - a for a, b in zip(cb.t, cb.t[1:])]
    c.report(
        "pfl_sim",
        pfl_version=PFL_VERSION,
        final_acc=cb.acc[c.ROUNDS],
        acc_by_round=cb.acc,
        sgd_steps=steps,
        startup_s=cb.t[0] - T0,  # imports + data + pfl objects, until round 1 starts
        imports_s=T_IMPORTED - T0,
        rounds_s=cb.t[-1] - cb.t[0],
        round1_s=per_round[0],
        median_round_2on_s=statistics.median(per_round[1:]),
        round_s=[round(t, 4) for t in per_round],
        in_script_s=time.perf_counter() - T0,
        self_peak_rss_mb=c.peak_rss_mb(),
        torch_threads=torch.get_num_threads(),
    )


if __name__ == "__main__":
    main()
