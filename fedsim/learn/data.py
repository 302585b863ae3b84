"""Datasets as in-memory tensors, plus loaders for the standard on-disk formats.

Every dataset becomes two :class:`ArrayDataset` objects (train and test) holding float32 inputs and int64
labels (float32 targets for the one regression dataset, ``quadratic``), so a client's local data is just
an index array into the train tensors: client state stays data, not data loaders.  Image datasets are
scaled to [0, 1] and then normalised with the per-channel mean and standard deviation of the *train*
split (the test split uses the same statistics, so no test information leaks into training).

Nothing is downloaded.  ``digits``, ``digits32``, ``mnist1d``, ``synthetic`` and ``quadratic`` are generated in memory
(MNIST-1D, seconds to generate, is cached on disk by its options: :func:`cache_dir`);
the other datasets are read from files the user already has under ``root``.  Every random choice
(train/test split, subsampling, synthetic generation) comes from the ``rng`` passed in, which the caller
takes from a named stream; when ``rng`` is omitted a generator seeded with 0 is used so that a call is
still reproducible.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import pickle
import random
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

import fedsim.components as components
from fedsim.errors import ConfigError
from fedsim.inputfiles import LIMIT_DATASET, check_input_file, size_text

if TYPE_CHECKING:  # pragma: no cover
    from fedsim.learn.quadratic import QuadraticProblem

__all__ = ["ArrayDataset", "FederatedData", "DATASETS", "TASKS", "load_dataset", "normalise_channels",
           "quadratic_problem"]


#: What an :class:`ArrayDataset`'s targets are; ``fedsim.learn.sgd.loss_for`` maps each to its loss.
TASKS: tuple[str, ...] = ("classification", "regression")


@dataclass
class ArrayDataset:
    """A labelled dataset held as two tensors (inputs already normalised).

    ``task="classification"`` (the default): int64 class labels in 0..num_classes-1.
    ``task="regression"``: float32 targets of shape (N,) for a one-output model; ``num_classes`` is 0
    (there are no classes: label histograms, label-skew partitions and accuracy do not apply).
    """

    x: torch.Tensor  # float32, shape (N, *input_shape)
    y: torch.Tensor  # int64 (classification) or float32 (regression), shape (N,)
    num_classes: int
    name: str
    task: str = "classification"

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError("data.task", f"unknown task '{self.task}' (allowed: {', '.join(TASKS)})")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.x.shape[1:])

    @property
    def num_outputs(self) -> int:
        """Width of a model's output layer: one logit per class, or a single value for regression."""
        return 1 if self.task == "regression" else int(self.num_classes)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def subset(self, indices: np.ndarray | torch.Tensor) -> "ArrayDataset":
        """The samples at ``indices`` (a copy), e.g. one client's local data for evaluation."""
        idx = torch.as_tensor(np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices),
                              dtype=torch.int64, device=self.x.device)
        return ArrayDataset(self.x[idx], self.y[idx], self.num_classes, self.name, self.task)

    def label_counts(self) -> np.ndarray:
        """How many samples of each class (length ``num_classes``)."""
        if self.task != "classification":
            raise ConfigError("data.name", f"dataset '{self.name}' is a {self.task} task: it has no class labels to count")
        return np.bincount(self.y.cpu().numpy(), minlength=self.num_classes)


@dataclass
class FederatedData:
    """Train and test splits, plus the per-client train indices for naturally federated datasets."""

    train: ArrayDataset
    test: ArrayDataset
    natural_partition: list[np.ndarray] | None = None


# ----------------------------------------------------------------------------------------------------------
# helpers


