"""Named random streams derived from one root seed.

Every random draw in fedsim comes from a stream named by a path such as ``("client", 7, "batches")``.
A stream's seed depends only on the root seed and its own name (hashed), never on the order in which
streams are created, so adding a client or a new kind of event never shifts any other stream.

Two kinds of stream:

- :meth:`Streams.numpy` / :meth:`Streams.torch` / :meth:`Streams.int_seed`: a generator seeded from
  ``SeedSequence(seed, spawn_key=SHA-256(name))``, for draws taken in sequence (a client's batches, its
  fading, the partition).  Seeding one costs about 10 µs; :meth:`Streams.int_seed` (a torch seed per
  task) computes the same first 64 bits of that SeedSequence in plain integer steps, a third of the cost.
- :meth:`Streams.counter`: a *family* of counter-based streams, for one draw per (member, counter) such as
  the compute-time jitter of client ``c``'s task ``n``.  The family's 64-bit key is derived once from
  (seed, name); member ``i``'s draw number ``n`` is a pure function of (key, i, n), computed by
  :func:`counter_normals`, which takes Python integers (one draw, about 1 µs) or numpy arrays (many
  draws, about 0.05 µs each) and runs the same operations on both.  The event engine draws one task at a
  time and the vector engine a round at once; their draws are equal by construction.

The counter-based construction is SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; Vigna's reference ``splitmix64.c``): member ``i``'s key is output ``i`` of
SplitMix64 seeded with the family key, and its draw ``n`` is output ``n`` of SplitMix64 seeded with the
member's key.  The 64-bit output becomes a uniform in (0, 1) from its top 52 bits, ``(k + 1/2) / 2**52``
(exact in float64), and a standard normal through the inverse normal CDF (``scipy.special.ndtri``).
"""
from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Any, Hashable, TypeVar

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment (the golden ratio in 64 bits)
_MUL1, _MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # its finaliser (Stafford's "Mix13")

Word = TypeVar("Word", int, np.ndarray)


def _name_key(name: tuple[Hashable, ...]) -> list[int]:
    text = "/".join(str(part) for part in name).encode()
    digest = hashlib.sha256(text).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def _mix(z: Word) -> Word:
    """SplitMix64's finaliser on a Python int below 2**64 or a uint64 array (which wraps by itself)."""
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK
    return z ^ (z >> 31)


def splitmix64(seed: Word, index: Word) -> Word:
    """Output number ``index`` (from 0) of SplitMix64 seeded with ``seed``: ``mix(seed + (index + 1) * gamma)``.

    Works elementwise on uint64 arrays and on Python ints alike, with the same operations: a counter-based
    generator, so any output is reached without the ones before it."""
    return _mix((seed + (index + 1) * _GAMMA) & _MASK)


def counter_normals(key: int, members: Word, counters: Word) -> "float | np.ndarray":
    """Draw number ``counters`` of member ``members`` of the counter-stream family with ``key``: standard
    normals, one per (member, counter) pair.

    Python ints give a float, uint64 arrays (broadcast together) give a float64 array; both run these same
    lines, so one draw equals the same draw taken in a batch, bit for bit: the integer steps are exact
    (``& mask`` wraps the Python ints as uint64 arithmetic wraps), ``(k + 0.5) * 2**-52`` is exact for a
    52-bit ``k``, and ``ndtri`` is one ufunc whether it gets one number or many."""
    many = isinstance(members, np.ndarray) or isinstance(counters, np.ndarray)
    if many:
        members = np.asarray(members, dtype=np.uint64)
        counters = np.asarray(counters, dtype=np.uint64)
        key = np.uint64(key)  # type: ignore[assignment]
    z = splitmix64(splitmix64(key, members), counters)
    u = ((z >> 12) + 0.5) * 2.0**-52  # in (0, 1): never 0 or 1, so every normal is finite (|z| < 8.3)
    out = _ndtri()(u)
    return out if many else float(out)


@functools.lru_cache(maxsize=1)
def _ndtri() -> Any:
    """scipy's inverse normal CDF (a compiled scalar loop: the same result for a value alone or in an
    array), imported at the first draw."""
    from scipy.special import ndtri

    return ndtri


# numpy's SeedSequence (numpy/random/bit_generator.pyx, O'Neill's seed_seq_fe), written out for one case:
# a root seed of at most four 32-bit words and a four-word spawn key, the first 64 bits of its state.
_M32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715


def _hash_consts(init: int, mult: int, n: int) -> tuple[tuple[int, int], ...]:
    """The (before, after) multiplier pairs of ``n`` successive hash steps from ``init``: they never depend
    on the data, only on how many steps came before."""
    out, h = [], init
    for _ in range(n):
        out.append((h, (h * mult) & _M32))
        h = out[-1][1]
    return tuple(out)


