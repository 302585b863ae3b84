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
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import fedsim.components as components
from fedsim.errors import ConfigError

__all__ = ["BlockModel", "WidthGroup", "block_of", "MODELS", "REGRESSION_MODELS", "BN_MODES", "FRAGMENT_RATIOS", "build_model",
           "split_model", "scaled", "residual_add"]

#: BatchNorm modes of the models that have BatchNorm (``resnet20``): ``static`` is HeteroFL's static BN
#: (sBN: no running statistics at all, every forward normalises with the statistics of its own batch, in
#: training and at evaluation); ``global`` keeps running statistics that are sliced and averaged with the
#: channels they belong to, like weights (EmbracingFL's "Global BN").
BN_MODES: tuple[str, ...] = ("static", "global")
#: Fed-RAA's Table 4 partition presets (torch-free, so configs can be checked without torch)
from fedsim.learn.choices import FRAGMENT_RATIOS, MODELS, REGRESSION_MODELS  # noqa: E402


@dataclass(frozen=True)
class WidthGroup:
    """Units that a sub-model keeps or drops together.

    ``size`` units; ``members`` are ``(state_dict key, dim)`` pairs sliced together: a layer's output
    dimension and the next layer's input dimension, every tensor on a residual stream, or the q/k/v rows
    and the projection's input columns of attention heads.  Along a member's ``dim`` each unit owns
    ``shape[dim] // size`` consecutive entries: 1 for a neuron or channel, ``head_dim`` for a head, the
    spatial size for a conv channel entering a linear layer through a channel-major flatten.  ``unit`` is
    that count for the group's own (producing) layer, for reference: ``head_dim`` for heads, else 1.
    """

    name: str
    size: int
    unit: int
    members: tuple[tuple[str, int], ...]


_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.")


def block_of(key: str) -> int:
    """The block a ``blocks.<i>.…`` state-dict key of a :class:`BlockModel` belongs to."""
    m = _BLOCK_KEY.match(key)
    if m is None:
        raise ConfigError("state", f"key {key!r} is not inside a block (expected 'blocks.<i>.…')")
    return int(m.group(1))


