"""Named random streams derived from one root seed.

Every random draw in fedsim comes from a stream named by a path such as ``("client", 7, "batches")``.
A stream's seed depends only on the root seed and its own name (hashed), never on the order in which
streams are created, so adding a client or a new kind of event never shifts any other stream.

Two kinds of stream:

- :meth:`Streams.numpy` / :meth:`Streams.torch` / :meth:`Streams.int_seed`: a generator seeded from
  ``SeedSequence(seed, spawn_key=SHA-256(name))``, for draws taken in sequence (a client's batches, its
  fading, the partition).  Seeding one costs about 10 µs.
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
        key = int(self.seed_sequence("counter", *name).generate_state(1, dtype=np.uint64)[0])
        return CounterStreams(key, tuple(name))

    def int_seed(self, *name: Hashable) -> int:
        """A 63-bit integer seed for stream ``name`` (for libraries that take an int)."""
        return int(self.seed_sequence(*name).generate_state(1, dtype=np.uint64)[0]) & (2**63 - 1)

    def torch(self, *name: Hashable) -> "torch.Generator":
        """A CPU torch.Generator for stream ``name``."""
        import torch

        g = torch.Generator()
        g.manual_seed(self.int_seed(*name))
        return g
