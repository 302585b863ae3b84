"""The peers' benchmark workload (README.md here), shared by the plain loop, fedsim and every peer.

Everything random is derived from fixed seeds, so any process (the main script, a Ray actor, a
fedsim run) that imports this module rebuilds exactly the same data, partition and schedule.

Two sizes, chosen by the environment variable ``FL_WORKLOAD`` (or :func:`use`):

* ``reference`` (default): 100 Dirichlet(0.5) clients, 30 rounds of 10;
* ``scaled``: 1,000 clients, 100 rounds of 50, the same data, model and local training.  1,500 samples
  over 1,000 Dirichlet clients leave some clients empty; each empty client (in increasing id) then takes
  the last sample of the currently largest client (lowest id among ties), so every client holds at least
  one sample.  At the reference size no client is empty and this step does nothing.
"""
from __future__ import annotations

import functools
import json
import os
import resource
import time

import numpy as np
import torch
from torch import nn

#: (clients, rounds, clients per round) of each size
SIZES = {"reference": (100, 30, 10), "scaled": (1000, 100, 50)}
ALPHA, PARTITION_SEED = 0.5, 0
LOCAL_EPOCHS, BATCH, LR = 1, 16, 0.1
N_TRAIN, N_TEST = 1500, 297
EVAL_EVERY = 10
SIZE = "reference"
N_CLIENTS, ROUNDS, CLIENTS_PER_ROUND = SIZES[SIZE]


def use(size: str) -> None:
    """Switch every module-level setting (and the cached partition) to workload size ``size``."""
    global SIZE, N_CLIENTS, ROUNDS, CLIENTS_PER_ROUND
    if size not in SIZES:
        raise ValueError(f"unknown workload size {size!r} (allowed: {', '.join(SIZES)})")
    if size != SIZE:
        SIZE = size
        N_CLIENTS, ROUNDS, CLIENTS_PER_ROUND = SIZES[size]
        partition.cache_clear()


@functools.lru_cache(maxsize=1)
def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits, X/16 as float32; train = first 1500 samples, test = last 297."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)
    assert len(x) == N_TRAIN + N_TEST
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


@functools.lru_cache(maxsize=1)
def partition() -> tuple[np.ndarray, ...]:
    """Dirichlet label skew: per class, shuffle, draw Dir(alpha*1_N), split at cumsum cuts."""
    _, y, _, _ = load_data()
    rng = np.random.default_rng(PARTITION_SEED)
    parts: list[list[np.ndarray]] = [[] for _ in range(N_CLIENTS)]
    for c in range(10):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        p = rng.dirichlet(ALPHA * np.ones(N_CLIENTS))
        cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
        for i, chunk in enumerate(np.split(idx, cuts)):
            parts[i].append(chunk)
    out = [np.concatenate(p) for p in parts]
    for i in range(N_CLIENTS):  # the scaled size only: give every empty client one sample
        if len(out[i]) == 0:
            big = max(range(N_CLIENTS), key=lambda j: (len(out[j]), -j))
            out[i], out[big] = out[big][-1:], out[big][:-1]
    return tuple(out)


def client_data(cid: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y, _, _ = load_data()
    idx = partition()[cid]
    return torch.from_numpy(x[idx]), torch.from_numpy(y[idx])


def sample_clients(rnd: int) -> list[int]:
    """Clients of round rnd (1-based): uniform without replacement, seed = rnd."""
    return np.random.default_rng(rnd).choice(N_CLIENTS, CLIENTS_PER_ROUND, replace=False).tolist()


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def local_train(model: nn.Module, cid: int, rnd: int) -> tuple[int, int]:
    """E epochs of minibatch SGD in place; returns (num samples, SGD steps).

    Batch order: permutation from numpy default_rng(1000 * rnd + cid) per epoch; the last
    partial batch is kept.
    """
    x, y = client_data(cid)
    n, steps = len(y), 0
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(1000 * rnd + cid)
    model.train()
    for _ in range(LOCAL_EPOCHS):
        order = torch.from_numpy(rng.permutation(n))
        for s in range(0, n, BATCH):
            b = order[s : s + BATCH]
            opt.zero_grad()
            loss_fn(model(x[b]), y[b]).backward()
            opt.step()
            steps += 1
    return n, steps


@torch.no_grad()
def accuracy(model: nn.Module) -> float:
    _, _, xt, yt = load_data()
    model.eval()
    return (model(torch.from_numpy(xt)).argmax(1) == torch.from_numpy(yt)).float().mean().item()


def peak_rss_mb() -> float:
    """Peak RSS of this process (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(method: str, **fields) -> None:
    """One machine-readable line that ``benchmarks/peers.py`` collects."""
    print("RESULT " + json.dumps({"method": method, "pid": os.getpid(), "size": SIZE, **fields}), flush=True)


use(os.environ.get("FL_WORKLOAD", "reference"))