def normalise_channels(train: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """Normalise arrays of shape (N, C, ...) with the per-channel mean/std of ``train``.

    Statistics are computed in float64 for accuracy; results are float32.  A channel with zero spread
    (a constant channel) is only centred, to avoid dividing by zero.
    """
    axes = tuple(i for i in range(train.ndim) if i != 1)
    t64 = train.astype(np.float64, copy=False)
    mean = t64.mean(axis=axes, keepdims=True)
    std = t64.std(axis=axes, keepdims=True)
    std = np.where(std > 0, std, 1.0)
    out = [((a.astype(np.float64, copy=False) - mean) / std).astype(np.float32) for a in (train, *others)]
    return tuple(out)


def _to_dataset(x: np.ndarray, y: np.ndarray, num_classes: int, name: str) -> ArrayDataset:
    return ArrayDataset(
        torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
        int(num_classes),
        name,
    )


def _image_data(name: str, num_classes: int, xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray,
                yte: np.ndarray, rng: np.random.Generator, opts: dict) -> FederatedData:
    """Subsample (if asked), scale uint8 images to [0, 1] and normalise them per channel.

    ``xtr``/``xte`` are (N, C, H, W) arrays, either uint8 (0..255) or float already in [0, 1].
    """
    xtr, ytr = _maybe_subsample(xtr, ytr, opts.get("train_size"), rng, "train_size")
    xte, yte = _maybe_subsample(xte, yte, opts.get("test_size"), rng, "test_size")
    scale = 255.0 if xtr.dtype == np.uint8 else 1.0
    xtr_f = xtr.astype(np.float32) / np.float32(scale)
    xte_f = xte.astype(np.float32) / np.float32(scale)
    xtr_n, xte_n = normalise_channels(xtr_f, xte_f)
    return FederatedData(_to_dataset(xtr_n, ytr, num_classes, name), _to_dataset(xte_n, yte, num_classes, name))


def _maybe_subsample(x: np.ndarray, y: np.ndarray, size: Any, rng: np.random.Generator,
                     field: str) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random subset of ``size`` samples (kept in file order), or everything."""
    if size is None:
        return x, y
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise ConfigError(f"data.options.{field}", f"must be a positive integer, got {size!r}")
    if size >= len(y):
        return x, y
    keep = np.sort(rng.choice(len(y), size=int(size), replace=False))
    return x[keep], y[keep]


def _check_options(name: str, options: dict | None, allowed: tuple[str, ...]) -> dict:
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise ConfigError(
            "data.options",
            f"unknown option '{unknown[0]}' for dataset '{name}' (allowed: {', '.join(allowed) or 'none'})",
        )
    return opts


def _need_root(name: str, root: str | os.PathLike | None, what: str) -> Path:
    if root is None:
        raise ConfigError("data.root", f"dataset '{name}' is read from local files: set data.root to the folder "
                                       f"holding {what}")
    return Path(root).expanduser()


def _find_dir(root: Path, subdirs: tuple[str, ...], present: Callable[[Path], list[str]]) -> tuple[Path, list[str]]:
    """The first of ``root/subdir`` where ``present`` reports nothing missing; else the missing list for root."""
    first_missing: list[str] | None = None
    for sub in subdirs:
        d = root / sub if sub else root
        missing = present(d)
        if not missing:
            return d, []
        if first_missing is None:
            first_missing = missing
    return root, first_missing or []


# ----------------------------------------------------------------------------------------------------------
# generated datasets


_DIGITS_OPTS = ("test_fraction",)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as ``load_digits()`` gives them: ``images`` (1797, 8, 8) float64, pixel values
    0..16, and ``target`` (1797,) of int, read from the CSV file shipped inside scikit-learn's package.

    Why not ``load_digits``: importing ``sklearn.datasets`` imports scikit-learn and scipy (about a second of
    a fresh process that needs neither).  The package is located without executing its ``__init__``, and the
    file is parsed as ``load_digits`` parses it (``np.loadtxt`` of the gunzipped text), so the arrays are
    identical.  The file is parsed once per process (about 60 ms, most of a small run's data preparation)
    and every call gets its own copies of the parsed arrays."""
    images, target = _parse_digits()
    return images.copy(), target.copy()


@functools.lru_cache(maxsize=1)
def _parse_digits() -> tuple[np.ndarray, np.ndarray]:
    """The arrays of :func:`digits_arrays`, parsed from scikit-learn's CSV file."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("data.name", "digits needs scikit-learn installed (its package ships the images)")
    for base in spec.submodule_search_locations:
        path = Path(base) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, mode="rt", encoding="utf-8") as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)
    raise ConfigError("data.name", "digits: scikit-learn's package has no datasets/data/digits.csv.gz")


def _load_digits(rng: np.random.Generator, opts: dict, *, upscale: bool = False) -> FederatedData:
    """sklearn's 8x8 handwritten digits (1797 images, pixel values 0..16), split at random 80/20.

    ``upscale`` gives ``digits32``, an offline stand-in for 32x32 colour images (CIFAR-shaped: 3x32x32,
    10 classes), so conv nets and ViTs run without downloads: the same images, upscaled to 32x32 by
    bilinear interpolation (``torch.nn.functional.interpolate``, ``align_corners=False``: deterministic)
    and repeated on 3 identical channels, before the same split (for the same ``rng``) and normalisation.
    """
    frac = _option(opts, "test_fraction", 0.2, float, gt=0, lt=1)
    images, target = digits_arrays()
    x = (images.astype(np.float32) / np.float32(16.0))[:, None, :, :]
    name = "digits"
    if upscale:
        big = torch.nn.functional.interpolate(torch.from_numpy(x), size=(32, 32), mode="bilinear", align_corners=False)
        x, name = big.repeat(1, 3, 1, 1).numpy(), "digits32"
    y = target.astype(np.int64)
    perm = rng.permutation(len(y))
    n_test = int(round(frac * len(y)))
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    xtr, xte = normalise_channels(x[tr], x[te])
    return FederatedData(_to_dataset(xtr, y[tr], 10, name), _to_dataset(xte, y[te], 10, name))


def _mnist1d_defaults() -> dict[str, Any]:
    """The ``mnist1d`` generator's default arguments (``get_dataset_args``), without its ``url``.

    Importing ``mnist1d.data`` pulls in scipy, requests and matplotlib's pyplot (about 40 MB and half a
    second) although a run whose dataset is cached needs none of them.  So the defaults are remembered in
    the cache folder, one small JSON file per installed ``mnist1d`` version, written the first time the
    package is imported; with the cache off, or the file unreadable, they come from the package itself."""
    from importlib import metadata

    folder = cache_dir()
    path = None if folder is None else folder / f"mnist1d-defaults-{metadata.version('mnist1d')}.json"
    if path is not None and path.is_file():
        try:
            known = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(known, dict) and known:
                return known
        except (OSError, ValueError):
            pass
    from mnist1d.data import get_dataset_args

    args = {k: v for k, v in get_dataset_args(as_dict=True).items() if k != "url"}
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(args), encoding="utf-8")
            os.replace(tmp, path)  # atomic: a concurrent run reads no file or a whole one
    return args


def _mnist1d_opts() -> tuple[str, ...]:
    return tuple(_mnist1d_defaults())


def cache_dir() -> Path | None:
    """Where generated datasets are cached: ``$FEDSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/fedsim``, else
    ``~/.cache/fedsim``; ``FEDSIM_CACHE_DIR=off`` (or empty) turns the cache off."""
    given = os.environ.get("FEDSIM_CACHE_DIR")
    if given is not None:
        return None if given.strip().lower() in ("", "off", "0", "none", "false") else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fedsim"


def _generated(name: str, key: dict[str, Any], make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays ``make()`` returns, read from the cache when an earlier call with the same ``key`` (the
    generator, its options and the versions of the packages it runs on) stored them.

    Why: generating MNIST-1D's 25,000 samples takes seconds (interpolation per sample), and a
    systems-only run needs only its labels for the partition.  The cached arrays are the generator's
    output itself, so what follows (normalisation, the partition, the trace) is the same whether they
    came from the cache or not.  A file that cannot be read is regenerated; one that cannot be written
    is skipped."""
    folder = cache_dir()
    if folder is None:
        return make()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    path = folder / f"{name}-{digest}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            pass
    arrays = make()
    tmp: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-", suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)  # atomic: a concurrent run reads no file or a whole one
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return arrays


