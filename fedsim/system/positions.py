"""Where clients are: static placements around a base station at the origin, and random-waypoint mobility.

Placements return an (n, 2) array of x, y in metres; ``distances`` turns them into 2-D distances.
Two ways of drawing "random clients in a cell" appear in FL papers and give different rate distributions:
area-uniform in an annulus (``annulus_uniform``: r = sqrt(U(r_min^2, r_max^2)), the paper wording
"uniformly distributed in the cell") and uniform in distance (``uniform_distance``: r ~ U(r_min, r_max),
what the GAS code does).  The second puts more clients near the base station.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedsim.errors import ConfigError
from fedsim.sim.rng import Streams


def _check_radii(r_min: float, r_max: float) -> None:
    if not (0 <= r_min <= r_max) or r_max <= 0:
        raise ConfigError("positions.radius", f"need 0 <= r_min <= r_max and r_max > 0, got ({r_min}, {r_max})")


def _polar(r: np.ndarray, theta: np.ndarray) -> np.ndarray:
    return np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)


def fixed(points) -> np.ndarray:
    """Fixed positions: a list of (x, y), or of distances (placed on the x axis)."""
    a = np.asarray(points, dtype=float)
    if a.ndim == 1:
        a = np.stack([a, np.zeros_like(a)], axis=1)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ConfigError("positions.points", f"expected a list of distances or of (x, y) pairs, got shape {a.shape}")
    return a


def annulus_uniform(n: int, r_min: float, r_max: float, rng: np.random.Generator) -> np.ndarray:
    """n points uniform over the area of the annulus r_min <= r <= r_max (density proportional to r)."""
    _check_radii(r_min, r_max)
    r = np.sqrt(rng.uniform(r_min**2, r_max**2, size=n))
    return _polar(r, rng.uniform(0, 2 * math.pi, size=n))


def uniform_distance(n: int, r_min: float, r_max: float, rng: np.random.Generator) -> np.ndarray:
    """n points with distance uniform in [r_min, r_max] and uniform angle (GAS code's placement)."""
    _check_radii(r_min, r_max)
    r = rng.uniform(r_min, r_max, size=n)
    return _polar(r, rng.uniform(0, 2 * math.pi, size=n))


def from_csv(path: str | Path) -> np.ndarray:
    """Positions from a CSV file with header ``x,y`` (optionally a ``client`` column giving the order)."""
    import io

    from fedsim.config import read_text

    p = Path(path)
    field = "channel.positions.path"
    reader = csv.DictReader(io.StringIO(read_text(p, field, "CSV file (x,y)"), newline=""))
    cols = set(reader.fieldnames or [])
    if not {"x", "y"} <= cols:
        raise ConfigError(field, f"{p.name}: needs columns x and y, found {str(sorted(cols))[:200]}")
    rows = []
    for i, row in enumerate(reader):
        try:
            rows.append((int(row["client"]) if "client" in cols else i, float(row["x"]), float(row["y"])))
        except (ValueError, TypeError):  # TypeError: a short row
            raise ConfigError(field, f"{p.name}: row {i + 2} is not numeric: {str(row)[:200]}") from None
        if not (math.isfinite(rows[-1][1]) and math.isfinite(rows[-1][2])):
            raise ConfigError(field, f"{p.name}: row {i + 2} has a non-finite coordinate: {str(row)[:200]} "
                              "(allowed: finite x, y in metres)")
    rows.sort()
    ids = [r[0] for r in rows]
    if ids != list(range(len(ids))):
        raise ConfigError(field, f"{p.name}: client ids must be 0..n-1 without gaps")
    return np.array([[r[1], r[2]] for r in rows], dtype=float).reshape(-1, 2)


def distances(points: np.ndarray, origin=(0.0, 0.0)) -> np.ndarray:
    """2-D distance of each point from the base station."""
    return np.hypot(points[:, 0] - origin[0], points[:, 1] - origin[1])


@dataclass
class RandomWaypoint:
    """Random-waypoint mobility in a disc of radius ``radius`` around the base station.

    Each client picks a destination uniform in the disc's area and a speed uniform in ``speed_range``
    (m/s), walks there in a straight line, pauses ``pause_s`` and repeats (Johnson & Maltz 1996).
    A client's trajectory comes from its own stream ``("mobility", client)`` and is generated lazily, so
    asking for client 7 never changes client 3.  The start point is ``start[client]`` if given, else
    drawn area-uniform.
    """

    radius: float
    streams: Streams
    speed_range: tuple[float, float] = (0.5, 1.5)
    pause_s: float = 0.0
    start: np.ndarray | None = None
    _legs: dict = field(default_factory=dict, repr=False)
    _rngs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        lo, hi = self.speed_range
        if not (0 < lo <= hi):
            raise ConfigError("mobility.speed_range", f"need 0 < low <= high, got {self.speed_range}")
        if self.radius <= 0 or self.pause_s < 0:
            raise ConfigError("mobility", f"radius must be > 0 and pause_s >= 0, got {self.radius}, {self.pause_s}")

    def _point(self, rng) -> np.ndarray:
        return annulus_uniform(1, 0.0, self.radius, rng)[0]

    def _extend(self, client, t: float) -> list:
        legs = self._legs.get(client)
        if legs is None:
            rng = self._rngs[client] = self.streams.numpy("mobility", client)
            p0 = np.asarray(self.start[client], float) if self.start is not None else self._point(rng)
            legs = self._legs[client] = [(0.0, p0, p0, 0.0)]  # (t_start, from, to, t_arrive): a zero-length leg
        rng = self._rngs[client]
        while legs[-1][3] + self.pause_s <= t:
            t0 = legs[-1][3] + self.pause_s
            p_from = legs[-1][2]
            p_to = self._point(rng)
            speed = rng.uniform(*self.speed_range)
            legs.append((t0, p_from, p_to, t0 + float(np.linalg.norm(p_to - p_from)) / speed))
        return legs

    def position(self, client, t: float) -> np.ndarray:
        """(x, y) of ``client`` at time ``t``."""
        if t < 0:
            raise ConfigError("mobility.t", f"time must be >= 0, got {t}")
        legs = self._extend(client, t)
        lo, hi = 0, len(legs) - 1
        while lo < hi:  # last leg with t_start <= t
            mid = (lo + hi + 1) // 2
            if legs[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        t0, a, b, t1 = legs[lo]
        if t >= t1 or t1 == t0:
            return b.copy()
        return a + (b - a) * (t - t0) / (t1 - t0)

    def distance(self, client, t: float) -> float:
        """Distance from the base station at time ``t``."""
        x, y = self.position(client, t)
        return float(math.hypot(x, y))