_STATE_CONSTS = _hash_consts(_INIT_B, _MULT_B, 2)


@functools.lru_cache(maxsize=16)
def _seed_pool(seed: int) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]] | None:
    """SeedSequence's pool after the root seed's words (zero-padded to the pool's four) are mixed in, and
    the hash constants the next 16 steps (a four-word spawn key) use; None for a seed of over 128 bits."""
    words = [seed & _M32]
    while seed >> 32 * len(words):
        words.append((seed >> 32 * len(words)) & _M32)
    if len(words) > 4:
        return None
    words += [0] * (4 - len(words))
    consts = iter(_hash_consts(_INIT_A, _MULT_A, 32))

    def hashmix(v: int) -> int:
        a, b = next(consts)
        v = ((v ^ a) * b) & _M32
        return v ^ (v >> 16)

    def mix(x: int, y: int) -> int:
        r = (_MIX_L * x - _MIX_R * y) & _M32
        return r ^ (r >> 16)

    pool = [hashmix(w) for w in words]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    return tuple(pool), tuple(consts)


def _state64(seed: int, key: list[int]) -> int:
    """``int(SeedSequence(seed, spawn_key=key).generate_state(1, np.uint64)[0])`` for a four-word ``key``,
    bit for bit, at about a third of its cost (the per-task torch seed is drawn once per task)."""
    ready = _seed_pool(seed)
    if ready is None:
        return int(np.random.SeedSequence(entropy=seed, spawn_key=tuple(key)).generate_state(1, dtype=np.uint64)[0])
    pool, consts = ready
    p = list(pool)
    k = 0
    for w in key:  # each spawn word mixed into every pool word, in SeedSequence's order
        for dst in range(4):
            a, b = consts[k]
            k += 1
            v = ((w ^ a) * b) & _M32
            r = (_MIX_L * p[dst] - _MIX_R * (v ^ (v >> 16))) & _M32
            p[dst] = r ^ (r >> 16)
    (a0, b0), (a1, b1) = _STATE_CONSTS
    lo = ((p[0] ^ a0) * b0) & _M32
    hi = ((p[1] ^ a1) * b1) & _M32
    return (lo ^ (lo >> 16)) | ((hi ^ (hi >> 16)) << 32)


class CounterStreams:
    """A family of counter-based streams named ``name``: member ``i``'s ``n``-th draw, by itself or many at
    once, without seeding a generator per draw (see the module docstring)."""

    def __init__(self, key: int, name: tuple[Hashable, ...]) -> None:
        self.key = int(key)
        self.name = name

    def normal(self, member: int, counter: int) -> float:
        """The standard normal of member ``member``'s draw ``counter``."""
        return counter_normals(self.key, int(member), int(counter))  # type: ignore[return-value]

    def normals(self, members: np.ndarray, counters: np.ndarray) -> np.ndarray:
        """:meth:`normal` for many (member, counter) pairs at once, the same numbers."""
        return counter_normals(self.key, np.asarray(members, dtype=np.uint64),  # type: ignore[return-value]
                               np.asarray(counters, dtype=np.uint64))

    def __repr__(self) -> str:
        return f"CounterStreams({'/'.join(map(str, self.name))!r}, key={self.key:#018x})"


class Streams:
    """Factory of independent, reproducible RNG streams keyed by name."""

    def __init__(self, seed: int) -> None:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)

    def seed_sequence(self, *name: Hashable) -> np.random.SeedSequence:
        return np.random.SeedSequence(entropy=self.seed, spawn_key=tuple(_name_key(name)))

    def numpy(self, *name: Hashable) -> np.random.Generator:
        """A numpy Generator for stream ``name``; the same name always gives the same sequence."""
        return np.random.Generator(np.random.PCG64(self.seed_sequence(*name)))

    def counter(self, *name: Hashable) -> CounterStreams:
        """The family of counter-based streams ``name`` (e.g. ``("jitter",)``, one member per client): its key
        is derived here, once, from the root seed and the name; draws then cost no hashing."""
        return CounterStreams(_state64(self.seed, _name_key(("counter", *name))), tuple(name))

    def int_seed(self, *name: Hashable) -> int:
        """A 63-bit integer seed for stream ``name`` (for libraries that take an int)."""
        return _state64(self.seed, _name_key(name)) & (2**63 - 1)

    def torch(self, *name: Hashable) -> "torch.Generator":
        """A CPU torch.Generator for stream ``name``."""
        import torch

        g = torch.Generator()
        g.manual_seed(self.int_seed(*name))
        return g