def _load_mnist1d(rng: np.random.Generator, opts: dict) -> FederatedData:
    """MNIST-1D generated in memory by the ``mnist1d`` package (never downloaded), cached by its options
    (:func:`_generated`).

    The package's generator seeds Python's and numpy's *global* RNGs with its own ``seed`` argument
    (default 42, which reproduces the published dataset).  We keep that seed as the default so results are
    comparable with the literature, and restore the global RNG states afterwards so that generating the
    dataset has no side effects.  ``rng`` is not used.  Shape (1, 40).
    """
    from importlib import metadata

    args = _mnist1d_defaults()
    args.update(opts)

    def make() -> dict[str, np.ndarray]:
        from mnist1d.data import make_dataset
        from mnist1d.utils import ObjectView

        np_state, py_state = np.random.get_state(), random.getstate()
        try:
            d = make_dataset(ObjectView(args))
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
        return {"x": np.asarray(d["x"], dtype=np.float32), "y": np.asarray(d["y"]),
                "x_test": np.asarray(d["x_test"], dtype=np.float32), "y_test": np.asarray(d["y_test"])}

    key = {"args": args, "mnist1d": metadata.version("mnist1d"), "numpy": np.__version__,
           "scipy": metadata.version("scipy")}
    d = _generated("mnist1d", key, make)
    xtr, xte = normalise_channels(d["x"][:, None, :], d["x_test"][:, None, :])
    return FederatedData(_to_dataset(xtr, d["y"], 10, "mnist1d"), _to_dataset(xte, d["y_test"], 10, "mnist1d"))


_SYNTH_OPTS = ("alpha", "beta", "num_clients", "samples", "iid", "test_fraction", "dimension", "num_classes",
               "size_mean", "size_sigma", "min_samples")


def _load_synthetic(rng: np.random.Generator, num_clients: int | None, opts: dict) -> FederatedData:
    """FedProx Synthetic(alpha, beta) (Li et al., 2020, "Federated Optimization in Heterogeneous Networks").

    For client k: u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k ~ N(u_k, 1) (shape dimension x classes) and
    b_k ~ N(u_k, 1); v_k ~ N(B_k, 1) elementwise; x ~ N(v_k, Sigma) with Sigma diagonal,
    Sigma_jj = j^-1.2 (j = 1..dimension); y = argmax softmax(W_k^T x + b_k).  As in the authors' reference
    generator, alpha and beta are used as standard deviations, and client k holds
    ``int(lognormal(size_mean=4, size_sigma=2)) + min_samples(=50)`` samples (a heavy-tailed size
    distribution).  With ``samples`` set, those sizes are rescaled (largest remainder, at least 2 each) so
    that they sum to ``samples`` -- the shape of the size distribution is kept, the total is bounded.
    ``iid=True`` gives the paper's Synthetic-IID: one shared W, b ~ N(0, 1) and v = 0 for every client.

    Each client's samples are shuffled and ``test_fraction`` (default 20%) of them, at least one when the
    client has two or more, go to the common test set; the rest form the client's natural partition.
    Inputs are not normalised (the paper uses them raw).  Input shape is (dimension,).
    """
    opt_clients = opts.get("num_clients")
    if num_clients is not None and opt_clients is not None and int(opt_clients) != int(num_clients):
        raise ConfigError("data.options.num_clients",
                          f"{opt_clients!r} disagrees with the scenario's number of clients {num_clients!r}")
    k = int(num_clients if num_clients is not None else (opt_clients if opt_clients is not None else 30))
    if k < 1:
        raise ConfigError("data.options.num_clients", f"must be at least 1, got {k}")
    alpha = _option(opts, "alpha", 1.0, float, ge=0, le=1e3)
    beta = _option(opts, "beta", 1.0, float, ge=0, le=1e3)
    dim = _option(opts, "dimension", 60, int, ge=1, le=10**5)
    ncls = _option(opts, "num_classes", 10, int, ge=2, le=10**4)
    frac = _option(opts, "test_fraction", 0.2, float, ge=0, lt=1)
    iid = _option(opts, "iid", False, bool)

    sizes = rng.lognormal(_option(opts, "size_mean", 4.0, float, ge=0, le=20),
                          _option(opts, "size_sigma", 2.0, float, ge=0, le=10), k).astype(np.int64)
    sizes = sizes + _option(opts, "min_samples", 50, int, ge=0, le=10**7)
    total = opts.get("samples")
    if total is not None:
        total = _option(opts, "samples", None, int, ge=1, le=10**9)
        if total < 2 * k:
            raise ConfigError("data.options.samples", f"{total} is too few for {k} clients (need at least {2 * k})")
        sizes = _rescale_sizes(sizes, total, minimum=2)
    if float(sizes.sum()) * dim > MAX_GENERATED_VALUES:  # checked before anything is drawn
        raise ConfigError("data.options.samples", f"{float(sizes.sum()):.4g} samples of dimension {dim} would be "
                          f"{float(sizes.sum()) * dim:.3g} values (allowed: at most {MAX_GENERATED_VALUES:.0e}; "
                          "set data.options.samples lower, or size_mean / min_samples)")

    sigma_diag = np.arange(1, dim + 1, dtype=np.float64) ** -1.2
    if iid:
        w_shared = rng.normal(0.0, 1.0, (dim, ncls))
        b_shared = rng.normal(0.0, 1.0, ncls)
    else:
        u = rng.normal(0.0, alpha, k)
        bk = rng.normal(0.0, beta, k)
    xs_tr, ys_tr, xs_te, ys_te, parts = [], [], [], [], []
    offset = 0
    for c in range(k):
        if iid:
            w, b, v = w_shared, b_shared, np.zeros(dim)
        else:
            v = rng.normal(bk[c], 1.0, dim)
            w = rng.normal(u[c], 1.0, (dim, ncls))
            b = rng.normal(u[c], 1.0, ncls)
        n = int(sizes[c])
        x = v + rng.standard_normal((n, dim)) * np.sqrt(sigma_diag)
        y = np.argmax(x @ w + b, axis=1)  # argmax of softmax == argmax of logits
        n_test = int(np.floor(frac * n))
        if frac > 0 and n >= 2:
            n_test = max(n_test, 1)
        perm = rng.permutation(n)
        te, tr = perm[:n_test], perm[n_test:]
        xs_tr.append(x[tr]); ys_tr.append(y[tr]); xs_te.append(x[te]); ys_te.append(y[te])
        parts.append(np.arange(offset, offset + len(tr), dtype=np.int64))
        offset += len(tr)
    train = _to_dataset(np.concatenate(xs_tr), np.concatenate(ys_tr), ncls, "synthetic")
    test = _to_dataset(np.concatenate(xs_te).reshape(-1, dim), np.concatenate(ys_te), ncls, "synthetic")
    return FederatedData(train, test, parts)


