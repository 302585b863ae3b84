"""Datasets: generated ones and every on-disk format, written tiny into tmp_path and read back."""
from __future__ import annotations

import gzip
import json
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedsim.errors import ConfigError
from fedsim.learn.data import DATASETS, ArrayDataset, FederatedData, load_dataset

torch.set_num_threads(1)


def _denorm(loaded: torch.Tensor, raw_train01: np.ndarray) -> np.ndarray:
    """Undo per-channel normalisation using statistics computed here, independently, from the raw train data."""
    axes = tuple(i for i in range(raw_train01.ndim) if i != 1)
    mean = raw_train01.astype(np.float64).mean(axis=axes, keepdims=True)
    std = raw_train01.astype(np.float64).std(axis=axes, keepdims=True)
    return loaded.numpy().astype(np.float64) * std + mean


def _check_normalised(ds: ArrayDataset) -> None:
    x = ds.x.numpy().astype(np.float64)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    np.testing.assert_allclose(x.mean(axis=axes), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=axes), 1.0, atol=1e-4)


# ---------------------------------------------------------------- generated datasets

def test_digits_split_shapes_and_labels():
    from sklearn.datasets import load_digits

    d = load_dataset("digits", rng=np.random.default_rng(3))
    assert isinstance(d, FederatedData) and d.natural_partition is None
    assert d.train.input_shape == (1, 8, 8) and d.train.x.dtype == torch.float32 and d.train.y.dtype == torch.int64
    assert len(d.test) == round(0.2 * 1797) and len(d.train) + len(d.test) == 1797
    ref = np.bincount(load_digits().target, minlength=10)
    np.testing.assert_array_equal(d.train.label_counts() + d.test.label_counts(), ref)
    _check_normalised(d.train)
    # every normalised row is a genuine digit image: undo the affine map using pixel values 0 and 16,
    # which both occur in the train split, and compare with sklearn's rows (as a multiset over both splits)
    tr = d.train.x.numpy().reshape(len(d.train), -1).astype(np.float64)
    lo, hi = tr.min(), tr.max()
    te = d.test.x.numpy().reshape(len(d.test), -1).astype(np.float64)
    pixels = np.rint((np.concatenate([tr, te]) - lo) / (hi - lo) * 16).astype(np.int64)
    assert pixels.min() >= 0 and pixels.max() <= 16
    ref_rows = sorted(r.tobytes() for r in load_digits().images.astype(np.int64).reshape(1797, -1))
    assert sorted(r.tobytes() for r in pixels) == ref_rows


def test_digits_arrays_equal_load_digits_byte_for_byte():
    from sklearn.datasets import load_digits

    from fedsim.learn.data import digits_arrays

    images, target = digits_arrays()
    d = load_digits()
    assert images.dtype == d.images.dtype and images.shape == d.images.shape == (1797, 8, 8)
    assert target.dtype == d.target.dtype and target.shape == d.target.shape
    assert images.tobytes() == d.images.tobytes() and target.tobytes() == d.target.tobytes()
    # parsed once per process: a later call gives equal arrays of its own, untouched by a caller's edits
    images[0, 0, 0] = -1.0
    target[0] = -1
    again, again_target = digits_arrays()
    assert again.tobytes() == d.images.tobytes() and again_target.tobytes() == d.target.tobytes()


def test_loading_digits_imports_neither_scikit_learn_nor_scipy():
    """scikit-learn ships the images; reading them must not execute its package (about a second with scipy)."""
    code = ("import sys, numpy as np\n"
            "from fedsim.learn.data import load_dataset\n"
            "load_dataset('digits32', rng=np.random.default_rng(0))\n"
            "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_digits_split_reproducible_and_seed_dependent():
    a = load_dataset("digits", rng=np.random.default_rng(5))
    b = load_dataset("digits", rng=np.random.default_rng(5))
    c = load_dataset("digits", rng=np.random.default_rng(6))
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    assert not torch.equal(a.train.y, c.train.y)


def test_mnist1d_generated_offline_without_side_effects():
    from mnist1d.data import get_dataset_args

    np.random.seed(123)
    state = np.random.get_state()[1].copy()
    d = load_dataset("mnist1d", options={"num_samples": 500})
    assert np.array_equal(np.random.get_state()[1], state), "global numpy RNG must be restored"
    assert d.train.input_shape == (1, 40) and len(d.train) == 400 and len(d.test) == 100
    assert d.train.num_classes == 10 and set(d.train.y.tolist()) <= set(range(10))
    _check_normalised(d.train)
    e = load_dataset("mnist1d", options={"num_samples": 500})
    assert torch.equal(d.train.x, e.train.x)
    assert get_dataset_args(as_dict=True)["seed"] == 42  # the default dataset is the published one


def test_synthetic_structure_and_holdout():
    d = load_dataset("synthetic", num_clients=8, rng=np.random.default_rng(0),
                     options={"alpha": 0.5, "beta": 0.5, "samples": 1600})
    parts = d.natural_partition
    assert parts is not None and len(parts) == 8
    assert d.train.input_shape == (60,) and d.train.num_classes == 10
    cat = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(cat), np.arange(len(d.train)))
    assert len(d.train) + len(d.test) == 1600
    # each client holds out floor(20%) of its n_k samples (at least one): sum_k floor(0.2 n_k) lies in
    # [0.2 * total - k, 0.2 * total]
    assert 0.2 * 1600 - 8 <= len(d.test) <= 0.2 * 1600
    # train labels are the argmax of a linear model: no class index outside 0..9
    assert d.train.y.min() >= 0 and d.train.y.max() <= 9


