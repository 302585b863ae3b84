"""The first standard normal of many named streams at once, bit for bit what numpy draws one at a time.

A named stream (:class:`fedsim.sim.rng.Streams`) is ``Generator(PCG64(SeedSequence(seed, spawn_key)))``.
Seeding one costs about 10 µs (the ``SeedSequence`` hash, the PCG64 set-up, a ``Generator``), which is
most of a systems-only client task when each task draws its compute-time jitter from its own stream.
This module runs the same three steps as arrays over many streams:

- ``SeedSequence``'s entropy mixing and ``generate_state`` (O'Neill's ``seed_seq`` hash, as numpy's
  ``bit_generator.pyx`` writes it: 32-bit multiply-xorshift with running constants that do not depend on
  the data, so every stream takes the same steps);
- PCG64's seeding and first output (the 128-bit LCG ``state * M + inc`` in two 64-bit halves, XSL-RR
  output);
- the fast path of numpy's 256-layer ziggurat for ``standard_normal`` (an 8-bit layer, a sign bit and a
  52-bit magnitude accepted below the layer's threshold, about 99% of draws).

The ziggurat's tables are numpy's own, read out of numpy at first use by feeding its ``Generator``
chosen outputs (a PCG64 state whose next output is a given 64-bit word): a layer's width is the draw of
magnitude 1, its threshold the first magnitude whose draw takes a second output (searched near where
Marsaglia and Tsang's construction puts it, about 1,000 draws in all).  Draws that miss the fast
path (and any layer that could not be read) are redrawn one at a time from the stream itself.  At first
use the whole path is checked against numpy on a few hundred streams; if anything differs (a numpy
whose generator works otherwise), :func:`first_normals` returns ``None`` and callers draw one at a time.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

_M32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint32

# numpy/random/bit_generator.pyx
_POOL = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = _U32(0xCA01F9DD), _U32(0x4973F715)
# PCG64's default 128-bit multiplier (pcg64.h), in 64-bit halves
_MUL_HI, _MUL_LO = np.uint64(0x2360ED051FC65DA4), np.uint64(0x4385DF649FCCF645)
_MUL = (int(_MUL_HI) << 64) | int(_MUL_LO)
_MUL_INV = pow(_MUL, -1, 2**128)


def _words(n: int) -> list[int]:
    """An integer as numpy's ``SeedSequence`` reads it: 32-bit words, least significant first, ``[0]`` for 0."""
    if n == 0:
        return [0]
    out = []
    while n:
        out.append(n & 0xFFFFFFFF)
        n >>= 32
    return out


def _hash_consts(count: int, init: int, mult: int) -> list[tuple[np.uint32, np.uint32]]:
    """The running multiplier before and after each of ``count`` hash steps (they never depend on the data)."""
    out, h = [], init
    for _ in range(count):
        h_next = (h * mult) & 0xFFFFFFFF
        out.append((_U32(h), _U32(h_next)))
        h = h_next
    return out


def seed_states(seed: int, spawn_keys: np.ndarray) -> np.ndarray:
    """``SeedSequence(entropy=seed, spawn_key=k).generate_state(4, np.uint64)`` for each row ``k`` of
    ``spawn_keys`` (``uint32``, one word per key element, each below 2**32): a ``(m, 4)`` uint64 array."""
    keys = np.asarray(spawn_keys, dtype=np.uint32)
    m = len(keys)
    run = _words(int(seed))
    if keys.shape[1] > 0 and len(run) < _POOL:
        run = run + [0] * (_POOL - len(run))
    entropy = [np.full(m, w, dtype=np.uint32) for w in run] + [keys[:, i] for i in range(keys.shape[1])]
    steps = _POOL + _POOL * (_POOL - 1) + max(0, len(entropy) - _POOL) * _POOL
    consts = iter(_hash_consts(steps, _INIT_A, _MULT_A))
    shift = _U32(16)

    def hashmix(value: np.ndarray) -> np.ndarray:
        h, h_next = next(consts)
        v = (value ^ h) * h_next
        return v ^ (v >> shift)

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = _MIX_L * x - _MIX_R * y
        return r ^ (r >> shift)

    zero = np.zeros(m, dtype=np.uint32)
    with np.errstate(over="ignore"):
        pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(_POOL)]
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        for src in range(_POOL, len(entropy)):
            for dst in range(_POOL):
                pool[dst] = mix(pool[dst], hashmix(entropy[src]))
        words = []
        for i, (h, h_next) in enumerate(_hash_consts(8, _INIT_B, _MULT_B)):
            v = (pool[i % _POOL] ^ h) * h_next
            words.append((v ^ (v >> shift)).astype(np.uint64))
    return np.stack([words[2 * i] | (words[2 * i + 1] << np.uint64(32)) for i in range(4)], axis=1)


