"""Figures written directly as SVG text: axes with ticks and labels, lines, step lines, bars, histograms,
heat maps and legends, from numpy and string formatting alone.

Why: a run's default figures used to be drawn with matplotlib, whose import alone (about 0.6 s) and
drawing (1.5-2 s) cost more than a short run's simulation.  Writing the few shapes a run figure needs as
SVG text costs milliseconds and imports nothing beyond numpy.  The output is deterministic (the same data
gives the same bytes: coordinates are rounded to 0.01 px, no ids, no dates) and readable by tests: every
axes is a ``<g class='axes'>`` whose ``data-box`` (left, top, width, height in px), ``data-xlim`` and
``data-ylim`` (and ``data-xlog``) map its marks' coordinates back to data.  Paper figures (PDF, 300-dpi
PNG) are drawn by matplotlib on request (``fedsim figures``), never here.
"""
from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: Text width per character as a share of the font size: a sans-serif font's average, for layout only.
CHAR_WIDTH = 0.56

#: Viridis at 9 evenly spaced points (matplotlib's values), interpolated linearly for heat maps.
VIRIDIS = ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725")


def num(v: float) -> str:
    """A coordinate as short, deterministic text: rounded to 0.01 and without trailing zeros."""
    s = f"{float(v):.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def label(v: float) -> str:
    """A tick label: up to 4 significant digits, plain notation for everyday magnitudes."""
    v = float(v)
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:.4g}" if abs(v) >= 1 else f"{v:.4f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def text_width(text: str, size: float) -> float:
    """Estimated width in px of ``text`` at ``size`` px (longest line)."""
    return max((len(line) for line in str(text).split("\n")), default=0) * size * CHAR_WIDTH


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round ticks (1, 2, 2.5 or 5 times a power of ten apart) inside ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(n, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    k = 0
    while first + k * step <= hi + 1e-9 * step:
        t = first + k * step
        ticks.append(0.0 if abs(t) < 1e-12 * step else round(t, 12))
        k += 1
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks of a log axis over ``[lo, hi]`` (both > 0): the powers of ten inside, with 2 and 5 times
    them where the range spans fewer than three decades (and at least the range's two ends' decades)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1, 2, 5) if b - a <= 3 else (1,)
    ticks = [m * 10.0 ** e for e in range(a, b + 1) for m in mults if lo * (1 - 1e-9) <= m * 10.0 ** e <= hi * (1 + 1e-9)]
    return ticks or [lo, hi]


def padded(lo: float, hi: float, share: float = 0.05) -> tuple[float, float]:
    """A range around ``[lo, hi]`` with ``share`` of it as margin; a single value gets a range of its own
    (±5% of it, or ±0.5 around 0), so that one point still draws."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
        half = 0.05 * abs(hi) or 0.5
        return lo - half, hi + half
    m = share * (hi - lo)
    return lo - m, hi + m


def colour_map(values: np.ndarray, vmin: float = 0.0, vmax: float = 1.0, stops: Sequence[str] = VIRIDIS) -> list[str]:
    """Each value's colour on a linear map through ``stops`` (clipped to ``[vmin, vmax]``; NaN is white)."""
    rgb = np.array([[int(s[i:i + 2], 16) for i in (1, 3, 5)] for s in stops], dtype=float)
    v = np.asarray(values, dtype=float)
    pos = np.clip((v - vmin) / (vmax - vmin if vmax > vmin else 1.0), 0.0, 1.0) * (len(stops) - 1)
    out = []
    for p in np.nan_to_num(pos, nan=-1.0).ravel().tolist():
        if p < 0:
            out.append("#ffffff")
            continue
        i = min(int(p), len(stops) - 2)
        c = rgb[i] + (rgb[i + 1] - rgb[i]) * (p - i)
        out.append("#%02x%02x%02x" % tuple(int(round(x)) for x in c))
    return out


class Axes:
    """A plot box of a :class:`Figure` (``left, top, width, height`` in px) mapping data to px.  Marks are
    clipped to the box; ``ylim`` may run downwards (a timeline's rows, first row on top)."""

    def __init__(self, fig: Figure, box: tuple[float, float, float, float], xlim: tuple[float, float],
                 ylim: tuple[float, float], xlog: bool = False) -> None:
        self.fig, self.box, self.xlog = fig, box, xlog
        self.xlim = (float(xlim[0]), float(xlim[1]))
        self.ylim = (float(ylim[0]), float(ylim[1]))
        if xlog and not (self.xlim[0] > 0 and self.xlim[1] > self.xlim[0]):
            raise ValueError(f"a log axis needs 0 < lo < hi, got {self.xlim}")
        self.marks: list[str] = []
        self.front: list[str] = []  # drawn over the frame (markers, notes)
        self.legend_entries: list[tuple[str, str, str]] = []  # (kind, colour, label)

    # ---------------------------------------------------------------- coordinates

    def x(self, v: Any) -> np.ndarray:
        """Data x to px."""
        v = np.asarray(v, dtype=float)
        lo, hi = self.xlim
        if self.xlog:
            v, lo, hi = np.log10(np.maximum(v, 1e-300)), math.log10(lo), math.log10(hi)
        span = hi - lo if hi != lo else 1.0
        return self.box[0] + (v - lo) / span * self.box[2]

    def y(self, v: Any) -> np.ndarray:
        """Data y to px (up the page for an ascending ``ylim``)."""
        v = np.asarray(v, dtype=float)
        lo, hi = self.ylim
        span = hi - lo if hi != lo else 1.0
        return self.box[1] + self.box[3] - (v - lo) / span * self.box[3]

    # ---------------------------------------------------------------- marks

    def _points(self, xs: Any, ys: Any) -> str:
        px, py = self.x(xs), self.y(ys)
        ok = np.isfinite(px) & np.isfinite(py)
        return " ".join(f"{num(a)},{num(b)}" for a, b in zip(px[ok].tolist(), py[ok].tolist()))

    def line(self, xs: Any, ys: Any, colour: str, *, width: float = 1.5, label: str = "", markers: bool = False,
             dash: str = "", cls: str = "line") -> None:
        """A polyline through the points (NaN points left out), with dots at the points if ``markers``."""
        pts = self._points(xs, ys)
        attrs = f" stroke-dasharray='{dash}'" if dash else ""
        self.marks.append(f"<polyline class='{cls}' data-label='{escape(label)}' fill='none' stroke='{colour}' "
                          f"stroke-width='{num(width)}'{attrs} points='{pts}'/>")
        if markers and pts:
            r = num(max(width, 1.5))
            self.marks.append(f"<g class='dots' fill='{colour}'>" + "".join(
                f"<circle cx='{p.split(',')[0]}' cy='{p.split(',')[1]}' r='{r}'/>" for p in pts.split(" ")) + "</g>")
        if label:
            self.legend_entries.append(("dash" if dash else "line", colour, label))

    def step(self, xs: Any, ys: Any, colour: str, *, width: float = 1.5, label: str = "") -> None:
        """A step line, each value held until the next x (matplotlib's ``where="post"``)."""
        xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        if len(xs) == 0:
            return
        sx = np.repeat(xs, 2)[1:]
        sy = np.repeat(ys, 2)[:-1]
        self.line(sx, sy, colour, width=width, label=label, cls="step")

    def rects(self, x0: Any, x1: Any, y0: Any, y1: Any, colours: str | Sequence[str], *, label: str = "",
              cls: str = "bar", opacity: float = 1.0, kinds: Sequence[str] | None = None) -> None:
        """Rectangles from data corners (one colour, or one per rectangle); ``kinds`` tags each with a
        ``data-kind`` (a timeline's phase)."""
        a, b = self.x(x0), self.x(x1)
        c, d = self.y(y0), self.y(y1)
        a, b = np.broadcast_arrays(a, b)
        c, d = np.broadcast_arrays(c, d)
        left, right = np.minimum(a, b), np.maximum(a, b)
        top, bottom = np.minimum(c, d), np.maximum(c, d)
        n = np.broadcast(left, top).shape[0] if np.ndim(left) else 1
        left, right, top, bottom = (np.broadcast_to(v, (n,)).tolist() for v in (left, right, top, bottom))
        single = isinstance(colours, str)
        op = f" opacity='{num(opacity)}'" if opacity < 1 else ""
        crisp = " shape-rendering='crispEdges'" if cls in ("colourbar", "phases") else ""
        out = [f"<g class='{cls}' data-label='{escape(label)}'" + (f" fill='{colours}'" if single else "") + op + crisp
               + ">"]
        for i in range(n):
            fill = "" if single else f" fill='{colours[i]}'"
            kind = f" data-kind='{kinds[i]}'" if kinds is not None else ""
            out.append(f"<rect x='{num(left[i])}' y='{num(top[i])}' width='{num(right[i] - left[i])}' "
                       f"height='{num(bottom[i] - top[i])}'{fill}{kind}/>")
        out.append("</g>")
        self.marks.append("".join(out))
        if label:
            self.legend_entries.append(("box", colours if single else colours[0], label))

    def hist(self, values: Any, bins: Any, colour: str, *, label: str = "", opacity: float = 0.6
             ) -> tuple[np.ndarray, np.ndarray]:
        """A histogram of ``values`` over ``bins`` (edges, or a count over the values' range): the bars
        and ``np.histogram``'s counts and edges."""
        counts, edges = np.histogram(np.asarray(values, dtype=float), bins=bins)
        self.rects(edges[:-1], edges[1:], np.zeros(len(counts)), counts, colour, label=label, cls="hist",
                   opacity=opacity)
        return counts, edges

    def band(self, edges: Any, tops: Any, colour: str, *, label: str = "", opacity: float = 0.25) -> None:
        """A filled step band from 0 up to ``tops[i]`` over ``[edges[i], edges[i+1]]``."""
        edges, tops = np.asarray(edges, dtype=float), np.asarray(tops, dtype=float)
        xs = np.repeat(edges, 2)
        ys = np.concatenate([[0.0], np.repeat(tops, 2), [0.0]])
        pts = self._points(xs, ys)
        self.marks.append(f"<polygon class='band' data-label='{escape(label)}' fill='{colour}' "
                          f"opacity='{num(opacity)}' points='{pts}'/>")
        if label:
            self.legend_entries.append(("box", colour, label))

    def hline(self, y: float, colour: str, *, dash: str = "4 3", width: float = 1.0, label: str = "") -> None:
        """A horizontal line across the box at data ``y``."""
        self.line(list(self.xlim), [y, y], colour, width=width, dash=dash, label=label, cls="hline")

    def vlines(self, xs: Sequence[float], colour: str, *, dash: str = "2 3", width: float = 0.6, label: str = "") -> None:
        """Vertical lines across the box at data ``xs``."""
        px = self.x(xs)
        top, bottom = self.box[1], self.box[1] + self.box[3]
        path = "".join(f"M{num(p)} {num(top)}V{num(bottom)}" for p in np.atleast_1d(px).tolist())
        self.marks.append(f"<path class='vlines' stroke='{colour}' stroke-width='{num(width)}' "
                          f"stroke-dasharray='{dash}' d='{path}'/>")
        if label:
            self.legend_entries.append(("dash", colour, label))

    def points(self, xs: Sequence[float], ys: Sequence[float], shape: str, colour: str, *, label: str = "",
               size: float = 4.0) -> None:
        """Markers: ``v`` (a downward triangle) or ``x`` (a cross), drawn over the other marks."""
        px, py = self.x(xs), self.y(ys)
        s = size
        if shape == "v":
            d = "".join(f"M{num(a - s)} {num(b - s)}H{num(a + s)}L{num(a)} {num(b + s)}Z"
                        for a, b in zip(np.atleast_1d(px).tolist(), np.atleast_1d(py).tolist()))
            self.front.append(f"<path class='marker-v' fill='{colour}' stroke='#5a4800' stroke-width='0.4' d='{d}'/>")
        else:
            d = "".join(f"M{num(a - s)} {num(b - s)}L{num(a + s)} {num(b + s)}M{num(a - s)} {num(b + s)}"
                        f"L{num(a + s)} {num(b - s)}"
                        for a, b in zip(np.atleast_1d(px).tolist(), np.atleast_1d(py).tolist()))
            self.front.append(f"<path class='marker-x' stroke='{colour}' stroke-width='1.2' fill='none' d='{d}'/>")
        if label:
            self.legend_entries.append((shape, colour, label))

    def heatmap(self, grid: np.ndarray, vmin: float = 0.0, vmax: float = 1.0) -> None:
        """``grid`` (rows x columns) as cells, row ``i`` at ``y = i`` and column ``j`` at ``x = j``
        (the axes' limits are ``-0.5 .. n - 0.5``), coloured on :data:`VIRIDIS`; ``data-value`` keeps
        each cell's value."""
        grid = np.atleast_2d(np.asarray(grid, dtype=float))
        colours = colour_map(grid, vmin, vmax)
        out = ["<g class='heatmap' shape-rendering='crispEdges'>"]
        n_rows, n_cols = grid.shape
        for i in range(n_rows):
            y0, y1 = self.y(i - 0.5), self.y(i + 0.5)
            for j in range(n_cols):
                x0, x1 = self.x(j - 0.5), self.x(j + 0.5)
                out.append(f"<rect x='{num(min(x0, x1))}' y='{num(min(y0, y1))}' width='{num(abs(x1 - x0))}' "
                           f"height='{num(abs(y1 - y0))}' fill='{colours[i * n_cols + j]}' "
                           f"data-value='{label(grid[i, j]) if np.isfinite(grid[i, j]) else 'nan'}'/>")
        out.append("</g>")
        self.marks.append("".join(out))

    def note(self, text: str, *, size: float = 11.0) -> None:
        """A boxed note in the middle of the axes (e.g. "the server never queued")."""
        lines = text.split("\n")
        w = text_width(text, size) + 16
        h = len(lines) * size * 1.3 + 10
        cx, cy = self.box[0] + self.box[2] / 2, self.box[1] + self.box[3] * 0.45
        self.front.append(f"<rect class='note' x='{num(cx - w / 2)}' y='{num(cy - h / 2)}' width='{num(w)}' "
                          f"height='{num(h)}' fill='#fff' stroke='#999'/>")
        self.front.append(self.fig.text_svg(cx, cy - h / 2 + 5 + size, text, size=size, anchor="middle"))

    # ---------------------------------------------------------------- frame

    def frame(self, *, xlabel: str = "", ylabel: str = "", title: str = "",
              xticks: Sequence[float] | None = None, yticks: Sequence[float] | None = None,
              xticklabels: Sequence[str] | None = None, yticklabels: Sequence[str] | None = None,
              grid: bool = False, tick_size: float = 10.0, xtick_rotate: float = 0.0,
              yticks_right: bool = False) -> None:
        """Ticks (round ones unless given), tick labels (the y axis's on the right with ``yticks_right``, as
        on a colour bar), axis labels, the title and the box's outline."""
        left, top, width, height = self.box
        bottom, right = top + height, left + width
        f = self.fig
        if xticks is None:
            xticks = log_ticks(*self.xlim) if self.xlog else nice_ticks(*self.xlim)
        if yticks is None:
            yticks = nice_ticks(min(self.ylim), max(self.ylim))
        xl = list(xticklabels) if xticklabels is not None else [label(v) for v in xticks]
        yl = list(yticklabels) if yticklabels is not None else [label(v) for v in yticks]
        out = [f"<g class='frame' stroke='#333' stroke-width='0.8'>"]
        gridlines = []
        for v, name in zip(xticks, xl):
            p = float(self.x(v))
            out.append(f"<path d='M{num(p)} {num(bottom)}v4'/>")
            if grid:
                gridlines.append(f"M{num(p)} {num(top)}V{num(bottom)}")
            if xtick_rotate:
                f.parts_text.append(f"<text x='{num(p)}' y='{num(bottom + 8)}' font-size='{num(tick_size)}' "
                                    f"text-anchor='end' transform='rotate({num(-xtick_rotate)} {num(p)} "
                                    f"{num(bottom + 8)})' class='xtick'>{escape(name)}</text>")
            else:
                f.parts_text.append(f.text_svg(p, bottom + 6 + tick_size, name, size=tick_size, anchor="middle",
                                               cls="xtick"))
        for v, name in zip(yticks, yl):
            p = float(self.y(v))
            if yticks_right:
                out.append(f"<path d='M{num(right)} {num(p)}h4'/>")
                f.parts_text.append(f.text_svg(right + 6, p + tick_size * 0.35, name, size=tick_size, anchor="start",
                                               cls="ytick"))
                continue
            out.append(f"<path d='M{num(left)} {num(p)}h-4'/>")
            if grid:
                gridlines.append(f"M{num(left)} {num(p)}H{num(right)}")
            f.parts_text.append(f.text_svg(left - 6, p + tick_size * 0.35, name, size=tick_size, anchor="end",
                                           cls="ytick"))
        out.append(f"<rect x='{num(left)}' y='{num(top)}' width='{num(width)}' height='{num(height)}' fill='none'/>")
        out.append("</g>")
        if gridlines:
            self.marks.insert(0, f"<path class='grid' stroke='#ccc' stroke-width='0.6' d='{''.join(gridlines)}'/>")
        self.frame_svg = "".join(out)
        if xlabel:
            f.parts_text.append(f.text_svg(left + width / 2, bottom + 2 * tick_size + 14 + (
                max((text_width(s, tick_size) for s in xl), default=0) * 0.6 if xtick_rotate else 0),
                xlabel, size=11, anchor="middle", cls="xlabel"))
        if ylabel:
            w = max((text_width(s, tick_size) for s in yl), default=0)
            x = max(left - w - 14, 12)
            f.parts_text.append(f"<text class='ylabel' x='{num(x)}' y='{num(top + height / 2)}' font-size='11' "
                                f"text-anchor='middle' transform='rotate(-90 {num(x)} {num(top + height / 2)})'>"
                                f"{escape(ylabel)}</text>")
        if title:
            n = len(title.split("\n"))
            f.parts_text.append(f.text_svg(left + width / 2, top - 8 - (n - 1) * 14, title, size=12, anchor="middle",
                                           cls="title"))

    def legend(self, *, where: str = "upper right", columns: int = 1, size: float = 10.0,
               entries: Sequence[tuple[str, str, str]] | None = None) -> None:
        """The legend of the marks given a label (or ``entries``: (kind, colour, label)), in a box at
        ``where`` inside the axes, or ``below`` it in ``columns`` columns."""
        entries = list(self.legend_entries if entries is None else entries)
        if not entries:
            return
        line_h = size * 1.35
        heights = [len(e[2].split("\n")) * line_h for e in entries]
        col_w = max(text_width(e[2], size) for e in entries) + 28
        rows = math.ceil(len(entries) / columns)
        w = col_w * min(columns, len(entries)) + 8
        h = max(sum(heights[i::columns][:rows]) for i in range(min(columns, len(entries)))) + 8 if columns > 1 \
            else sum(heights) + 8
        left, top, width, height = self.box
        if where == "below":
            x0, y0 = left + width / 2 - w / 2, top + height + self.below
        elif where == "upper left":
            x0, y0 = left + 6, top + 6
        elif where == "lower right":
            x0, y0 = left + width - w - 6, top + height - h - 6
        else:
            x0, y0 = left + width - w - 6, top + 6
        out = ["<g class='legend'>"]
        if where != "below":
            out.append(f"<rect x='{num(x0)}' y='{num(y0)}' width='{num(w)}' height='{num(h)}' fill='#fff' "
                       f"fill-opacity='0.85' stroke='#ccc'/>")
        ys = [y0 + 4] * columns
        for i, (kind, colour, text) in enumerate(entries):
            c = i % columns
            x, y = x0 + 4 + c * col_w, ys[c]
            mid = y + line_h / 2
            if kind == "box":
                out.append(f"<rect x='{num(x)}' y='{num(mid - 5)}' width='18' height='10' fill='{colour}'/>")
            elif kind in ("line", "dash"):
                dash = " stroke-dasharray='4 3'" if kind == "dash" else ""
                out.append(f"<path d='M{num(x)} {num(mid)}h18' stroke='{colour}' stroke-width='1.5'{dash}/>")
            elif kind == "v":
                out.append(f"<path d='M{num(x + 5)} {num(mid - 4)}h8l-4 8z' fill='{colour}'/>")
            else:
                out.append(f"<path d='M{num(x + 5)} {num(mid - 4)}l8 8m-8 0l8 -8' stroke='{colour}' "
                           f"stroke-width='1.2'/>")
            out.append(self.fig.text_svg(x + 24, y + size * 1.05, text, size=size, anchor="start"))
            ys[c] += heights[i]
        out.append("</g>")
        self.front.append("".join(out))

    #: px below the axes' box where a ``below`` legend starts (room for tick labels and the x label)
    below = 44.0

    def svg(self) -> str:
        """The axes as a group: marks clipped to the box, then the frame and what is drawn in front."""
        left, top, width, height = self.box
        clip = self.fig.clip_id()
        return (f"<g class='axes' data-box='{num(left)} {num(top)} {num(width)} {num(height)}' "
                f"data-xlim='{self.xlim[0]!r} {self.xlim[1]!r}' data-ylim='{self.ylim[0]!r} {self.ylim[1]!r}' "
                f"data-xlog='{int(self.xlog)}'>"
                f"<clipPath id='{clip}'><rect x='{num(left)}' y='{num(top)}' width='{num(width)}' "
                f"height='{num(height)}'/></clipPath><g clip-path='url(#{clip})'>" + "".join(self.marks) + "</g>"
                + getattr(self, "frame_svg", "") + "".join(self.front) + "</g>")


class Figure:
    """An SVG drawing of ``width`` x ``height`` px holding axes and text."""

    def __init__(self, width: float, height: float, *, name: str = "figure") -> None:
        self.width, self.height, self.name = float(width), float(height), name
        self.axes_list: list[Axes] = []
        self.parts_text: list[str] = []
        self._clips = 0

    def clip_id(self) -> str:
        """A clip path id unique in the file and stable (the figure's name and a counter): report.html
        embeds figures as images, so ids never meet the page's."""
        self._clips += 1
        return f"{self.name}-clip{self._clips}"

    def axes(self, box: tuple[float, float, float, float], xlim: tuple[float, float], ylim: tuple[float, float],
             xlog: bool = False) -> Axes:
        """New axes in ``box`` (left, top, width, height in px)."""
        ax = Axes(self, box, xlim, ylim, xlog)
        self.axes_list.append(ax)
        return ax

    @staticmethod
    def text_svg(x: float, y: float, text: str, *, size: float = 11.0, anchor: str = "start", cls: str = "",
                 weight: str = "") -> str:
        """``text`` at ``x, y`` (its first baseline), one ``tspan`` per line."""
        lines = str(text).split("\n")
        c = f" class='{cls}'" if cls else ""
        w = f" font-weight='{weight}'" if weight else ""
        if len(lines) == 1:
            return (f"<text{c} x='{num(x)}' y='{num(y)}' font-size='{num(size)}' text-anchor='{anchor}'{w}>"
                    f"{escape(lines[0])}</text>")
        spans = "".join(f"<tspan x='{num(x)}' dy='{num(0 if i == 0 else size * 1.25)}'>{escape(s)}</tspan>"
                        for i, s in enumerate(lines))
        return f"<text{c} x='{num(x)}' y='{num(y)}' font-size='{num(size)}' text-anchor='{anchor}'{w}>{spans}</text>"

    def text(self, x: float, y: float, text: str, **kw: Any) -> None:
        """Text on the figure (outside any axes)."""
        self.parts_text.append(self.text_svg(x, y, text, **kw))

    def render(self) -> str:
        """The whole SVG document."""
        return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{num(self.width)}' height='{num(self.height)}' "
                f"viewBox='0 0 {num(self.width)} {num(self.height)}' font-family='DejaVu Sans, Arial, sans-serif' "
                f"data-figure='{escape(self.name)}'>"
                f"<rect width='100%' height='100%' fill='#fff'/>" + "".join(a.svg() for a in self.axes_list)
                + "<g class='labels' fill='#222'>" + "".join(self.parts_text) + "</g></svg>\n")

    def save(self, path: str | Path) -> None:
        """Write the SVG (recorded in its run's manifest, renamed into place whole)."""
        from fedsim.files import write_text

        write_text(Path(path), self.render())