def test_synthetic_default_sizes_are_heavy_tailed_with_floor():
    d = load_dataset("synthetic", num_clients=30, rng=np.random.default_rng(7), options={"test_fraction": 0.0})
    sizes = np.array([len(p) for p in d.natural_partition])
    assert sizes.min() >= 50  # int(lognormal(4, 2)) + 50
    assert sizes.max() > 5 * np.median(sizes)  # lognormal sigma=2: the largest of 30 is far above the median


def test_synthetic_iid_covariance_is_j_pow_minus_1_2():
    d = load_dataset("synthetic", num_clients=4, rng=np.random.default_rng(1),
                     options={"iid": True, "samples": 20000, "test_fraction": 0.0})
    var = d.train.x.numpy().astype(np.float64).var(axis=0)
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(var, expected, rtol=0.1)
    np.testing.assert_allclose(d.train.x.numpy().mean(axis=0), 0.0, atol=0.03)


def test_synthetic_beta_controls_feature_heterogeneity():
    def spread(beta):
        d = load_dataset("synthetic", num_clients=40, rng=np.random.default_rng(2),
                         options={"alpha": 0.0, "beta": beta, "samples": 4000})
        means = [d.train.x[p].mean().item() for p in d.natural_partition]
        return np.var(means)

    # mean of v_k over 60 dims ~ N(B_k, 1/60) with B_k ~ N(0, beta): variance beta^2 + 1/60
    assert spread(0.0) < 0.1
    assert spread(3.0) > 3.0


def test_synthetic_num_clients_conflict():
    with pytest.raises(ConfigError, match="num_clients"):
        load_dataset("synthetic", num_clients=5, options={"num_clients": 6})


def test_unknown_name_and_option():
    with pytest.raises(ConfigError, match=r"data\.name: unknown dataset 'nope' \(allowed: digits"):
        load_dataset("nope")
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        load_dataset("digits", options={"bogus": 1})
    assert set(DATASETS) >= {"digits", "mnist1d", "synthetic", "mnist", "fashion_mnist", "cifar10", "cifar100",
                             "svhn", "femnist", "cinic10"}


# ---------------------------------------------------------------- file formats

def _write_idx(path, arr: np.ndarray, gz: bool = False) -> None:
    head = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    blob = head + arr.astype(np.uint8).tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(blob)
    else:
        path.write_bytes(blob)


@pytest.mark.parametrize("name,gz", [("mnist", False), ("fashion_mnist", True)])
def test_idx_round_trip(tmp_path, name, gz):
    rng = np.random.default_rng(0)
    xtr = rng.integers(0, 256, (12, 28, 28)).astype(np.uint8)
    ytr = rng.integers(0, 10, 12).astype(np.uint8)
    xte = rng.integers(0, 256, (5, 28, 28)).astype(np.uint8)
    yte = rng.integers(0, 10, 5).astype(np.uint8)
    for stem, a in (("train-images-idx3-ubyte", xtr), ("train-labels-idx1-ubyte", ytr),
                    ("t10k-images-idx3-ubyte", xte), ("t10k-labels-idx1-ubyte", yte)):
        _write_idx(tmp_path / stem, a, gz)
    d = load_dataset(name, root=str(tmp_path))
    assert d.train.input_shape == (1, 28, 28) and len(d.test) == 5
    np.testing.assert_array_equal(d.train.y.numpy(), ytr)
    np.testing.assert_array_equal(d.test.y.numpy(), yte)
    raw = xtr[:, None] / 255.0
    np.testing.assert_allclose(_denorm(d.train.x, raw), raw, atol=1e-5)
    np.testing.assert_allclose(_denorm(d.test.x, raw), xte[:, None] / 255.0, atol=1e-5)
    _check_normalised(d.train)


