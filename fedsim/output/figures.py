"""The run figures, in one registry: what each reads, the files it may write, how it is drawn.

Why one place: the figure loop (:func:`fedsim.output.report.run_figures`), the split between the two
halves of a forked build (:mod:`fedsim.output.process`), the files removed when a figure fails, and the
figures report.html shows all derive from :func:`run_figures_registered`, so adding a figure is one
:func:`register_run_figure` call (the built-in ones are registered by :mod:`fedsim.output.report`, beside
their drawers, when it is imported; the registry itself imports no drawer) (a plugin module may also list :class:`RunFigure` objects as
``run_figures``, which reaches the second process that draws a ``fedsim run``'s outputs too).

A figure is drawn when every input it ``reads`` exists for the run (:data:`READS`), by
``draw(inputs, run_dir)``, where ``inputs`` is the build's :class:`OutputBuild`: the run's metrics, trace
digest, report panels, energy table, each read once per build and shared by every figure and by
report.html.  ``draw`` returns the file it wrote, or None when the run has nothing to show (a systems-only
run has no accuracy curve).  Reading an input is not a figure's failure (it is raised); ``draw`` failing
is (:func:`fedsim.output.report.draw_figure`).

The build object holds what one build read, and nothing outlives it: two runs built in one process never
see each other's digest.  This module imports neither torch nor matplotlib (a drawer imports what it needs
when it draws).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pandas as pd

from fedsim.sim.trace import trace_path

if TYPE_CHECKING:
    from fedsim.output.digest import TraceDigest
    from fedsim.output.panels import PanelStream

#: The inputs a figure may read, each present when the run has it: ``metrics`` (metrics.csv), ``digest``
#: (the trace's :class:`~fedsim.output.digest.TraceDigest`), ``panels`` (the report panels'
#: :class:`~fedsim.output.panels.PanelStream`, gathered in the digest's pass), ``energy`` (energy.csv),
#: ``topology`` (a hierarchical network's rate graph, handed over by the run).
READS = ("metrics", "digest", "panels", "energy", "topology")

#: Exact bars report.html holds at most (the page stays small and responsive); past it, the bars of the
#: densest time tiles are left out (spread over the run, see :mod:`fedsim.output.digest`) and the page draws
#: those stretches aggregated, each pixel column showing the phase that fills most of it.  A build's digest
#: is read with it, so that the figures and the page draw from one pass.
INTERACTIVE_MAX_BARS = 20000

#: Clients whose bars report.html holds at most (the lowest client ids); the page shows
#: :data:`fedsim.output.report.INTERACTIVE_SHOWN_CLIENTS` of them at a time, picked in the browser.
INTERACTIVE_MAX_CLIENTS = 200


@dataclass(frozen=True)
class RunFigure:
    """One run figure.  ``name``: how the run's status and report.html name it (``figures_missing``);
    ``files``: every file it may write (removed when it fails, shown by report.html when present);
    ``reads``: the inputs of :data:`READS` it draws from; ``draw(inputs, run_dir) -> Path | None``;
    ``forked``: drawn by the forked helper of a build in the second process (chosen so that the two
    halves take about as long), else by the build's own process."""

    name: str
    files: tuple[str, ...]
    reads: tuple[str, ...]
    draw: Callable[["OutputBuild", Path], "Path | None"]
    forked: bool = False

    def __post_init__(self) -> None:
        unknown = [r for r in self.reads if r not in READS]
        if unknown:
            raise ValueError(f"run figure {self.name!r} reads {unknown} (known inputs: {', '.join(READS)})")
        if not self.files:
            raise ValueError(f"run figure {self.name!r} names no file it writes")


_REGISTRY: dict[str, RunFigure] = {}


def register_run_figure(name: str, files: Sequence[str], reads: Sequence[str],
                        draw: Callable[["OutputBuild", Path], "Path | None"], *, forked: bool = False) -> RunFigure:
    """Add a run figure (or replace the one of that name, in its place: a reloaded module does not list it
    twice).  Every later build of a run's outputs in this process draws it; returns its entry."""
    figure = RunFigure(str(name), tuple(files), tuple(reads), draw, bool(forked))
    _REGISTRY[figure.name] = figure
    return figure


def unregister_run_figure(name: str) -> RunFigure | None:
    """Take a run figure out of the registry (a test's, a plugin's); returns its entry, or None."""
    return _REGISTRY.pop(name, None)


def run_figures_registered() -> list[RunFigure]:
    """Every run figure, in drawing order: as registered (the built-in ones when
    :mod:`fedsim.output.report` is imported), then the plugins' (``run_figures`` of a ``fedsim.plugins``
    module) not registered by name already."""
    from fedsim.plugins import plugins

    listed = dict(_REGISTRY)
    for mod in plugins():
        for figure in getattr(mod, "run_figures", ()):
            listed.setdefault(figure.name, figure)
    return list(listed.values())


