"""Models as ordered lists of blocks, so that split learning can cut them and width scaling can slice them.

A :class:`BlockModel` runs ``blocks[start:end]``; :func:`split_model` gives the client part (blocks before
the cut) and the server part (the rest) as two views sharing the same modules.  A flatten step always
lives *inside* a block (together with the first linear layer after it), so every cut point is a real
tensor that could be sent over a link.

Initialisation is PyTorch's default for each layer, drawn under a private RNG seeded from
``seed_generator``: the same generator state gives bit-identical weights, and the global torch RNG is
left untouched.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from fedsim.errors import ConfigError

__all__ = ["BlockModel", "MODELS", "REGRESSION_MODELS", "build_model", "split_model", "scaled"]

#: The classifiers (one logit per class).
MODELS: tuple[str, ...] = ("logreg", "mlp", "cnn", "alexnet_cifar", "femnist_cnn")
#: Models for regression tasks: ``linear`` is x ↦ W x without a bias (the ``quadratic`` dataset's model).
REGRESSION_MODELS: tuple[str, ...] = ("linear",)


class BlockModel(nn.Module):
    """An ordered list of blocks; later work cuts it (split point) or slices it (width)."""

    def __init__(self, blocks: Sequence[nn.Module], *, arch: tuple | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        #: Hashable description of the architecture (name, input shape, classes, hidden, width, block range);
        #: equal for models that differ only in weights.  Used as a cache key for cost probes.
        self.arch = arch

    def forward(self, x: torch.Tensor, start: int = 0, end: int | None = None) -> torch.Tensor:
        for block in self.blocks[start:end]:
            x = block(x)
        return x

    def num_blocks(self) -> int:
        return len(self.blocks)


def scaled(n: int, width: float) -> int:
    """A layer size scaled by ``width`` (HeteroFL/FjORD style): ceil(n * width), at least 1."""
    return max(1, int(math.ceil(n * width - 1e-9)))


def _flat_size(blocks: Sequence[nn.Module], input_shape: tuple[int, ...]) -> int:
    """Features per sample after running ``blocks`` on an input of ``input_shape`` (a dry run on zeros)."""
    with torch.no_grad():
        x = torch.zeros(1, *input_shape)
        for b in blocks:
            x = b(x)
    return int(x[0].numel())


def _as_tuple(hidden: int | tuple[int, ...] | None, default: tuple[int, ...]) -> tuple[int, ...]:
    if hidden is None:
        return default
    if isinstance(hidden, int):
        return (hidden,)
    return tuple(int(h) for h in hidden)


def _logreg(input_shape: tuple[int, ...], num_classes: int) -> list[nn.Module]:
    return [nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))]


def _linear(input_shape: tuple[int, ...], num_outputs: int) -> list[nn.Module]:
    """One bias-free linear block: x ↦ W x.  With one output it is the model of the ``quadratic`` dataset,
    whose least-squares loss is exactly the quadratic f_i(w) = ½ (w − c_i)ᵀ A_i (w − c_i) (no intercept)."""
    return [nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_outputs, bias=False))]


def _mlp(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...], width: float) -> list[nn.Module]:
    """Flatten + Linear/ReLU hidden layers (one block each) + a Linear output block."""
    sizes = [scaled(h, width) for h in hidden]
    blocks: list[nn.Module] = []
    prev = math.prod(input_shape)
    for i, h in enumerate(sizes):
        layers: list[nn.Module] = [nn.Flatten()] if i == 0 else []
        layers += [nn.Linear(prev, h), nn.ReLU()]
        blocks.append(nn.Sequential(*layers))
        prev = h
    out: list[nn.Module] = [nn.Flatten()] if not sizes else []
    blocks.append(nn.Sequential(*out, nn.Linear(prev, num_classes)))
    return blocks


def _cnn(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...], width: float) -> list[nn.Module]:
    """Two conv blocks (conv 3, ReLU, max-pool 2), then Flatten+Linear+ReLU, then the output Linear.

    Channels 16 and 32 and a 64-unit hidden layer, all scaled by ``width``.  A (C, L) input uses Conv1d
    (e.g. MNIST-1D's (1, 40)); a (C, H, W) input uses Conv2d (digits' 8x8, MNIST's 28x28, CIFAR's 32x32).
    A pooling step is skipped when the feature map is already smaller than 2.
    """
    if len(input_shape) == 2:
        conv, pool = nn.Conv1d, nn.MaxPool1d
    elif len(input_shape) == 3:
        conv, pool = nn.Conv2d, nn.MaxPool2d
    else:
        raise ConfigError("model.name", f"'cnn' needs an input of shape (C, L) or (C, H, W), got {input_shape}")
    c1, c2 = scaled(16, width), scaled(32, width)
    fc = scaled(hidden[0], width)
    blocks: list[nn.Module] = []
    spatial = min(input_shape[1:])
    for cin, cout in ((input_shape[0], c1), (c1, c2)):
        layers: list[nn.Module] = [conv(cin, cout, 3, padding=1), nn.ReLU()]
        if spatial >= 2:
            layers.append(pool(2))
            spatial //= 2
        blocks.append(nn.Sequential(*layers))
    flat = _flat_size(blocks, input_shape)
    blocks.append(nn.Sequential(nn.Flatten(), nn.Linear(flat, fc), nn.ReLU()))
    blocks.append(nn.Linear(fc, num_classes))
    return blocks


def _alexnet_cifar(input_shape: tuple[int, ...], num_classes: int, width: float) -> list[nn.Module]:
    """The small CIFAR "AlexNet" of the GAS paper's code: 14 layers, one block each.

    conv(C->32) pool2 ReLU conv(32->64) pool2 ReLU | conv(64->128) conv(128->256) conv(256->256) pool(3,2)
    ReLU [Flatten+]Linear(->1024) Linear(1024->512) Linear(512->classes); all convs 3x3 with padding 1.
    GAS splits after block 6 (the bar).  As in that code there is no ReLU between conv3, conv4 and conv5,
    nor between the linear layers.  The first linear layer's input size follows from the input shape
    (2304 for both 3x32x32 and 1x28x28).  Channels and hidden sizes scale with ``width``.
    """
    if len(input_shape) != 3:
        raise ConfigError("model.name", f"'alexnet_cifar' needs an image input (C, H, W), got {input_shape}")
    c = [scaled(v, width) for v in (32, 64, 128, 256, 256)]
    f1, f2 = scaled(1024, width), scaled(512, width)
    blocks: list[nn.Module] = [
        nn.Conv2d(input_shape[0], c[0], 3, padding=1), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Conv2d(c[0], c[1], 3, padding=1), nn.MaxPool2d(2, 2), nn.ReLU(),
        nn.Conv2d(c[1], c[2], 3, padding=1), nn.Conv2d(c[2], c[3], 3, padding=1),
        nn.Conv2d(c[3], c[4], 3, padding=1), nn.MaxPool2d(3, 2), nn.ReLU(),
    ]
    flat = _flat_size(blocks, input_shape)
    blocks += [nn.Sequential(nn.Flatten(), nn.Linear(flat, f1)), nn.Linear(f1, f2), nn.Linear(f2, num_classes)]
    return blocks


def _femnist_cnn(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...], width: float) -> list[nn.Module]:
    """The LEAF FEMNIST CNN (EmbracingFL's FEMNIST model) as four blocks: conv1 | conv2 | dense | output.

    conv 5x5 'same' (32 channels) + ReLU + max-pool 2, conv 5x5 'same' (64) + ReLU + max-pool 2,
    Flatten + Linear(->2048) + ReLU, Linear(2048->classes).  On 1x28x28 with 62 classes it has exactly the
    paper's 6,603,710 parameters.  Channels and the dense size scale with ``width``; ``hidden`` replaces
    the 2048.  The blocks are EmbracingFL's layer partition: moderate clients freeze blocks 0-1, weak 0-2.
    """
    if len(input_shape) != 3:
        raise ConfigError("model.name", f"'femnist_cnn' needs an image input (C, H, W), got {input_shape}")
    c1, c2, fc = scaled(32, width), scaled(64, width), scaled(hidden[0], width)
    blocks: list[nn.Module] = []
    spatial = min(input_shape[1:])
    for cin, cout in ((input_shape[0], c1), (c1, c2)):
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, 5, padding=2), nn.ReLU()]
        if spatial >= 2:
            layers.append(nn.MaxPool2d(2))
            spatial //= 2
        blocks.append(nn.Sequential(*layers))
    flat = _flat_size(blocks, input_shape)
    blocks.append(nn.Sequential(nn.Flatten(), nn.Linear(flat, fc), nn.ReLU()))
    blocks.append(nn.Linear(fc, num_classes))
    return blocks


def _seed_from(generator: torch.Generator | None) -> int:
    if generator is None:
        return 0
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *,
                hidden: int | tuple[int, ...] | None = None, width: float = 1.0,
                seed_generator: torch.Generator | None = None) -> BlockModel:
    """Build model ``name`` (one of :data:`MODELS` or :data:`REGRESSION_MODELS`) for inputs of
    ``input_shape`` and ``num_classes`` outputs (1 for a regression task).

    ``hidden``: the MLP's hidden sizes (default (128,)) or the CNN's fully connected size (default 64);
    ``width``: multiplies every hidden size and channel count (not inputs or outputs), for sub-models.
    The weights depend only on one 62-bit seed drawn from ``seed_generator`` (seed 0 when it is None).
    """
    input_shape = tuple(int(s) for s in input_shape)
    if name not in MODELS + REGRESSION_MODELS:
        raise ConfigError("model.name", f"unknown model '{name}' (allowed: {', '.join(MODELS + REGRESSION_MODELS)})")
    if not width > 0:
        raise ConfigError("model.width", f"must be > 0, got {width!r}")
    if num_classes < 1:
        raise ConfigError("model", f"num_classes must be >= 1, got {num_classes}")
    seed = _seed_from(seed_generator)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "logreg":
            blocks = _logreg(input_shape, num_classes)
            hid: tuple[int, ...] = ()
        elif name == "linear":
            blocks = _linear(input_shape, num_classes)
            hid = ()
        elif name == "mlp":
            hid = _as_tuple(hidden, (128,))
            blocks = _mlp(input_shape, num_classes, hid, width)
        elif name == "cnn":
            hid = _as_tuple(hidden, (64,))
            blocks = _cnn(input_shape, num_classes, hid, width)
        elif name == "femnist_cnn":
            hid = _as_tuple(hidden, (2048,))
            blocks = _femnist_cnn(input_shape, num_classes, hid, width)
        else:
            hid = ()
            blocks = _alexnet_cifar(input_shape, num_classes, width)
    return BlockModel(blocks, arch=(name, input_shape, int(num_classes), hid, float(width), 0, len(blocks)))


def split_model(model: BlockModel, cut: int) -> tuple[BlockModel, BlockModel]:
    """Client part ``blocks[:cut]`` and server part ``blocks[cut:]``, sharing the very same modules."""
    n = model.num_blocks()
    if not isinstance(cut, int) or not 0 < cut < n:
        raise ConfigError("model.cut", f"cut must be an integer in 1..{n - 1} for a model of {n} blocks, got {cut!r}")

    def part(a: int, b: int) -> BlockModel:
        arch = None if model.arch is None else (*model.arch[:-2], model.arch[-2] + a, model.arch[-2] + b)
        return BlockModel(list(model.blocks[a:b]), arch=arch)

    return part(0, cut), part(cut, n)