def test_idx_missing_files_one_clear_line(tmp_path):
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((1, 2, 2), np.uint8))
    with pytest.raises(ConfigError) as e:
        load_dataset("mnist", root=str(tmp_path))
    msg = str(e.value)
    assert msg.startswith("data.root: dataset 'mnist' needs") and "\n" not in msg
    assert "not found: train-labels-idx1-ubyte" in msg and str(tmp_path) in msg


def test_file_dataset_without_root():
    with pytest.raises(ConfigError, match="data.root"):
        load_dataset("cifar10")


def _cifar_arrays(rng, n):
    x = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)
    return x, rng.integers(0, 10, n)


def test_cifar10_round_trip_and_subsample(tmp_path):
    rng = np.random.default_rng(1)
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    xs, ys = [], []
    for i in range(1, 6):
        x, y = _cifar_arrays(rng, 3)
        xs.append(x); ys.append(y)
        with open(base / f"data_batch_{i}", "wb") as f:
            pickle.dump({b"data": x.reshape(3, -1), b"labels": [int(v) for v in y]}, f, protocol=2)
    xt, yt = _cifar_arrays(rng, 4)
    with open(base / "test_batch", "wb") as f:
        pickle.dump({b"data": xt.reshape(4, -1), b"labels": [int(v) for v in yt]}, f, protocol=2)
    d = load_dataset("cifar10", root=str(tmp_path))
    xtr, ytr = np.concatenate(xs), np.concatenate(ys)
    assert d.train.input_shape == (3, 32, 32) and len(d.train) == 15
    np.testing.assert_array_equal(d.train.y.numpy(), ytr)
    np.testing.assert_array_equal(d.test.y.numpy(), yt)
    np.testing.assert_allclose(_denorm(d.train.x, xtr / 255.0), xtr / 255.0, atol=1e-5)
    np.testing.assert_allclose(_denorm(d.test.x, xtr / 255.0), xt / 255.0, atol=1e-5)
    _check_normalised(d.train)
    small = load_dataset("cifar10", root=str(tmp_path), rng=np.random.default_rng(0), options={"train_size": 6})
    assert len(small.train) == 6 and len(small.test) == 4
    # each kept row is a per-channel positive affine image of exactly one original row; they keep file order
    matches = []
    for row in small.train.x.numpy():
        hits = [j for j in range(15) if all(np.corrcoef(row[c].ravel(), xtr[j, c].ravel())[0, 1] > 0.999999
                                            for c in range(3))]
        assert len(hits) == 1
        matches.append(hits[0])
    assert matches == sorted(matches) and len(set(matches)) == 6
    np.testing.assert_array_equal(small.train.y.numpy(), ytr[matches])


