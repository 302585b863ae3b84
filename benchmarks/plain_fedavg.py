"""A plain PyTorch FedAvg loop, the baseline of ``benchmarks/overhead.py``: no simulator, no trace.

It reads a plan (``overhead.py`` writes it from the fedsim run's own scenario: the digits train/test
split, each client's sample indices, the clients of every round, the seed of every client task's batch
order and the initial weights) and does exactly the same SGD steps as fedsim: load digits with
scikit-learn, normalise, and for each round train each selected client from the global model with
``torch.optim.SGD`` on the batches of a ``randperm`` from the task's seed, average the weights by
samples processed, and evaluate on the test split (round 0 included, as fedsim does).  It prints the
final test accuracy, which must equal fedsim's.

    python benchmarks/plain_fedavg.py PLAN.pt
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn


def main(plan_path: str) -> tuple[float, float]:
    """Run the plan; returns (final test accuracy, seconds spent in the rounds after the data is loaded)."""
    torch.set_num_threads(1)
    plan = torch.load(plan_path, weights_only=False)
    d = load_digits()
    x = (d.images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    y = d.target.astype(np.int64)
    tr, te = plan["train"], plan["test"]
    mean, std = x[tr].astype(np.float64).mean(), x[tr].astype(np.float64).std()
    xtr = torch.from_numpy(((x[tr].astype(np.float64) - mean) / std).astype(np.float32))
    xte = torch.from_numpy(((x[te].astype(np.float64) - mean) / std).astype(np.float32))
    ytr, yte = torch.from_numpy(y[tr]), torch.from_numpy(y[te])
    h = plan["hidden"]
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, h), nn.ReLU(), nn.Linear(h, 10))
    model.load_state_dict(dict(zip(model.state_dict(), plan["init"])))
    glob = [p.detach().clone() for p in model.parameters()]
    lr, bs, epochs = plan["lr"], plan["batch_size"], plan["epochs"]

    def evaluate() -> float:
        with torch.no_grad():
            for p, g in zip(model.parameters(), glob):
                p.copy_(g)
            out = model(xte)
            F.cross_entropy(out, yte)
            return int((out.argmax(1) == yte).sum()) / len(yte)

    torch.optim.SGD(model.parameters(), lr=lr)  # its one-off first-use import stays out of the round timing
    t0 = time.perf_counter()
    acc = evaluate()
    for clients, seeds in zip(plan["rounds"], plan["seeds"]):
        total = [torch.zeros_like(g, dtype=torch.float64) for g in glob]
        weight = 0
        for c, seed in zip(clients, seeds):
            idx = torch.as_tensor(plan["parts"][c])
            n = len(idx)
            steps = math.ceil(epochs * math.ceil(n / bs))
            with torch.no_grad():
                for p, g in zip(model.parameters(), glob):
                    p.copy_(g)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            gen = torch.Generator().manual_seed(seed)
            done, samples = 0, 0
            while done < steps:
                perm = torch.randperm(n, generator=gen)
                for i in range(0, n, bs):
                    b = idx[perm[i:i + bs]]
                    opt.zero_grad()
                    loss = F.cross_entropy(model(xtr[b]), ytr[b])
                    loss.backward()
                    opt.step()
                    done, samples = done + 1, samples + len(b)
                    if done == steps:
                        break
            for t, p in zip(total, model.parameters()):
                t.add_(p.detach().double(), alpha=samples)
            weight += samples
        glob = [(t / weight).float() for t in total]
        acc = evaluate()
    return acc, time.perf_counter() - t0


if __name__ == "__main__":
    accuracy, seconds = main(sys.argv[1])
    print(f"final accuracy {accuracy!r} rounds {seconds:.4f} s")
