"""Splitting a dataset's training samples among clients (label skew, quantity skew, natural clients).

Every partitioner returns one sorted int64 index array per client.  The arrays are disjoint and, except
for ``natural``, together cover every sample exactly once, so client state is just an index array.  All
randomness comes from the ``rng`` argument (a named stream), so the same seed gives the same partition.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fedsim.errors import ConfigError

__all__ = ["PARTITIONS", "partition", "partition_summary"]

PARTITIONS: tuple[str, ...] = ("iid", "dirichlet", "dirichlet_client", "shards", "quantity", "natural")

#: Dirichlet draws are repeated until every client has ``min_size`` samples; give up after this many.
MAX_DIRICHLET_TRIES = 1000


def _finish(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _class_members(labels: np.ndarray) -> list[np.ndarray]:
    """Each class's sample indices (in index order), classes in sorted order: computed once per partition,
    not once per Dirichlet try (a draw that misses ``min_size`` is retried, often hundreds of times)."""
    if len(labels) == 0:
        return []
    order = np.argsort(labels, kind="stable")
    _, starts = np.unique(labels[order], return_index=True)
    return np.split(order, starts[1:])


def _piece_sizes(cuts: np.ndarray, n: int) -> np.ndarray:
    """Lengths of ``np.split(x, cuts)`` for ``len(x) == n`` and non-decreasing ``cuts`` in [0, n]: a try's
    client sizes without cutting the arrays (only the try that is kept is cut)."""
    return np.diff(cuts, prepend=0, append=n)


def _deal(drawn: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[np.ndarray]:
    """The kept try's pieces: each class's shuffled indices cut at its cuts, piece j to client j."""
    buckets: list[list[np.ndarray]] = [[] for _ in range(k)]
    for idx, cuts in drawn:
        for j, piece in enumerate(np.split(idx, cuts)):
            buckets[j].append(piece)
    return _finish([np.concatenate(b) for b in buckets])


def _iid(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random permutation cut into k nearly equal pieces (sizes differ by at most one)."""
    return _finish(np.array_split(rng.permutation(n), k))


def _dirichlet(labels: np.ndarray, k: int, rng: np.random.Generator, alpha: float, min_size: int,
               balance: bool, size_weights: np.ndarray | None = None) -> list[np.ndarray]:
    """Label skew: for each class c, the share of c's samples going to each client is p_c ~ Dir(alpha * 1_k).

    Class c's samples are shuffled and cut at the cumulative shares (rounded down), the usual construction
    of Hsu et al. (2019).  Small alpha concentrates each class on few clients; large alpha approaches iid.
    The whole draw is repeated until every client holds at least ``min_size`` samples.  With
    ``balance=True`` (as in the GAS and FedLab reference code) a client that already holds >= n/k samples
    gets zero share of the classes drawn after that point, which keeps client sizes closer to equal.
    With ``size_weights`` s, class c's shares are p_c ∝ s ⊙ Dir(alpha · 1_k): client sizes follow s roughly
    (not exactly: the normalisation is not linear; Co-S²P's per-device-class data sizes) while labels stay Dirichlet-skewed.
    """
    n = len(labels)
    members = _class_members(labels)
    for _ in range(MAX_DIRICHLET_TRIES):
        drawn: list[tuple[np.ndarray, np.ndarray]] = []
        sizes = np.zeros(k, dtype=np.int64)
        for of_class in members:
            idx = rng.permutation(of_class)
            p = rng.dirichlet(np.full(k, alpha))
            if size_weights is not None:
                p = p * size_weights
                p = p / p.sum()
            if balance:
                p = p * (sizes < n / k)
                s = p.sum()
                p = p / s if s > 0 else np.full(k, 1.0 / k)
            cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
            sizes += _piece_sizes(cuts, len(idx))
            drawn.append((idx, cuts))
        if sizes.min() >= min_size:
            return _deal(drawn, k)
    raise ConfigError("partition.min_size", f"no Dirichlet(alpha={alpha}) draw in {MAX_DIRICHLET_TRIES} tries gave "
                                            f"every one of {k} clients at least {min_size} samples; raise alpha or "
                                            f"lower min_size")


