"""The named choices the learning modules offer, and their checks, without torch: a scenario's settings are
validated against these (``fedsim show``, ``fedsim reference``) without loading the code that uses them.
``fedsim.learn.augment`` and ``fedsim.learn.models`` re-export them."""
from __future__ import annotations

from typing import Any

from fedsim.config import require
from fedsim.errors import ConfigError

__all__ = ["WEAK", "STRONG", "RAND_OPS", "FRAGMENT_RATIOS", "DATASETS", "MODELS", "REGRESSION_MODELS", "check_augmentation",
           "check_randaugment"]

WEAK: tuple[str, ...] = ("flip_crop", "crop", "none")
STRONG: tuple[str, ...] = ("randaugment", "noise", "none")
RAND_OPS: tuple[str, ...] = ("identity", "autocontrast", "brightness", "contrast", "posterize", "rotate",
                             "sharpness", "shear_x", "shear_y", "solarize", "translate_x", "translate_y")


def check_augmentation(name: str, allowed: tuple[str, ...], field: str) -> str:
    if name not in allowed:
        raise ConfigError(field, f"unknown augmentation {name!r} (allowed: {', '.join(allowed)})")
    return name


def check_randaugment(n: Any, m: Any, prefix: str) -> None:
    """RandAugment's N (ops drawn per image, 1..len(RAND_OPS)) and M (magnitude, 1..10)."""
    require(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(RAND_OPS), f"{prefix}.rand_n",
            f"got {n!r} (allowed: 1..{len(RAND_OPS)} augmentation ops per image)")
    require(isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= 10, f"{prefix}.rand_m",
            f"magnitude must be an integer in 1..10, got {m!r}")


#: Fed-RAA's model partition strategy (Table 4): the share of the designated layers' neurons in each
#: fragment, weakest client's fragment first, by number of partitions.
FRAGMENT_RATIOS: dict[int, tuple[float, ...]] = {
    2: (0.4, 0.6), 3: (0.2, 0.3, 0.5), 4: (0.1, 0.2, 0.3, 0.4), 5: (0.05, 0.1, 0.2, 0.3, 0.35)}


#: The built-in datasets (``fedsim.learn.data``).
DATASETS: tuple[str, ...] = ("digits", "digits32", "mnist1d", "synthetic", "quadratic", "mnist", "fashion_mnist", "cifar10",
                             "cifar100", "svhn", "femnist", "cinic10")
#: The built-in classifiers (one logit per class; ``fedsim.learn.models``).
MODELS: tuple[str, ...] = ("logreg", "mlp", "cnn", "alexnet_cifar", "resnet20", "vit", "fragment_mlp", "femnist_cnn")
#: Models for regression tasks: ``linear`` is x ↦ W x without a bias (the ``quadratic`` dataset's model).
REGRESSION_MODELS: tuple[str, ...] = ("linear",)