def _mul64(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The full 128-bit product of two uint64 arrays, as (high, low) halves."""
    s32 = np.uint64(32)
    a0, a1, b0, b1 = a & _M32, a >> s32, b & _M32, b >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & _M32) + (p10 & _M32)
    return p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32), (p00 & _M32) | (mid << s32)


def _step(hi: np.ndarray, lo: np.ndarray, inc_hi: np.ndarray, inc_lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One PCG64 step, ``state * M + inc`` mod 2**128."""
    p_hi, p_lo = _mul64(lo, np.broadcast_to(_MUL_LO, lo.shape))
    p_hi = p_hi + lo * _MUL_HI + hi * _MUL_LO
    new_lo = p_lo + inc_lo
    return p_hi + inc_hi + (new_lo < p_lo).astype(np.uint64), new_lo


def first_outputs(states: np.ndarray) -> np.ndarray:
    """The first 64-bit output of ``PCG64`` seeded with each row of :func:`seed_states`."""
    s_hi, s_lo, i_hi, i_lo = (states[:, k].copy() for k in range(4))
    one = np.uint64(1)
    with np.errstate(over="ignore"):
        inc_hi = (i_hi << one) | (i_lo >> np.uint64(63))
        inc_lo = (i_lo << one) | one
        # pcg64_srandom_r: state = 0; step; state += seed; step.  Then the output step.
        hi, lo = inc_hi, inc_lo
        lo2 = lo + s_lo
        hi, lo = hi + s_hi + (lo2 < lo).astype(np.uint64), lo2
        hi, lo = _step(hi, lo, inc_hi, inc_lo)
        hi, lo = _step(hi, lo, inc_hi, inc_lo)
        x = hi ^ lo
        rot = hi >> np.uint64(58)
        return (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))


def _state_before(output: int, inc: int = 1) -> dict:
    """A PCG64 state (for ``bit_generator.state``) whose next output is ``output``: the state after the
    step is ``output`` itself (no rotation, high half zero), stepped back once."""
    after = output & (2**64 - 1)
    before = ((after - inc) * _MUL_INV) % 2**128
    return {"bit_generator": "PCG64", "state": {"state": before, "inc": inc}, "has_uint32": 0, "uinteger": 0}


@functools.cache
def _ziggurat() -> tuple[np.ndarray, np.ndarray] | None:
    """numpy's layer widths ``wi`` and thresholds ``ki`` (0 where a layer could not be read), or ``None``."""
    bg = np.random.PCG64(0)
    gen = np.random.Generator(bg)

    def draw(idx: int, rabs: int) -> tuple[float, bool]:
        word = idx | (rabs << 9)  # layer in bits 0-7, sign bit 8 clear, magnitude from bit 9
        bg.state = _state_before(word)
        x = gen.standard_normal()
        return x, bg.state["state"]["state"] == word  # one output taken: the fast path accepted it

    wi, ki = np.zeros(256), np.zeros(256, dtype=np.uint64)
    for idx in range(256):
        x, fast = draw(idx, 1)
        if not fast or not x > 0:
            continue
        lo, hi = 1, 1 << 52  # accepted at lo; hi is past the largest magnitude
        if idx >= 2 and wi[idx - 1] > 0:  # the threshold is within a unit of 2**52 x_(i-1) / x_i: check there
            guess = int(round(float(wi[idx - 1]) / x * 2.0**52))
            if 1 < guess - 2 and guess + 2 < hi and draw(idx, guess - 2)[1] and not draw(idx, guess + 2)[1]:
                lo, hi = guess - 2, guess + 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if draw(idx, mid)[1]:
                lo = mid
            else:
                hi = mid
        wi[idx], ki[idx] = x, hi
    return wi, ki


def _fast_normals(seed: int, spawn_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fast-path draws and which of them were accepted (the others must be drawn one at a time)."""
    wi, ki = _ziggurat()  # type: ignore[misc]
    r = first_outputs(seed_states(seed, spawn_keys))
    idx = (r & np.uint64(0xFF)).astype(np.intp)
    r = r >> np.uint64(8)
    negative = (r & np.uint64(1)).astype(bool)
    rabs = (r >> np.uint64(1)) & np.uint64(0x000FFFFFFFFFFFFF)
    x = rabs.astype(np.float64) * wi[idx]
    x[negative] = -x[negative]
    return x, rabs < ki[idx]


@functools.cache
def _works(seed: int) -> bool:
    """The fast path against numpy itself on 400 streams (tables read, every step bit for bit)."""
    if _ziggurat() is None:
        return False
    rng = np.random.default_rng(12345)
    keys = rng.integers(0, 2**32, size=(400, 4), dtype=np.uint64).astype(np.uint32)
    keys[:5] = [[0, 0, 0, 0], [1, 0, 0, 0], [2**32 - 1] * 4, [0, 2**32 - 1, 0, 1], [7, 7, 7, 7]]
    x, ok = _fast_normals(seed, keys)
    for k, xv, good in zip(keys.tolist(), x.tolist(), ok.tolist()):
        g = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=tuple(k))))
        if good and g.standard_normal() != xv:
            return False
    return bool(ok.mean() > 0.9)


def first_normals(seed: int, spawn_keys: Sequence[Sequence[int]] | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """For each row ``k`` of ``spawn_keys``, the first ``standard_normal()`` of
    ``Generator(PCG64(SeedSequence(seed, spawn_key=k)))`` where the ziggurat's fast path gives it, and a
    mask of those rows; the caller draws the rest one at a time.  ``None`` when this numpy's generator
    cannot be reproduced (then draw every row one at a time)."""
    if not _works(int(seed)):
        return None
    keys = np.asarray(spawn_keys, dtype=np.uint64).reshape(len(spawn_keys), -1)
    if len(keys) == 0:
        return np.zeros(0), np.zeros(0, dtype=bool)
    if (keys >= 2**32).any():
        raise ValueError("spawn key words must be below 2**32")
    return _fast_normals(int(seed), keys.astype(np.uint32))