class BlockModel(nn.Module):
    """An ordered list of blocks; later work cuts it (split point) or slices it (width)."""

    def __init__(self, blocks: Sequence[nn.Module], *, arch: tuple | None = None,
                 groups: Mapping[str, WidthGroup] | None = None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        #: Hashable description of the architecture (name, input shape, classes, hidden, width, [options,]
        #: block range); equal for models that differ only in weights.  Used as a cache key for cost probes.
        self.arch = arch
        self._groups: dict[str, WidthGroup] = dict(groups or {})

    def width_groups(self) -> dict[str, WidthGroup]:
        """The units a sub-model can keep or drop, by group name (empty: the model has no width to cut)."""
        return dict(self._groups)

    def forward(self, x: torch.Tensor, start: int = 0, end: int | None = None) -> torch.Tensor:
        # the whole model iterates the blocks themselves: slicing a ModuleList builds a new Module every call
        for block in (self.blocks if start == 0 and end is None else self.blocks[start:end]):
            x = block(x)
        return x

    def num_blocks(self) -> int:
        return len(self.blocks)


#: Channel and unit counts of the built-in models at width 1 (``model.width`` scales each of them).
CNN_CHANNELS = (16, 32)
FEMNIST_CHANNELS = (32, 64)
ALEXNET_SIZES = (32, 64, 128, 256, 256, 1024, 512)  # five conv layers, then two dense layers
RESNET_CHANNELS = (16, 32, 64)


def scaled(n: int, width: float) -> int:
    """A layer size scaled by ``width`` (HeteroFL/FjORD style): ceil(n * width), at least 1."""
    return max(1, int(math.ceil(n * width - 1e-9)))


#: Largest tensors (bytes) of the blocks before a flatten that :func:`_flat_size` copies to the CPU for its dry
#: run when they are meta tensors (the size check's first build); larger ones run on meta.
DRY_RUN_CPU_BYTES = 64 * 2**20


def _cpu_twin(block: nn.Module) -> nn.Module:
    """A copy of ``block`` holding CPU zeros of its tensors' shapes and dtypes (made directly: ``to_empty`` and
    ``clone`` of meta tensors go through the Python reference ops, which import sympy and the compiler stack)."""
    import copy

    memo: dict[int, Any] = {id(t): t for t in (*block.parameters(), *block.buffers())}  # shared, not copied
    twin = copy.deepcopy(block, memo)
    for mod in twin.modules():
        for name, t in list(mod._parameters.items()):
            if t is not None:
                mod._parameters[name] = nn.Parameter(torch.zeros(t.shape, dtype=t.dtype, device="cpu"),
                                                     requires_grad=False)
        for name, t in list(mod._buffers.items()):
            if t is not None:
                mod._buffers[name] = torch.zeros(t.shape, dtype=t.dtype, device="cpu")
    return twin


def _flat_size(blocks: Sequence[nn.Module], input_shape: tuple[int, ...]) -> int:
    """Features per sample after running ``blocks`` on an input of ``input_shape`` (a dry run on zeros).

    Blocks of meta tensors (the size check builds every model on meta first) are run as an uninitialised CPU
    copy when they are small, as the blocks before a flatten are: PyTorch runs most ops on meta tensors
    through its Python reference implementations, whose first use imports its compiler stack
    (``torch._dynamo``, 1-2 s of CPU in a fresh process, every ``fedsim run`` of a CNN).  The shape is the
    same either way."""
    param = next((p for blk in blocks for p in blk.parameters()), None)
    device = None if param is None else param.device
    if param is not None and param.is_meta:
        held = sum(t.numel() * t.element_size() for blk in blocks for t in (*blk.parameters(), *blk.buffers()))
        if held <= DRY_RUN_CPU_BYTES:
            blocks = [_cpu_twin(b) for b in blocks]
            device = torch.device("cpu")
    with torch.no_grad():
        x = torch.zeros(1, *input_shape, device=device)
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
    c1, c2 = (scaled(c, width) for c in CNN_CHANNELS)
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
    c = [scaled(v, width) for v in ALEXNET_SIZES[:5]]
    f1, f2 = (scaled(v, width) for v in ALEXNET_SIZES[5:])
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
    c1, c2 = (scaled(c, width) for c in FEMNIST_CHANNELS)
    fc = scaled(hidden[0], width)
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


def residual_add(out: torch.Tensor, skip: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """``out + skip``; when a sub-model left them with different widths along ``dim``, the narrower one is
    zero-padded at the end first (its units are taken to be the first ones of the wider).

    The built-in models tie every tensor on a residual stream into one width group, so their sub-models
    never need the padding; it keeps a hand-made sub-model (or a model whose groups are not tied) running.
    """
    a, b = out.shape[dim], skip.shape[dim]
    if a == b:
        return out + skip
    pad = [0, 0] * (out.dim() - 1 - (dim % out.dim())) + [0, abs(a - b)]
    if a < b:
        return F.pad(out, pad) + skip
    return out + F.pad(skip, pad)


def _params_of(prefix: str, keys: set[str], names: Sequence[str], dim: int) -> list[tuple[str, int]]:
    return [(f"{prefix}.{n}", dim) for n in names if f"{prefix}.{n}" in keys]


_OUT = ("weight", "bias", "running_mean", "running_var")


def _chain_groups(blocks: Sequence[nn.Module], layers: Sequence[str], names: Sequence[str]) -> dict[str, WidthGroup]:
    """Width groups of a plain chain of linear/conv layers (``layers``: their state-dict prefixes in forward
    order): group k ties layer k's output units (weight rows, bias) to layer k+1's inputs (weight dim 1)."""
    sd = BlockModel(blocks).state_dict()
    keys = set(sd)
    groups: dict[str, WidthGroup] = {}
    for k, name in enumerate(names):
        size = int(sd[f"{layers[k]}.weight"].shape[0])
        members = _params_of(layers[k], keys, ("weight", "bias"), 0) + [(f"{layers[k + 1]}.weight", 1)]
        groups[name] = WidthGroup(name, size, 1, tuple(members))
    return groups


def _bn(c: int, bn: str) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c, track_running_stats=(bn == "global"))


class _Stem(nn.Module):
    def __init__(self, cin: int, cout: int, bn: str) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = _bn(cout, bn)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class _BasicBlock(nn.Module):
    """He et al.'s basic block: conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU.  The shortcut is
    the identity, or a 1x1 conv + BN projection where the stride or the channel count changes."""

    def __init__(self, cin: int, cout: int, stride: int, bn: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _bn(cout, bn)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = _bn(cout, bn)
        self.shortcut: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), _bn(cout, bn))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(residual_add(out, skip))