#: Most numbers a generated dataset may hold (10^8 float64 values: 800 MB).
MAX_GENERATED_VALUES = 1e8


def _option(opts: Any, key: str, default: Any, tp: type, **domain: float) -> Any:
    """One dataset option, checked as a scenario field is (type, then numeric domain), named
    ``data.options.<key>``: a string where a number belongs, or 0 classes, is one clear line."""
    from fedsim.config import Domain, check_domain, coerce

    field = f"data.options.{key}"
    value = coerce(opts.get(key, default), tp, field)
    check_domain(value, Domain(**domain) if domain else None, field)
    return value


def _rescale_sizes(sizes: np.ndarray, total: int, minimum: int) -> np.ndarray:
    """Integer sizes proportional to ``sizes``, each >= ``minimum``, summing exactly to ``total``."""
    k = len(sizes)
    spare = total - minimum * k
    share = sizes / sizes.sum() * spare
    base = np.floor(share).astype(np.int64)
    rest = spare - int(base.sum())
    order = np.argsort(-(share - base), kind="stable")
    base[order[:rest]] += 1
    return base + minimum


_QUAD_COMMON = ("builder", "num_clients", "dim", "L", "mu", "samples", "test_samples", "noise")
_QUAD_BUILDERS = {"heterogeneous": ("hessian_spread", "center_spread"), "make": ("G2", "B")}
_QUAD_OPTS = _QUAD_COMMON + tuple(k for v in _QUAD_BUILDERS.values() for k in v)


def _quad_clients(num_clients: int | None, opts: dict) -> int:
    opt_clients = opts.get("num_clients")
    if num_clients is not None and opt_clients is not None and int(opt_clients) != int(num_clients):
        raise ConfigError("data.options.num_clients",
                          f"{opt_clients!r} disagrees with the scenario's number of clients {num_clients!r}")
    k = int(num_clients if num_clients is not None else (opt_clients if opt_clients is not None else 8))
    if k < 1:
        raise ConfigError("data.options.num_clients", f"must be at least 1, got {k}")
    return k


def quadratic_problem(rng: np.random.Generator, num_clients: int | None = None,
                      options: dict | None = None) -> "QuadraticProblem":
    """The :class:`~fedsim.learn.quadratic.QuadraticProblem` behind the ``quadratic`` dataset.

    ``builder`` picks the construction: ``heterogeneous`` (default; options ``hessian_spread`` = 0.5,
    ``center_spread`` = 1.0: client optima spread out and Hessians differ, so FedAvg drifts in proportion
    to ``center_spread``) or ``make`` (options ``G2`` = 1.0, ``B`` = 1.0: (G, B) dissimilarity exact by
    construction).  Common options: ``dim`` (10), ``L`` (1.0), ``mu`` (0.1).  It is the first thing
    :func:`load_dataset` draws from ``rng``, so the same generator state rebuilds the problem of a run
    (analysis compares a run with the problem's exact constants this way).
    """
    from fedsim.learn.quadratic import QuadraticProblem

    opts = _check_options("quadratic", options, _QUAD_OPTS)
    builder = str(opts.get("builder", "heterogeneous"))
    if builder not in _QUAD_BUILDERS:
        raise ConfigError("data.options.builder", f"unknown builder '{builder}' (allowed: {', '.join(_QUAD_BUILDERS)})")
    other = sorted(k for b, keys in _QUAD_BUILDERS.items() if b != builder for k in keys if k in opts)
    if other:
        raise ConfigError(f"data.options.{other[0]}", f"is an option of another builder, not of '{builder}' "
                                                      f"(allowed: {', '.join(_QUAD_BUILDERS[builder])})")
    k = _quad_clients(num_clients, opts)
    common = dict(dim=int(opts.get("dim", 10)), L=float(opts.get("L", 1.0)), mu=float(opts.get("mu", 0.1)), rng=rng)
    if builder == "heterogeneous":
        return QuadraticProblem.heterogeneous(k, hessian_spread=float(opts.get("hessian_spread", 0.5)),
                                              center_spread=float(opts.get("center_spread", 1.0)), **common)
    return QuadraticProblem.make(k, G2=float(opts.get("G2", 1.0)), B=float(opts.get("B", 1.0)), **common)