def _dirichlet_client(labels: np.ndarray, k: int, rng: np.random.Generator, alpha: float,
                      min_size: int) -> list[np.ndarray]:
    """Label skew as the SemiSFL code draws it: one p_i ~ Dir(alpha * 1_M) *per client*.

    The k x M matrix P of the draws is normalised per class column (P[:, c] /= sum_i P[i, c]); class c's
    shuffled samples are cut among the clients at the cumulative shares P[:, c] (rounded down).  Unlike
    :func:`_dirichlet` (one draw per class over the clients), every client has its own class mix.  The
    draw is repeated until every client holds at least ``min_size`` samples.
    """
    members = _class_members(labels)
    for _ in range(MAX_DIRICHLET_TRIES):
        p = rng.dirichlet(np.full(len(members), alpha), size=k)  # (k, M)
        p = p / np.where(p.sum(0, keepdims=True) > 0, p.sum(0, keepdims=True), 1.0)
        drawn: list[tuple[np.ndarray, np.ndarray]] = []
        sizes = np.zeros(k, dtype=np.int64)
        for j, of_class in enumerate(members):
            idx = rng.permutation(of_class)
            cuts = (np.cumsum(p[:, j]) * len(idx)).astype(np.int64)[:-1]
            sizes += _piece_sizes(cuts, len(idx))
            drawn.append((idx, cuts))
        if sizes.min() >= min_size:
            return _deal(drawn, k)
    raise ConfigError("partition.min_size", f"no per-client Dirichlet(alpha={alpha}) draw in {MAX_DIRICHLET_TRIES} "
                                            f"tries gave every one of {k} clients at least {min_size} samples")


def _shards(labels: np.ndarray, k: int, rng: np.random.Generator, per_client: int) -> list[np.ndarray]:
    """Pathological label skew after McMahan et al. (2017): ``k * per_client`` shards, ``per_client`` each.

    Choice: shards are cut *within* classes, so every shard holds one label and a client holds at most
    ``per_client`` distinct labels (McMahan's contiguous cut of the label-sorted data can let a shard
    straddle two classes).  The ``k * per_client`` shards are shared among classes in proportion to class
    size (largest remainder, at least one shard per class); each class's shuffled samples are cut into its
    shards as evenly as possible; the shards are shuffled and dealt ``per_client`` to each client.  Two
    shards of the same class may land on one client (as in GAS's code), so a client can hold fewer labels.
    When there are fewer shards than classes, this falls back to McMahan's contiguous cut of the
    label-sorted order (then a shard may hold two labels).
    """
    n_shards = k * per_client
    classes, counts = np.unique(labels, return_counts=True)
    if n_shards < len(classes) or n_shards > len(labels):
        order = np.lexsort((rng.random(len(labels)), labels))  # label-sorted, shuffled within label
        shards = np.array_split(order, n_shards)
    else:
        quota = counts / counts.sum() * n_shards
        alloc = np.maximum(np.floor(quota).astype(np.int64), 1)
        while alloc.sum() > n_shards:  # the "at least one" floor overshot: take from a class with >= 2 shards
            over = np.where(alloc > 1, alloc - quota, -np.inf)
            alloc[np.argmax(over)] -= 1
        rest = n_shards - int(alloc.sum())
        if rest > 0:
            alloc[np.argsort(-(quota - alloc), kind="stable")[:rest]] += 1
        alloc = np.minimum(alloc, counts)  # never more shards than samples in a class
        deficit = n_shards - int(alloc.sum())
        while deficit > 0:  # only reachable for tiny classes: give spare shards to classes with room
            room = np.flatnonzero(alloc < counts)
            alloc[room[np.argmax(counts[room] / alloc[room])]] += 1
            deficit -= 1
        shards = []
        for c, a in zip(classes, alloc):
            idx = rng.permutation(np.flatnonzero(labels == c))
            shards.extend(np.array_split(idx, int(a)))
    order = rng.permutation(len(shards))
    return _finish([np.concatenate([shards[s] for s in order[i * per_client : (i + 1) * per_client]])
                    for i in range(k)])


def _quantity(n: int, k: int, rng: np.random.Generator, sigma: float, min_size: int) -> list[np.ndarray]:
    """Quantity skew: client sizes proportional to lognormal(0, sigma) weights, labels iid.

    Each client first gets ``min_size`` samples; the remaining ``n - k * min_size`` are shared in
    proportion to the weights (largest remainder), so sizes sum exactly to n.
    """
    if k * min_size > n:
        raise ConfigError("partition.min_size", f"{k} clients x min_size {min_size} exceeds the {n} samples")
    w = rng.lognormal(0.0, sigma, k)
    spare = n - k * min_size
    share = w / w.sum() * spare
    sizes = np.floor(share).astype(np.int64)
    rest = spare - int(sizes.sum())
    sizes[np.argsort(-(share - sizes), kind="stable")[:rest]] += 1
    sizes += min_size
    perm = rng.permutation(n)
    return _finish(np.split(perm, np.cumsum(sizes)[:-1]))