def test_cifar10_missing_batches(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(ConfigError, match=r"needs cifar-10-batches-py/data_batch_1\.\.5 and test_batch.*"
                                          r"not found: data_batch_1"):
        load_dataset("cifar10", root=str(tmp_path))


def test_cifar100_fine_labels(tmp_path):
    rng = np.random.default_rng(2)
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    blobs = {}
    for split, n in (("train", 7), ("test", 3)):
        x = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)
        fine = rng.integers(0, 100, n)
        blobs[split] = (x, fine)
        with open(base / split, "wb") as f:
            pickle.dump({b"data": x.reshape(n, -1), b"fine_labels": fine.tolist(),
                         b"coarse_labels": (fine // 5).tolist()}, f, protocol=2)
    d = load_dataset("cifar100", root=str(tmp_path))
    assert d.train.num_classes == 100
    np.testing.assert_array_equal(d.train.y.numpy(), blobs["train"][1])
    np.testing.assert_array_equal(d.test.y.numpy(), blobs["test"][1])
    raw = blobs["train"][0] / 255.0
    np.testing.assert_allclose(_denorm(d.test.x, raw), blobs["test"][0] / 255.0, atol=1e-5)


def test_svhn_mat_round_trip(tmp_path):
    from scipy.io import savemat

    rng = np.random.default_rng(3)
    data = {}
    for split, n in (("train", 6), ("test", 4)):
        x = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.uint8)
        digit = rng.integers(0, 10, n)
        digit[0] = 0
        data[split] = (x, digit)
        y = np.where(digit == 0, 10, digit).astype(np.uint8)[:, None]  # SVHN writes digit 0 as label 10
        savemat(str(tmp_path / f"{split}_32x32.mat"), {"X": x.transpose(2, 3, 1, 0), "y": y})
    d = load_dataset("svhn", root=str(tmp_path))
    np.testing.assert_array_equal(d.train.y.numpy(), data["train"][1])
    np.testing.assert_array_equal(d.test.y.numpy(), data["test"][1])
    raw = data["train"][0] / 255.0
    np.testing.assert_allclose(_denorm(d.train.x, raw), raw, atol=1e-5)


def test_femnist_leaf_json_natural_partition(tmp_path):
    rng = np.random.default_rng(4)
    users = {"f_b": 3, "f_a": 2, "f_c": 4}
    written = {}
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        # two files, users listed in file order, not sorted
        for fname, names in (("all_data_0.json", ["f_b", "f_a"]), ("all_data_1.json", ["f_c"])):
            ud = {}
            for u in names:
                n = users[u] if split == "train" else 1
                x = rng.random((n, 784)).round(3)
                y = rng.integers(0, 62, n)
                ud[u] = {"x": x.tolist(), "y": y.tolist()}
                written[(split, u)] = (x, y)
            (tmp_path / split / fname).write_text(json.dumps(
                {"users": names, "num_samples": [len(ud[u]["y"]) for u in names], "user_data": ud}))
    d = load_dataset("femnist", root=str(tmp_path))
    assert d.train.num_classes == 62 and d.train.input_shape == (1, 28, 28)
    order = ["f_b", "f_a", "f_c"]
    assert [len(p) for p in d.natural_partition] == [users[u] for u in order]
    raw_train = np.concatenate([written[("train", u)][0] for u in order]).reshape(-1, 1, 28, 28)
    for u, p in zip(order, d.natural_partition):
        np.testing.assert_array_equal(d.train.y.numpy()[p], written[("train", u)][1])
        np.testing.assert_allclose(_denorm(d.train.x[p], raw_train).reshape(len(p), -1),
                                   written[("train", u)][0], atol=1e-5)
    np.testing.assert_array_equal(d.test.y.numpy(), np.concatenate([written[("test", u)][1] for u in order]))
    two = load_dataset("femnist", root=str(tmp_path), options={"users": 2})
    assert len(two.natural_partition) == 2 and len(two.train) == 5 and len(two.test) == 2


def test_cinic10_png_folders_and_npz(tmp_path):
    import matplotlib.image as mpimg

    from fedsim.learn.data import CINIC10_CLASSES

    rng = np.random.default_rng(5)
    written = {"train": ([], []), "test": ([], [])}
    for split in ("train", "test"):
        for label in (0, 3, 9):
            cdir = tmp_path / split / CINIC10_CLASSES[label]
            cdir.mkdir(parents=True)
            for j in range(2):
                img = rng.integers(0, 256, (32, 32, 3)).astype(np.uint8)
                mpimg.imsave(str(cdir / f"img{j}.png"), img)
                written[split][0].append(img.transpose(2, 0, 1))
                written[split][1].append(label)
    d = load_dataset("cinic10", root=str(tmp_path))
    xtr, ytr = np.stack(written["train"][0]), np.array(written["train"][1])
    np.testing.assert_array_equal(d.train.y.numpy(), ytr)
    np.testing.assert_allclose(_denorm(d.train.x, xtr / 255.0), xtr / 255.0, atol=1e-5)
    # the same data in the npz form loads identically
    xte, yte = np.stack(written["test"][0]), np.array(written["test"][1])
    npz_root = tmp_path / "npz"
    npz_root.mkdir()
    np.savez(npz_root / "cinic10.npz", x_train=xtr.transpose(0, 2, 3, 1), y_train=ytr,
             x_test=xte.transpose(0, 2, 3, 1), y_test=yte)
    z = load_dataset("cinic10", root=str(npz_root))
    assert torch.equal(z.train.x, d.train.x) and torch.equal(z.test.x, d.test.x) and torch.equal(z.test.y, d.test.y)


def test_cinic10_missing(tmp_path):
    with pytest.raises(ConfigError, match="dataset 'cinic10' needs cinic10.npz"):
        load_dataset("cinic10", root=str(tmp_path))


class _Payload:
    """A pickle that would run a command when loaded with plain pickle.load."""

    def __reduce__(self):
        import os

        return (os.system, ("echo pwned > /dev/null",))


def test_crafted_cifar_pickle_is_refused_with_one_line(tmp_path, capsys):
    """A batch whose pickle names any global besides numpy's array reconstruction is refused before it runs."""
    from fedsim.cli import main

    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.default_rng(2)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x, y = _cifar_arrays(rng, 2)
        payload = {b"data": x.reshape(2, -1), b"labels": [int(v) for v in y]}
        if name == "data_batch_3":
            payload[b"extra"] = _Payload()
        with open(base / name, "wb") as f:
            pickle.dump(payload, f, protocol=2)
    code = main(["run", "default", "data.name=cifar10", f"data.root={tmp_path}", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("fedsim: error: data.root: ") and "data_batch_3" in err[0] and "system" in err[0]
    assert not (tmp_path / "out").exists()