def _load_quadratic(rng: np.random.Generator, num_clients: int | None, opts: dict) -> FederatedData:
    """A federated least-squares regression whose client losses are the quadratics f_i of
    :func:`quadratic_problem`, so the theory constants of a run are known exactly.

    Client i holds ``samples`` (default 32, at least ``dim``) rows of
    :meth:`~fedsim.learn.quadratic.QuadraticProblem.torch_data`: with a bias-free one-output linear model
    (model ``linear``) and the regression loss ½·mean (x·w − y)², its empirical loss is exactly f_i(w)
    (+ noise²/2 with ``noise`` > 0, which leaves the gradients exact and only makes minibatches noisier).
    The only departure is float32 storage of x and y (relative error ~1e-7).  The natural partition gives
    client i its own rows.  The test split is a fresh draw of ``test_samples`` (default ``samples``, at
    least ``dim``) rows per client, so the test loss is the global objective f = (1/m) Σ f_i as well.
    Inputs are not normalised (that would change the problem).
    """
    prob = quadratic_problem(rng, num_clients, opts)
    n = int(opts.get("samples", 32))
    n_test = int(opts.get("test_samples", n))
    noise = float(opts.get("noise", 0.0))
    for key, v in (("samples", n), ("test_samples", n_test)):
        if v < prob.dim:
            raise ConfigError(f"data.options.{key}", f"must be at least dim={prob.dim} per client, got {v}")
    if not noise >= 0:
        raise ConfigError("data.options.noise", f"must be >= 0, got {noise!r}")
    train = [prob.torch_data(i, n, rng, noise=noise) for i in range(prob.n_clients)]
    test = [prob.torch_data(i, n_test, rng, noise=noise) for i in range(prob.n_clients)]

    def stack(parts: list) -> ArrayDataset:
        x = torch.cat([p[0] for p in parts]).to(torch.float32).contiguous()
        y = torch.cat([p[1] for p in parts]).to(torch.float32).contiguous()
        return ArrayDataset(x, y, 0, "quadratic", task="regression")

    natural = [np.arange(i * n, (i + 1) * n, dtype=np.int64) for i in range(prob.n_clients)]
    return FederatedData(stack(train), stack(test), natural)


# ----------------------------------------------------------------------------------------------------------
# file-format readers