def partition(labels: np.ndarray, num_clients: int, method: str, rng: np.random.Generator, *,
              alpha: float = 0.5, labels_per_client: int = 2, sigma: float = 1.0, min_size: int = 1,
              natural: list[np.ndarray] | None = None, balance: bool = False,
              size_weights: "list[float] | np.ndarray | None" = None) -> list[np.ndarray]:
    """Split sample indices ``0..len(labels)-1`` among ``num_clients`` clients with ``method``.

    Methods: ``iid`` (equal random split), ``dirichlet`` (label skew, concentration ``alpha``, every
    client >= ``min_size``, optional ``balance`` cap), ``dirichlet_client`` (one Dirichlet draw per client,
normalised per class: the SemiSFL code's scheme), ``shards`` (``labels_per_client`` single-label shards
    per client), ``quantity`` (lognormal(0, ``sigma``) sizes, iid labels, every client >= ``min_size``),
    ``natural`` (the dataset's own clients, ``natural``: one client each, so ``num_clients`` must equal their
    number; fewer is refused rather than leaving the others' data silently unused).
    """
    labels = np.asarray(labels)
    n = len(labels)
    if method not in PARTITIONS:
        raise ConfigError("partition.method", f"unknown method '{method}' (allowed: {', '.join(PARTITIONS)})")
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ConfigError("partition.num_clients", f"must be a positive integer, got {num_clients!r}")
    k = int(num_clients)
    if method == "natural":
        if natural is None:
            raise ConfigError("partition.method", "'natural' needs a dataset with natural clients "
                                                  "(synthetic, femnist); this dataset has none")
        if k != len(natural):  # fewer would silently leave whole clients' data unused
            unused = sum(len(p) for p in natural[k:])
            what = (f"only {len(natural)} natural clients" if k > len(natural) else
                    f"{len(natural)} natural clients ({unused} samples of the last {len(natural) - k} would go unused)")
            raise ConfigError("partition.num_clients", f"{k} clients requested but the dataset has {what}; "
                              f"set it to {len(natural)}, one client per natural client (to use fewer, keep only "
                              "those in the dataset: femnist's options.users, your loader's own option)")
        return _finish([np.asarray(p) for p in natural])
    if method != "quantity" and k > n:
        raise ConfigError("partition.num_clients", f"{k} clients for only {n} samples")
    if method == "iid":
        return _iid(n, k, rng)
    if method == "dirichlet":
        if not alpha > 0:
            raise ConfigError("partition.alpha", f"must be > 0, got {alpha!r}")
        sw = None
        if size_weights is not None:
            sw = np.asarray(size_weights, dtype=np.float64).reshape(-1)
            if sw.size != k or not np.all(np.isfinite(sw)) or np.any(sw <= 0):
                raise ConfigError("data.partition.size_weights", f"need {k} positive numbers (one per client), got "
                                                            f"{list(np.asarray(size_weights).reshape(-1))}")
        return _dirichlet(labels, k, rng, float(alpha), int(min_size), balance, sw)
    if method == "dirichlet_client":
        if not alpha > 0:
            raise ConfigError("partition.alpha", f"must be > 0, got {alpha!r}")
        return _dirichlet_client(labels, k, rng, float(alpha), int(min_size))
    if method == "shards":
        if labels_per_client < 1:
            raise ConfigError("partition.labels_per_client", f"must be >= 1, got {labels_per_client!r}")
        return _shards(labels, k, rng, int(labels_per_client))
    if sigma < 0:
        raise ConfigError("partition.sigma", f"must be >= 0, got {sigma!r}")
    return _quantity(n, k, rng, float(sigma), int(min_size))


def partition_summary(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> pd.DataFrame:
    """One row per client: ``client``, ``samples`` and the count of each label ``label_0..label_{C-1}``
    (no label columns when ``num_classes`` is 0, a regression task)."""
    labels = np.asarray(labels)
    rows = np.zeros((len(parts), num_classes), dtype=np.int64)
    for i, p in enumerate(parts):
        if num_classes > 0:
            rows[i] = np.bincount(labels[np.asarray(p, dtype=np.int64)], minlength=num_classes)[:num_classes]
    df = pd.DataFrame(rows, columns=[f"label_{c}" for c in range(num_classes)])
    df.insert(0, "samples", [len(p) for p in parts])
    df.insert(0, "client", np.arange(len(parts)))
    return df