class _PoolHead(nn.Module):
    def __init__(self, cin: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _resnet(input_shape: tuple[int, ...], num_classes: int, depth: int, width: float,
            bn: str) -> tuple[list[nn.Module], dict[str, WidthGroup]]:
    """CIFAR ResNet (He et al. 2016, §4.2): conv3x3(->16)+BN+ReLU, three stages of n basic blocks with
    16/32/64 channels (stride 2 at the start of stages 2 and 3, with 1x1-conv + BN projection shortcuts),
    global average pool, FC.  depth = 6n + 2 (20 -> n = 3: 19 convs + FC, 272,474 parameters with
    ``bn='static'``).  Blocks: the stem, each basic block, the head (so 3n + 2 blocks).

    Width groups: ``stage{s}`` is the residual stream of stage s (the stem or the projection that opens
    the stage, every block's second conv and BN, and the inputs of every conv reading the stream), tied
    so that every residual add has matching channels; ``b{i}.mid`` is block i's inner channels.
    """
    if len(input_shape) != 3:
        raise ConfigError("model.name", f"'resnet20' needs an image input (C, H, W), got {input_shape}")
    if depth < 8 or (depth - 2) % 6 != 0:
        raise ConfigError("model.depth", f"a CIFAR ResNet has depth 6n + 2 (8, 14, 20, 32, 44, 56, ...), got {depth!r}")
    n = (depth - 2) // 6
    chans = [scaled(c, width) for c in RESNET_CHANNELS]
    blocks: list[nn.Module] = [_Stem(input_shape[0], chans[0], bn)]
    stage_of: list[int] = []
    cin = chans[0]
    for s, c in enumerate(chans):
        for j in range(n):
            blocks.append(_BasicBlock(cin, c, 2 if (s > 0 and j == 0) else 1, bn))
            stage_of.append(s)
            cin = c
    blocks.append(_PoolHead(cin, num_classes))
    keys = set(BlockModel(blocks).state_dict())
    last = len(blocks) - 1
    stream: list[list[tuple[str, int]]] = [[] for _ in chans]
    stream[0] += [("blocks.0.conv.weight", 0)] + _params_of("blocks.0.bn", keys, _OUT, 0)
    groups: dict[str, WidthGroup] = {}
    for i in range(1, last):
        s = stage_of[i - 1]
        p = f"blocks.{i}"
        src = s if blocks[i].shortcut is None else s - 1  # the stream this block reads
        stream[src].append((f"{p}.conv1.weight", 1))
        stream[s] += [(f"{p}.conv2.weight", 0)] + _params_of(f"{p}.bn2", keys, _OUT, 0)
        if blocks[i].shortcut is not None:
            stream[src].append((f"{p}.shortcut.0.weight", 1))
            stream[s] += [(f"{p}.shortcut.0.weight", 0)] + _params_of(f"{p}.shortcut.1", keys, _OUT, 0)
        mid = [(f"{p}.conv1.weight", 0)] + _params_of(f"{p}.bn1", keys, _OUT, 0) + [(f"{p}.conv2.weight", 1)]
        groups[f"b{i}.mid"] = WidthGroup(f"b{i}.mid", chans[s], 1, tuple(mid))
    stream[-1].append((f"blocks.{last}.fc.weight", 1))
    for s, c in enumerate(chans):
        groups[f"stage{s + 1}"] = WidthGroup(f"stage{s + 1}", c, 1, tuple(stream[s]))
    return blocks, groups


class _PatchEmbed(nn.Module):
    """Non-overlapping patches -> linear embedding (a conv with stride = kernel = patch), a class token in
    front, learned position embeddings added."""

    def __init__(self, cin: int, dim: int, patch: int, num_patches: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cin, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.pos_embed, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos_embed


class _Attention(nn.Module):
    """Multi-head self-attention with separate q, k, v projections, so that a head (``head_dim`` rows of
    each, ``head_dim`` input columns of ``proj``) is a contiguous unit a sub-model keeps or drops whole.
    The number of heads is read from the weights, so a sliced copy runs with the heads it kept."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.q = nn.Linear(dim, heads * head_dim)
        self.k = nn.Linear(dim, heads * head_dim)
        self.v = nn.Linear(dim, heads * head_dim)
        self.proj = nn.Linear(heads * head_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        h = self.q.weight.shape[0] // self.head_dim
        q, k, v = (lin(x).view(b, n, h, self.head_dim).transpose(1, 2) for lin in (self.q, self.k, self.v))
        att = torch.softmax((q @ k.transpose(-2, -1)) * self.head_dim ** -0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, h * self.head_dim))


class _EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: x + MSA(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, head_dim: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = _Attention(dim, heads, head_dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = residual_add(self.attn(self.ln1(x)), x, dim=-1)
        return residual_add(self.fc2(F.gelu(self.fc1(self.ln2(x)))), x, dim=-1)


class _ClsHead(nn.Module):
    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.ln(x[:, 0]))


VIT_OPTIONS: dict[str, Any] = {"embed_dim": 64, "heads": 8, "mlp_ratio": 4.0, "patch": 8}


def _vit(input_shape: tuple[int, ...], num_classes: int, depth: int, width: float,
         options: Mapping[str, Any]) -> tuple[list[nn.Module], dict[str, WidthGroup]]:
    """A small ViT: patch embedding + class token, ``depth`` pre-norm encoder blocks, LayerNorm + linear
    head on the class token.  One block each.  Defaults (depth 8, embed 64, 8 heads of 8, MLP 256, patch 8:
    16 patches of a 32x32 image) shrink Co-S²P's ViT-Tiny (depth 8, 512, 8 heads, MLP 2048, patch 16) to
    what two CPU cores train.  ``width`` scales the heads per block and the MLP size (head_dim and the
    embedding stay), like a width-w sub-model of the full one.

    Width groups: ``embed`` (every tensor on the residual stream), ``b{i}.heads`` (unit = head_dim: a head's
    q, k, v rows and proj columns) and ``b{i}.mlp`` (fc1 rows, fc2 columns) for encoder block i.
    """
    unknown = sorted(set(options) - set(VIT_OPTIONS))
    if unknown:
        raise ConfigError(f"model.options.{unknown[0]}", f"unknown option for 'vit' (allowed: {', '.join(VIT_OPTIONS)})")
    opts = {**VIT_OPTIONS, **options}
    dim, heads, patch, ratio = int(opts["embed_dim"]), int(opts["heads"]), int(opts["patch"]), float(opts["mlp_ratio"])
    if len(input_shape) != 3:
        raise ConfigError("model.name", f"'vit' needs an image input (C, H, W), got {input_shape}")
    if heads < 1 or dim < 1 or dim % heads:
        raise ConfigError("model.options.heads", f"embed_dim {dim} must be a positive multiple of heads {heads}")
    if patch < 1 or input_shape[1] % patch or input_shape[2] % patch:
        raise ConfigError("model.options.patch", f"must divide the image size {input_shape[1]}x{input_shape[2]}, got {patch}")
    if not ratio > 0:
        raise ConfigError("model.options.mlp_ratio", f"must be > 0, got {ratio!r}")
    if depth < 1:
        raise ConfigError("model.depth", f"must be >= 1, got {depth!r}")
    head_dim = dim // heads
    h, m = scaled(heads, width), scaled(int(round(dim * ratio)), width)
    n_patches = (input_shape[1] // patch) * (input_shape[2] // patch)
    blocks: list[nn.Module] = [_PatchEmbed(input_shape[0], dim, patch, n_patches)]
    blocks += [_EncoderBlock(dim, h, head_dim, m) for _ in range(depth)]
    blocks.append(_ClsHead(dim, num_classes))
    embed: list[tuple[str, int]] = [("blocks.0.proj.weight", 0), ("blocks.0.proj.bias", 0),
                                    ("blocks.0.cls_token", 2), ("blocks.0.pos_embed", 2)]
    groups: dict[str, WidthGroup] = {}
    for i in range(1, depth + 1):
        p = f"blocks.{i}"
        embed += [(f"{p}.ln1.weight", 0), (f"{p}.ln1.bias", 0), (f"{p}.attn.q.weight", 1), (f"{p}.attn.k.weight", 1),
                  (f"{p}.attn.v.weight", 1), (f"{p}.attn.proj.weight", 0), (f"{p}.attn.proj.bias", 0),
                  (f"{p}.ln2.weight", 0), (f"{p}.ln2.bias", 0), (f"{p}.fc1.weight", 1), (f"{p}.fc2.weight", 0),
                  (f"{p}.fc2.bias", 0)]
        att = [(f"{p}.attn.{n}.{t}", 0) for n in ("q", "k", "v") for t in ("weight", "bias")]
        groups[f"b{i}.heads"] = WidthGroup(f"b{i}.heads", h, head_dim, tuple(att + [(f"{p}.attn.proj.weight", 1)]))
        groups[f"b{i}.mlp"] = WidthGroup(f"b{i}.mlp", m, 1, ((f"{p}.fc1.weight", 0), (f"{p}.fc1.bias", 0),
                                                              (f"{p}.fc2.weight", 1)))
    last = depth + 1
    embed += [(f"blocks.{last}.ln.weight", 0), (f"blocks.{last}.ln.bias", 0), (f"blocks.{last}.fc.weight", 1)]
    groups = {"embed": WidthGroup("embed", dim, 1, tuple(embed)), **groups}
    return blocks, groups


def _seed_from(generator: torch.Generator | None) -> int:
    if generator is None:
        return 0
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())


def _mlp_groups(blocks: Sequence[nn.Module], n_hidden: int) -> dict[str, WidthGroup]:
    """``hidden.k``: the k-th hidden layer's neurons (its rows and bias, the next layer's columns)."""
    layers = [f"blocks.{i}.{1 if i == 0 else 0}" for i in range(n_hidden)]
    layers.append(f"blocks.{n_hidden}.{1 if n_hidden == 0 else 0}")
    return _chain_groups(blocks, layers, [f"hidden.{k}" for k in range(n_hidden)])


def _options(name: str, options: Mapping[str, Any] | None, allowed: Sequence[str]) -> dict[str, Any]:
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(allowed))
    if unknown:
        raise ConfigError(f"model.options.{unknown[0]}",
                          f"unknown option for '{name}' (allowed: {', '.join(allowed) or 'none'})")
    return opts


def _width_sizes(name: str, hidden: int | tuple[int, ...] | None, opts: Mapping[str, Any]) -> tuple[int, ...]:
    """The layer sizes (units, channels, heads) that ``model.width`` scales in built-in model ``name``, at
    width 1 (empty for a model without width: logreg, linear)."""
    if name in ("mlp", "fragment_mlp"):
        return _as_tuple(hidden, (128,) if name == "mlp" else (200,))
    if name == "cnn":
        return (*CNN_CHANNELS, *_as_tuple(hidden, (64,))[:1])
    if name == "femnist_cnn":
        return (*FEMNIST_CHANNELS, *_as_tuple(hidden, (2048,))[:1])
    if name == "alexnet_cifar":
        return ALEXNET_SIZES
    if name == "resnet20":
        return RESNET_CHANNELS
    if name == "vit":
        o = {**VIT_OPTIONS, **opts}
        try:
            return int(o["heads"]), int(round(int(o["embed_dim"]) * float(o["mlp_ratio"])))
        except (TypeError, ValueError):
            return ()  # a bad option is named by the ViT's own checks
    return ()


def _check_width(name: str, width: float, sizes: Sequence[int]) -> None:
    """Refuse a width at which a scaled layer would keep less than one unit: :func:`scaled` would round it
    up to one, so the model would not be the width asked for (``model.width=1e-9`` gives every layer one
    unit).  The smallest meaningful width is 1 / (the smallest scaled size): there the narrowest layer keeps
    exactly one unit."""
    sizes = [n for n in sizes if n >= 1]
    if not sizes:
        return
    smallest = min(sizes)
    if smallest * width < 1 - 1e-9:
        raise ConfigError("model.width", f"got {width!r}, which leaves a layer of '{name}' ({smallest} units at "
                          f"width 1) with {smallest * width:.3g} units (allowed: >= 1/{smallest} = "
                          f"{1 / smallest:.4g}, the smallest width at which every layer keeps one unit)")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *,
                hidden: int | tuple[int, ...] | None = None, width: float = 1.0, depth: int | None = None,
                bn: str = "static", options: Mapping[str, Any] | None = None,
                seed_generator: torch.Generator | None = None, base_dirs: tuple = ()) -> BlockModel:
    """Build model ``name`` (one of :data:`MODELS` or :data:`REGRESSION_MODELS`) for inputs of
    ``input_shape`` and ``num_classes`` outputs (1 for a regression task).

    ``hidden``: the MLP's hidden sizes (default (128,); ``fragment_mlp``: (200,)) or the CNN's fully
    connected size (default 64); ``width``: multiplies every hidden size and channel count (not inputs or
    outputs); ``depth``: ``resnet20``'s depth 6n+2 (default 20) or the ViT's number of encoder blocks
    (default 8); ``bn``: ``resnet20``'s BatchNorm mode (:data:`BN_MODES`); ``options``: the ViT's
    ``embed_dim``, ``heads``, ``mlp_ratio``, ``patch``, or ``fragment_mlp``'s ``partitions`` (2..5, the
    Fed-RAA Table 4 split; default 3).  The model declares its width groups (:meth:`BlockModel.width_groups`).
    The weights depend only on one 62-bit seed drawn from ``seed_generator`` (seed 0 when it is None).

    Any other ``name`` is a model factory (:func:`user_model`): ``module:function`` (imported from
    ``base_dirs``, the working directory, then ``sys.path``), a name an installed package registers under the
    ``fedsim.models`` entry point, or the function itself.
    """
    input_shape = tuple(int(s) for s in input_shape)
    if name not in MODELS + REGRESSION_MODELS:
        factory = components.find("model", name, "model.name", base_dirs)
        if factory is None:
            known = ", ".join(MODELS + REGRESSION_MODELS + tuple(sorted(components.installed("model"))))
            raise ConfigError("model.name", f"unknown model '{name}' (allowed: {known}; or module:function for your own)")
        return user_model(factory, str(name), input_shape, num_classes, hidden=hidden, width=width, depth=depth,
                          options=options, seed_generator=seed_generator)
    if not width > 0:
        raise ConfigError("model.width", f"must be > 0, got {width!r}")
    if num_classes < 1:
        raise ConfigError("model", f"num_classes must be >= 1, got {num_classes}")
    if bn not in BN_MODES:
        raise ConfigError("model.bn", f"unknown BatchNorm mode {bn!r} (allowed: {', '.join(BN_MODES)})")
    allowed = {"vit": tuple(VIT_OPTIONS), "fragment_mlp": ("partitions",)}.get(name, ())
    opts = _options(name, options, allowed)
    if depth is not None and name not in ("resnet20", "vit"):
        raise ConfigError("model.depth", f"model '{name}' has no depth knob (only resnet20 and vit)")
    _check_width(name, width, _width_sizes(name, hidden, opts))
    seed = _seed_from(seed_generator)
    extra: tuple = ()
    groups: dict[str, WidthGroup] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "logreg":
            blocks = _logreg(input_shape, num_classes)
            hid: tuple[int, ...] = ()
        elif name == "linear":
            blocks = _linear(input_shape, num_classes)
            hid = ()
        elif name in ("mlp", "fragment_mlp"):
            hid = _as_tuple(hidden, (128,) if name == "mlp" else (200,))
            blocks = _mlp(input_shape, num_classes, hid, width)
            groups = _mlp_groups(blocks, len(hid))
            if name == "fragment_mlp":
                parts = opts.get("partitions", 3)
                if parts not in FRAGMENT_RATIOS:
                    raise ConfigError("model.options.partitions", f"got {parts!r} (allowed: 2, 3, 4, 5; Fed-RAA Table 4)")
                extra = (("partitions", int(parts)),)
        elif name == "cnn":
            hid = _as_tuple(hidden, (64,))
            blocks = _cnn(input_shape, num_classes, hid, width)
            groups = _chain_groups(blocks, ["blocks.0.0", "blocks.1.0", "blocks.2.1", "blocks.3"], ["conv1", "conv2", "fc"])
        elif name == "femnist_cnn":
            hid = _as_tuple(hidden, (2048,))
            blocks = _femnist_cnn(input_shape, num_classes, hid, width)
            groups = _chain_groups(blocks, ["blocks.0.0", "blocks.1.0", "blocks.2.1", "blocks.3"], ["conv1", "conv2", "fc"])
        elif name == "alexnet_cifar":
            hid = ()
            blocks = _alexnet_cifar(input_shape, num_classes, width)
            layers = [f"blocks.{i}" for i in (0, 3, 6, 7, 8)] + ["blocks.11.1", "blocks.12", "blocks.13"]
            groups = _chain_groups(blocks, layers, ["conv1", "conv2", "conv3", "conv4", "conv5", "fc1", "fc2"])
        elif name == "resnet20":
            hid = ()
            d = 20 if depth is None else int(depth)
            blocks, groups = _resnet(input_shape, num_classes, d, width, bn)
            extra = (("depth", d), ("bn", bn))
        else:  # vit
            hid = ()
            d = 8 if depth is None else int(depth)
            blocks, groups = _vit(input_shape, num_classes, d, width, opts)
            extra = (("depth", d),) + tuple(sorted({**VIT_OPTIONS, **opts}.items()))
    arch = (name, input_shape, int(num_classes), hid, float(width), *((extra,) if extra else ()), 0, len(blocks))
    model = BlockModel(blocks, arch=arch, groups=groups)
    if name == "fragment_mlp":
        #: Fed-RAA: the neurons of these groups are cut into contiguous fragments with these shares.
        model.fragment_ratios = FRAGMENT_RATIOS[extra[0][1]]  # type: ignore[attr-defined]
        model.designated = tuple(groups)  # type: ignore[attr-defined]
    return model


def user_model(factory: Callable[..., Any], ref: str, input_shape: tuple[int, ...], num_classes: int, *,
               hidden: Any = None, width: float = 1.0, depth: int | None = None,
               options: Mapping[str, Any] | None = None, seed_generator: torch.Generator | None = None) -> BlockModel:
    """A model from a user's factory ``factory(input_shape, num_classes, **options)``.

    The factory returns an ``nn.Module`` (one block), a list of modules (the block list split learning cuts
    and sub-model algorithms window over), or a :class:`BlockModel` (which may declare width groups; a model
    without them is refused in one line by the algorithms that need them).  Its weights depend only on the
    run's model seed, as a built-in's do.  ``hidden``, ``width`` and ``depth`` are the built-ins' knobs: a
    factory takes its own through ``model.options``."""
    for knob, value, unset in (("hidden", hidden, None), ("width", width, 1.0), ("depth", depth, None)):
        if value != unset:
            raise ConfigError(f"model.{knob}", f"applies to the built-in models, not {ref!r}; give your factory its "
                              "settings under model.options")
    opts = dict(options or {})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed_from(seed_generator))
        made = components.call_factory(factory, "model.name", ref, tuple(input_shape), int(num_classes), **opts)
    if isinstance(made, BlockModel):
        model = made
    else:
        blocks = [made] if isinstance(made, nn.Module) else made
        if not isinstance(blocks, (list, tuple)) or not blocks or not all(isinstance(b, nn.Module) for b in blocks):
            raise ConfigError("model.name", f"{ref!r} returned {type(made).__name__}; a model factory returns an "
                              "nn.Module or a non-empty list of nn.Module blocks")
        model = BlockModel(list(blocks))
    frozen = tuple(sorted((str(k), repr(v)) for k, v in opts.items()))
    model.arch = (ref, tuple(input_shape), int(num_classes), frozen, 0, model.num_blocks())
    dev = next((t.device for t in model.parameters()), torch.device("cpu"))  # the CPU, or meta while probing
    if dev.type == "meta":  # a forward on meta tensors imports torch's compiler stack (~1 s); the real build checks
        return model
    try:
        with torch.no_grad():
            out = model.eval()(torch.zeros((2, *input_shape), device=dev))
    except Exception as exc:  # noqa: BLE001 - the user's module: one line
        raise ConfigError("model.name", f"{ref!r} does not run on inputs of shape {tuple(input_shape)}: "
                          f"{type(exc).__name__}: {exc}") from None
    finally:
        model.train()
    if out.ndim != 2 or out.shape[1] != num_classes:
        raise ConfigError("model.name", f"{ref!r} outputs shape {tuple(out.shape[1:])} per sample; the task needs "
                          f"({num_classes},)")
    return model


def split_model(model: BlockModel, cut: int) -> tuple[BlockModel, BlockModel]:
    """Client part ``blocks[:cut]`` and server part ``blocks[cut:]``, sharing the very same modules."""
    n = model.num_blocks()
    if not isinstance(cut, int) or not 0 < cut < n:
        raise ConfigError("model.cut", f"cut must be an integer in 1..{n - 1} for a model of {n} blocks, got {cut!r}")

    def part(a: int, b: int) -> BlockModel:
        arch = None if model.arch is None else (*model.arch[:-2], model.arch[-2] + a, model.arch[-2] + b)
        return BlockModel(list(model.blocks[a:b]), arch=arch)

    return part(0, cut), part(cut, n)