_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (the MNIST format): 2 zero bytes, a type code, the rank, big-endian dims, data."""
    path = Path(path)
    check_input_file(path, "data.root", "dataset file", LIMIT_DATASET)  # a regular file, never a device
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read(LIMIT_DATASET + 1)  # a .gz is bounded by what it expands to, not its own size
    if len(raw) > LIMIT_DATASET:
        raise ConfigError("data.root", f"'{path}' expands to more than {size_text(LIMIT_DATASET)} (allowed: a dataset "
                                       f"file of at most {size_text(LIMIT_DATASET)})")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in _IDX_DTYPES:
        raise ConfigError("data.root", f"'{path}' is not an IDX file (bad magic number)")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=_IDX_DTYPES[code], offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ConfigError("data.root", f"'{path}' holds {data.size} values, its header says {dims}")
    return data.reshape(dims)


def _idx_path(d: Path, stem: str) -> Path | None:
    for p in (d / stem, d / (stem + ".gz")):
        if p.is_file():
            return p
    return None


def _load_idx_images(name: str, root: Path, subdirs: tuple[str, ...], rng: np.random.Generator, opts: dict) -> FederatedData:
    def missing(d: Path) -> list[str]:
        return [s for s in _IDX_FILES if _idx_path(d, s) is None]

    d, miss = _find_dir(root, subdirs, missing)
    if miss:
        raise ConfigError("data.root", f"dataset '{name}' needs {', '.join(_IDX_FILES)} (optionally .gz) under "
                                       f"'{root}' (not found: {', '.join(miss)})")
    xtr, ytr, xte, yte = (read_idx(_idx_path(d, s)) for s in _IDX_FILES)  # type: ignore[arg-type]
    return _image_data(name, 10, xtr[:, None], ytr.astype(np.int64), xte[:, None], yte.astype(np.int64), rng, opts)


#: The only globals a CIFAR python batch needs: numpy arrays (both numpy 1.x and 2.x module paths).
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("_codecs", "encode"),  # protocol-2 pickles written by Python 3 spell bytes as encode(str, 'latin1')
}


class _BatchUnpickler(pickle.Unpickler):
    """Admits only numpy arrays, dtypes and plain containers (lists, dicts, bytes, str, numbers).

    A pickle can run any callable it names; a dataset file must never do that, so every other global is
    refused (the CIFAR batches hold a dict of bytes keys, a uint8 array and lists of ints)."""

    def __init__(self, fh: Any, path: Path) -> None:
        super().__init__(fh, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PICKLE_ALLOWED:
            return super().find_class(module, name)
        raise ConfigError("data.root", f"'{self.path}' is not a plain CIFAR batch: its pickle asks for "
                                       f"{module}.{name} (allowed: numpy arrays, lists, dicts, bytes); refusing to load it")


def _unpickle(path: Path) -> dict:
    """Read a CIFAR python batch with a restricted unpickler (see :class:`_BatchUnpickler`)."""
    check_input_file(path, "data.root", "dataset file", LIMIT_DATASET)
    with open(path, "rb") as f:
        try:
            out = _BatchUnpickler(f, path).load()
        except ConfigError:
            raise
        except Exception as exc:  # truncated or not a pickle at all
            raise ConfigError("data.root", f"'{path}' is not a readable CIFAR batch ({type(exc).__name__}: {exc})") from None
    if not isinstance(out, dict):
        raise ConfigError("data.root", f"'{path}' holds a {type(out).__name__}, not the dict of a CIFAR batch")
    return out


def _get(d: dict, key: str) -> Any:
    return d[key.encode()] if key.encode() in d else d[key]


def _load_cifar10(root: Path, rng: np.random.Generator, opts: dict) -> FederatedData:
    files = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]

    def missing(d: Path) -> list[str]:
        return [f for f in files if not (d / f).is_file()]

    d, miss = _find_dir(root, ("cifar-10-batches-py", ""), missing)
    if miss:
        raise ConfigError("data.root", f"dataset 'cifar10' needs cifar-10-batches-py/data_batch_1..5 and test_batch "
                                       f"under '{root}' (not found: {', '.join(miss)})")
    batches = [_unpickle(d / f) for f in files]
    xs = [np.asarray(_get(b, "data"), dtype=np.uint8).reshape(-1, 3, 32, 32) for b in batches]
    ys = [np.asarray(_get(b, "labels"), dtype=np.int64) for b in batches]
    return _image_data("cifar10", 10, np.concatenate(xs[:5]), np.concatenate(ys[:5]), xs[5], ys[5], rng, opts)


def _load_cifar100(root: Path, rng: np.random.Generator, opts: dict) -> FederatedData:
    def missing(d: Path) -> list[str]:
        return [f for f in ("train", "test") if not (d / f).is_file()]

    d, miss = _find_dir(root, ("cifar-100-python", ""), missing)
    if miss:
        raise ConfigError("data.root", f"dataset 'cifar100' needs cifar-100-python/train and cifar-100-python/test "
                                       f"under '{root}' (not found: {', '.join(miss)})")
    parts = []
    for f in ("train", "test"):
        b = _unpickle(d / f)
        parts.append(np.asarray(_get(b, "data"), dtype=np.uint8).reshape(-1, 3, 32, 32))
        parts.append(np.asarray(_get(b, "fine_labels"), dtype=np.int64))
    return _image_data("cifar100", 100, *parts, rng, opts)


def _load_svhn(root: Path, rng: np.random.Generator, opts: dict) -> FederatedData:
    """SVHN cropped digits (format 2): ``X`` is (32, 32, 3, N) uint8, ``y`` is 1..10 with 10 meaning digit 0."""
    from scipy.io import loadmat

    files = ("train_32x32.mat", "test_32x32.mat")

    def missing(d: Path) -> list[str]:
        return [f for f in files if not (d / f).is_file()]

    d, miss = _find_dir(root, ("", "svhn", "SVHN"), missing)
    if miss:
        raise ConfigError("data.root", f"dataset 'svhn' needs train_32x32.mat and test_32x32.mat under '{root}' "
                                       f"(not found: {', '.join(miss)})")
    out = []
    for f in files:
        check_input_file(d / f, "data.root", "dataset file", LIMIT_DATASET)
        m = loadmat(str(d / f))
        x = np.transpose(np.asarray(m["X"], dtype=np.uint8), (3, 2, 0, 1))
        y = np.asarray(m["y"], dtype=np.int64).reshape(-1) % 10
        out += [x, y]
    return _image_data("svhn", 10, *out, rng, opts)


_FEMNIST_OPTS = ("users", "num_classes")


def _load_femnist(root: Path, opts: dict) -> FederatedData:
    """LEAF FEMNIST: ``train/*.json`` and ``test/*.json`` with ``users`` and ``user_data[u] = {x, y}``.

    Pixels are LEAF's floats in [0, 1] (784 per image, reshaped to 1x28x28).  Users are taken in file
    order (files sorted by name, users in each file's ``users`` list); the natural partition gives each
    user's train indices.  ``users=n`` keeps only the first n users (in both splits).  The test split
    concatenates the test samples of the kept users.  Normalised with the train split's mean/std.
    """
    def missing(d: Path) -> list[str]:
        return [s + "/*.json" for s in ("train", "test") if not any((d / s).glob("*.json"))]

    d, miss = _find_dir(root, ("", "femnist", "data"), missing)
    if miss:
        raise ConfigError("data.root", f"dataset 'femnist' needs LEAF JSON files train/*.json and test/*.json under "
                                       f"'{root}' (not found: {', '.join(miss)})")
    limit = opts.get("users")
    ncls = int(opts.get("num_classes", 62))

    def read(split: str) -> tuple[list[str], dict]:
        users: list[str] = []
        data: dict = {}
        for f in sorted((d / split).glob("*.json")):
            check_input_file(f, "data.root", "dataset file", LIMIT_DATASET)
            with open(f) as fh:
                blob = json.load(fh)
            for u in blob["users"]:
                if u not in data:
                    users.append(u)
                data[u] = blob["user_data"][u]
        return users, data

    tr_users, tr_data = read("train")
    _, te_data = read("test")
    if limit is not None:
        tr_users = tr_users[: int(limit)]
    xs, ys, parts, offset = [], [], [], 0
    for u in tr_users:
        n = len(tr_data[u]["y"])
        xs.append(np.asarray(tr_data[u]["x"], dtype=np.float32).reshape(n, 1, 28, 28))
        ys.append(np.asarray(tr_data[u]["y"], dtype=np.int64))
        parts.append(np.arange(offset, offset + n, dtype=np.int64))
        offset += n
    txs, tys = [], []
    for u in tr_users:
        if u in te_data:
            n = len(te_data[u]["y"])
            txs.append(np.asarray(te_data[u]["x"], dtype=np.float32).reshape(n, 1, 28, 28))
            tys.append(np.asarray(te_data[u]["y"], dtype=np.int64))
    xtr = np.concatenate(xs) if xs else np.zeros((0, 1, 28, 28), np.float32)
    xte = np.concatenate(txs) if txs else np.zeros((0, 1, 28, 28), np.float32)
    ytr = np.concatenate(ys) if ys else np.zeros(0, np.int64)
    yte = np.concatenate(tys) if tys else np.zeros(0, np.int64)
    xtr, xte = normalise_channels(xtr, xte)
    return FederatedData(_to_dataset(xtr, ytr, ncls, "femnist"), _to_dataset(xte, yte, ncls, "femnist"), parts)


CINIC10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def _read_png_dir(split_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """All ``<class>/*.png`` under ``split_dir`` as (N, 3, H, W) uint8 and labels (class index)."""
    import matplotlib.image as mpimg

    xs, ys = [], []
    for label, cls in enumerate(CINIC10_CLASSES):
        for f in sorted((split_dir / cls).glob("*.png")):
            img = np.asarray(mpimg.imread(str(f)))
            if img.ndim == 2:  # a few CINIC images are greyscale
                img = np.repeat(img[:, :, None], 3, axis=2)
            img = img[:, :, :3]
            if img.dtype != np.uint8:  # PNGs are read as float32 in [0, 1]
                img = np.rint(img * 255.0).astype(np.uint8)
            xs.append(img.transpose(2, 0, 1))
            ys.append(label)
    return np.stack(xs) if xs else np.zeros((0, 3, 32, 32), np.uint8), np.asarray(ys, dtype=np.int64)


_CINIC_OPTS = ("use_valid", "train_size", "test_size")


def _load_cinic10(root: Path, rng: np.random.Generator, opts: dict) -> FederatedData:
    """CINIC-10 from ``cinic10.npz`` (preferred: fast) or the ImageFolder tree ``train|valid|test/<class>/*.png``.

    The npz form holds ``x_train, y_train, x_test, y_test`` (and optionally ``x_valid, y_valid``) with
    images as (N, 32, 32, 3) uint8; it exists because decoding 270,000 PNGs takes minutes.  The PNG tree is
    read with matplotlib.  ``use_valid=True`` adds the validation split to the training data.
    """
    use_valid = bool(opts.get("use_valid", False))
    for npz in (root / "cinic10.npz", root / "cinic-10" / "cinic10.npz"):
        if npz.is_file():
            check_input_file(npz, "data.root", "dataset file", LIMIT_DATASET)
            z = np.load(npz, allow_pickle=False)
            xtr, ytr = z["x_train"].transpose(0, 3, 1, 2), z["y_train"].astype(np.int64)
            if use_valid and "x_valid" in z:
                xtr = np.concatenate([xtr, z["x_valid"].transpose(0, 3, 1, 2)])
                ytr = np.concatenate([ytr, z["y_valid"].astype(np.int64)])
            return _image_data("cinic10", 10, xtr, ytr, z["x_test"].transpose(0, 3, 1, 2),
                               z["y_test"].astype(np.int64), rng, opts)
    splits = ("train", "test") + (("valid",) if use_valid else ())

    def missing(d: Path) -> list[str]:
        return [f"{s}/<class>/*.png" for s in splits if not any((d / s).glob("*/*.png"))]

    d, miss = _find_dir(root, ("", "cinic-10", "CINIC-10"), missing)
    if miss:
        raise ConfigError("data.root", f"dataset 'cinic10' needs cinic10.npz or the folders train/, test/ (and valid/ "
                                       f"with use_valid) of <class>/*.png under '{root}' (not found: {', '.join(miss)})")
    xtr, ytr = _read_png_dir(d / "train")
    if use_valid:
        xv, yv = _read_png_dir(d / "valid")
        xtr, ytr = np.concatenate([xtr, xv]), np.concatenate([ytr, yv])
    xte, yte = _read_png_dir(d / "test")
    return _image_data("cinic10", 10, xtr, ytr, xte, yte, rng, opts)