def run_figure(name: str) -> RunFigure | None:
    """The registered figure of this name, or None."""
    return next((f for f in run_figures_registered() if f.name == name), None)


def figure_files() -> dict[str, tuple[str, ...]]:
    """Figure name → the files it may write, for every registered figure."""
    return {f.name: f.files for f in run_figures_registered()}


def forked_figures() -> list[str]:
    """The figures the forked helper of a build draws (:func:`fedsim.output.process.build_run_outputs`)."""
    return [f.name for f in run_figures_registered() if f.forked]


class OutputBuild:
    """What one build of a run's outputs reads, read once and shared by its figures and its report.html:
    created per build, passed to each figure's ``draw`` and to the report, dropped with the build.

    ``timeline_window`` (``[start, end]`` seconds, or None for the whole run) and ``timeline_clients``:
    the scenario's ``output.timeline_window`` and ``output.timeline_clients``; ``topology``: a
    hierarchical network's ``(graph, root)``, or None."""

    def __init__(self, run_dir: str | Path, *, timeline_window: Sequence[float] | None = None,
                 timeline_clients: int = 30, topology: tuple[Any, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.since, self.until = ((0.0, None) if timeline_window is None
                                  else (float(timeline_window[0]), float(timeline_window[1])))
        self.timeline_clients = int(timeline_clients)
        self.topology = topology
        self._read: dict[str, Any] = {}
        self._digests: dict[tuple[int, int], tuple[TraceDigest, PanelStream]] = {}

    def has(self, kind: str) -> bool:
        """Whether the run has this input (:data:`READS`): its file exists (read or not)."""
        if kind == "metrics":
            return (self.run_dir / "metrics.csv").exists()
        if kind in ("digest", "panels"):
            return trace_path(self.run_dir).exists()
        if kind == "energy":
            return (self.run_dir / "energy.csv").exists()
        if kind == "topology":
            return self.topology is not None
        raise ValueError(f"unknown figure input {kind!r} (known: {', '.join(READS)})")

    def read(self, kind: str) -> Any:
        """The input ``kind``, read now if not yet (None when the run lacks it)."""
        if kind not in self._read:
            if not self.has(kind):
                return None
            if kind == "metrics":
                self._read[kind] = pd.read_csv(self.run_dir / "metrics.csv")
            elif kind == "energy":
                self._read[kind] = pd.read_csv(self.run_dir / "energy.csv")
            elif kind == "digest":
                self._read[kind] = self.digest_for(INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS)
            elif kind == "panels":
                self.read("digest")
                self._read[kind] = self._digests[(INTERACTIVE_MAX_BARS, INTERACTIVE_MAX_CLIENTS)][1]
            else:
                self._read[kind] = self.topology
        return self._read[kind]

    @property
    def metrics(self) -> pd.DataFrame | None:
        """metrics.csv, or None."""
        return self.read("metrics")

    @property
    def digest(self) -> TraceDigest | None:
        """The trace's digest for the figures and report.html, or None for a run without a trace."""
        return self.read("digest")

    @property
    def panels(self) -> PanelStream | None:
        """The report panels gathered in the digest's pass, or None for a run without a trace."""
        return self.read("panels")

    @property
    def energy(self) -> pd.DataFrame | None:
        """energy.csv, or None."""
        return self.read("energy")

    def digest_for(self, max_bars: int, max_clients: int) -> TraceDigest:
        """The digest holding ``max_bars`` exact bars of ``max_clients`` clients (report.html's), read in
        one streamed pass with its panels; the figures' one when the numbers are theirs."""
        key = (int(max_bars), int(max_clients))
        if key not in self._digests:
            from fedsim.output.digest import digest_trace
            from fedsim.output.panels import PanelStream

            panels = PanelStream()  # report.html's "what happened" panels are gathered in the same pass
            digest = digest_trace(trace_path(self.run_dir), also=[panels], since=self.since, until=self.until,
                                  timeline_clients=self.timeline_clients, interactive_clients=key[1],
                                  interactive_bars=key[0])
            self._digests[key] = (digest, panels)
        return self._digests[key][0]

    def panels_for(self, max_bars: int, max_clients: int) -> PanelStream:
        """The panels gathered in :meth:`digest_for`'s pass of these numbers."""
        self.digest_for(max_bars, max_clients)
        return self._digests[(int(max_bars), int(max_clients))][1]

    @property
    def workers(self) -> int:
        """The server's workers (summary.json's), so its row draws utilisation: busy time over time x workers."""
        from fedsim.output.panels import _workers

        return _workers(self.run_dir)

    @property
    def device_classes(self) -> dict[int, str] | None:
        """Client → device class from the run's ``energy.csv`` (written for every run), if present."""
        e = self.energy
        if e is None or "device" not in e or "device_class" not in e:
            return None
        return {int(c): str(d) for c, d in zip(e["device"], e["device_class"])}