# ----------------------------------------------------------------------------------------------------------
# entry point


from fedsim.learn.choices import DATASETS  # noqa: E402  (torch-free: the scenario checks names against it)

_SUBSAMPLE = ("train_size", "test_size")


def load_dataset(name: str, *, root: str | os.PathLike | None = None, num_clients: int | None = None,
                 rng: np.random.Generator | None = None, options: dict | None = None,
                 base_dirs: tuple = ()) -> FederatedData:
    """Load dataset ``name`` (one of :data:`DATASETS`) into memory.

    ``root`` is the folder with the files of a file-based dataset; ``num_clients`` matters only for
    ``synthetic`` and ``quadratic`` (the number of generated clients); ``options`` are dataset-specific
    (unknown keys are rejected).  File-based datasets accept ``train_size``/``test_size`` to keep a random subset.
    Any other ``name`` is a loader (:func:`user_dataset`): ``module:function``, a name an installed package
    registers under the ``fedsim.datasets`` entry point, or the function itself.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    if name == "digits":
        return _load_digits(rng, _check_options(name, options, _DIGITS_OPTS))
    if name == "digits32":
        return _load_digits(rng, _check_options(name, options, _DIGITS_OPTS), upscale=True)
    if name == "mnist1d":
        return _load_mnist1d(rng, _check_options(name, options, _mnist1d_opts()))
    if name == "synthetic":
        return _load_synthetic(rng, num_clients, _check_options(name, options, _SYNTH_OPTS))
    if name == "quadratic":
        return _load_quadratic(rng, num_clients, _check_options(name, options, _QUAD_OPTS))
    if name in ("mnist", "fashion_mnist"):
        opts = _check_options(name, options, _SUBSAMPLE)
        r = _need_root(name, root, ", ".join(_IDX_FILES))
        subdirs = ("", "MNIST/raw", "mnist") if name == "mnist" else ("", "FashionMNIST/raw", "fashion_mnist", "fashion-mnist")
        return _load_idx_images(name, r, subdirs, rng, opts)
    if name == "cifar10":
        opts = _check_options(name, options, _SUBSAMPLE)
        return _load_cifar10(_need_root(name, root, "cifar-10-batches-py/"), rng, opts)
    if name == "cifar100":
        opts = _check_options(name, options, _SUBSAMPLE)
        return _load_cifar100(_need_root(name, root, "cifar-100-python/"), rng, opts)
    if name == "svhn":
        opts = _check_options(name, options, _SUBSAMPLE)
        return _load_svhn(_need_root(name, root, "train_32x32.mat and test_32x32.mat"), rng, opts)
    if name == "femnist":
        opts = _check_options(name, options, _FEMNIST_OPTS)
        return _load_femnist(_need_root(name, root, "LEAF train/*.json and test/*.json"), opts)
    if name == "cinic10":
        opts = _check_options(name, options, _CINIC_OPTS)
        return _load_cinic10(_need_root(name, root, "cinic10.npz or train/ and test/ PNG folders"), rng, opts)
    loader = components.find("dataset", name, "data.name", base_dirs)
    if loader is None:
        known = ", ".join(DATASETS + tuple(sorted(components.installed("dataset"))))
        raise ConfigError("data.name", f"unknown dataset '{name}' (allowed: {known}; or module:function for your own)")
    return user_dataset(loader, str(name), rng, options)


def user_dataset(loader: Callable[..., Any], ref: str, rng: np.random.Generator,
                 options: dict | None = None) -> FederatedData:
    """A dataset from a user's loader ``loader(rng, **options)``.

    It returns ``(x_train, y_train, x_test, y_test)`` as arrays or tensors, optionally followed by one client
    id per training sample (any hashable labels; clients are numbered in sorted id order), which the
    ``natural`` partition then uses.  Integer labels make a classification task with ``max + 1`` classes;
    floating targets a regression task.  Inputs are used as given (normalise them in the loader)."""
    out = components.call_factory(loader, "data.name", ref, rng, **dict(options or {}))
    if not isinstance(out, (tuple, list)) or len(out) not in (4, 5):
        raise ConfigError("data.name", f"{ref!r} returned {type(out).__name__}; a dataset loader returns "
                          "(x_train, y_train, x_test, y_test[, client_ids])")
    try:
        xtr, ytr, xte, yte = (np.asarray(a.numpy() if isinstance(a, torch.Tensor) else a) for a in out[:4])
    except Exception as exc:  # noqa: BLE001 - whatever the loader returned: one line
        raise ConfigError("data.name", f"{ref!r} returned something that is not arrays: {exc}") from None
    for what, x, y in (("train", xtr, ytr), ("test", xte, yte)):
        if x.ndim < 2 or y.ndim != 1 or len(x) != len(y) or len(y) == 0:
            raise ConfigError("data.name", f"{ref!r}: {what} inputs {x.shape} and labels {y.shape} do not match "
                              "(need x of shape (N, ...) and y of shape (N,), N >= 1)")
        if not np.issubdtype(x.dtype, np.number) or not np.isfinite(x.astype(np.float64)).all():
            raise ConfigError("data.name", f"{ref!r}: {what} inputs must be finite numbers")
    if xtr.shape[1:] != xte.shape[1:]:
        raise ConfigError("data.name", f"{ref!r}: train inputs {xtr.shape[1:]} and test inputs {xte.shape[1:]} differ")
    natural = None
    if len(out) == 5:
        ids = np.asarray(out[4])
        if ids.shape != (len(ytr),):
            raise ConfigError("data.name", f"{ref!r}: client ids have shape {ids.shape}, need one per training sample")
        _, inverse = np.unique(ids, return_inverse=True)
        natural = [np.flatnonzero(inverse == k) for k in range(int(inverse.max()) + 1)]
    if np.issubdtype(ytr.dtype, np.integer) and np.issubdtype(yte.dtype, np.integer):
        if min(ytr.min(), yte.min()) < 0:
            raise ConfigError("data.name", f"{ref!r}: class labels must be >= 0")
        classes = int(max(ytr.max(), yte.max())) + 1
        train, test = _to_dataset(xtr, ytr, classes, ref), _to_dataset(xte, yte, classes, ref)
    else:
        def reg(x: np.ndarray, y: np.ndarray) -> ArrayDataset:
            return ArrayDataset(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
                                torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)), 0, ref, "regression")
        train, test = reg(xtr, ytr), reg(xte, yte)
    return FederatedData(train, test, natural_partition=natural)
