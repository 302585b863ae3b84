"""Build a run's figures and ``report.html`` in a second process, beside the simulation (opt-in:
``FEDSIM_OUTPUT_PROCESS=1``).

Why it is off by default now: a run's figures used to be drawn with matplotlib (about 0.6 s to import, 1-2
s to draw), which a second process could hide on a spare core.  They are written directly as SVG now
(:mod:`fedsim.output.svg_figures`, tens of milliseconds), so a second process saves little wall time and
costs CPU (its own interpreter and imports), and on a busy machine it made runs slower.  It stays for a
run whose trace read and report take long enough to overlap with the next variant's simulation.

What stays the same: the files (the same functions draw them, byte for byte), and the run's status (a
failure there is recorded as it is in the run's own process: a figure that fails alone in
``figures_missing``, its traceback in ``figures_error.txt``, the run still ``ok``; a failure of the report
as ``outputs_failed``, the traceback in ``outputs_error.txt``).  A second process that dies or cannot
start is replaced by building in the run's own process.

When (:func:`wanted`): figures on, :data:`SWITCH` ``1``, at least two usable cores, training in the run's
own process (``train.executor: inprocess``), and a run of at most :data:`MAX_EVENTS` events, as the
preflight estimates them and as the trace counts them.  A bigger run's outputs are one pass over a big
trace, which a second process does not shorten, and the memory it would hold would add to the run's.
``fedsim run`` asks for it; the Python API (``run_scenario``) builds in its own process unless asked,
since spawning needs a script's ``if __name__ == "__main__":`` guard.

This module imports neither torch nor matplotlib, and neither does a default run's output build.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fedsim.output.figures import OutputBuild, run_figures_registered
from fedsim.sim.executor import usable_cores

if TYPE_CHECKING:
    from fedsim.scenario import Scenario

#: The largest run, in trace events, whose outputs a second process builds: checked against the
#: preflight's estimate before the simulation (the second process is stopped at once for a bigger one) and
#: against the trace written after it.  A trace this long is about 30 MB as JSON lines; its outputs cost
#: mostly the fixed cost a second process hides.
MAX_EVENTS = 200_000


#: The environment variable that turns the second process on (``1``) where it would be used; ``0`` (the
#: default): a run builds its outputs in its own process.
SWITCH = "FEDSIM_OUTPUT_PROCESS"


def wanted(scenario: Scenario) -> bool:
    """Whether a second process should build this scenario's outputs (the rule in the module docstring;
    the work estimate is applied later, by the runner, once the preflight has made it)."""
    from fedsim.errors import ConfigError

    switch = os.environ.get(SWITCH, "0")
    if switch not in ("0", "1"):
        raise ConfigError(SWITCH, f"got {switch!r} (allowed: 0, figures drawn in the run's own process, the "
                                  "default, or 1, in a second process where a core is free)")
    return (switch == "1" and bool(scenario.output.figures) and usable_cores() >= 2
            and scenario.train.executor == "inprocess")


def _warm() -> None:
    """The second process's first work, while the run simulates: import what drawing needs (the SVG
    figures, the digest, the report) and draw one small figure, so the first real one pays no import."""
    import io

    import fedsim.output.report  # noqa: F401  (report.html)
    from fedsim.output.svg import Figure

    fig = Figure(100, 60, name="warm-up")
    fig.axes((10, 10, 80, 40), (1.0, 10.0), (0.0, 1.0), xlog=True).line([1.0, 10.0], [0.0, 1.0], "#000", label="warm-up")
    io.StringIO().write(fig.render())


class _ChildTraceback(Exception):
    """The traceback of an error in the forked helper, as text (the cause of the error raised again)."""

    def __str__(self) -> str:
        return "\n" + str(self.args[0])


def build_run_outputs(out: str, timeline_window: Sequence[float] | None, timeline_clients: int,
                      topology: tuple[Any, Any] | None, fork: bool = False) -> dict[str, str]:
    """One run's figures and report.html: the same files, whichever process builds them.  Returns the
    figures that failed to draw (name → one line); each fails on its own: the others and report.html
    are still written, the page lists it under "Figures not drawn", and its traceback goes to
    :data:`fedsim.output.report.FIGURES_ERROR_FILE`.  A failure of report.html itself (or of reading the run's
    files) is raised.

    ``topology``: ``(graph, root)`` of a hierarchical network (``topology.png``), taken from the run's
    world before it was dropped (:func:`fedsim.system.topology.rate_graph`), or None.  ``fork`` (the
    second process, on Linux): once the trace is read, a forked copy of this process, which holds the
    digest and the plotting stack already, draws the registry's ``forked`` figures
    (:func:`fedsim.output.figures.forked_figures`) while this one draws the others and report.html's body;
    report.html takes every figure once both are done.  One :class:`~fedsim.output.figures.OutputBuild`
    holds what the build reads (the forked copy inherits it), and goes with it."""
    import fedsim.output.report as report
    from fedsim.output.figures import forked_figures

    run_dir = Path(out)
    missing: dict[str, dict[str, str]] = {}
    build = OutputBuild(out, timeline_window=timeline_window, timeline_clients=timeline_clients, topology=topology)
    if not (fork and hasattr(os, "fork") and os.path.exists("/proc/self")):
        report.run_figures(out, missing=missing, build=build)
        return _finish(run_dir, missing, lambda lines: report.html_report(out, lines, build=build))
    build.read("digest")  # read once, before the fork: both halves draw from it
    theirs = forked_figures()

    def forked() -> dict[str, dict[str, str]]:
        got: dict[str, dict[str, str]] = {}
        report.run_figures(out, only=theirs, missing=got, build=build)
        return got

    helper = _fork(forked, theirs)
    try:
        report.run_figures(out, only=[f.name for f in run_figures_registered() if f.name not in theirs],
                           missing=missing, build=build)
        body = report.html_report_body(out, build)
    finally:
        missing.update(_join(helper) or {})
    return _finish(run_dir, missing, lambda lines: report.finish_html_report(body, lines))


def _finish(run_dir: Path, missing: dict[str, dict[str, str]], write_report: Callable[[dict[str, str]], Any]
            ) -> dict[str, str]:
    """The failed figures' tracebacks written (or an earlier build's removed), then report.html; the
    failed figures' one-line reasons returned."""
    from fedsim.files import write_text
    from fedsim.output.report import FIGURES_ERROR_FILE

    lines = {name: m["error"] for name, m in sorted(missing.items())}
    if missing:
        write_text(run_dir / FIGURES_ERROR_FILE, "".join(f"--- {name}: {m['error']}\n{m['traceback']}\n"
                                                         for name, m in sorted(missing.items())))
    else:
        (run_dir / FIGURES_ERROR_FILE).unlink(missing_ok=True)
    write_report(lines)
    return lines


def _fork(work: Callable[[], Any], names: Sequence[str] = ()) -> tuple[int, int, tuple[str, ...]]:
    """Run ``work`` in a forked child; its pid, the read end of the pipe its result or error comes
    back on, and ``names`` (the figures it draws, for the error when it dies)."""
    import pickle
    import traceback

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: draw, send back its result or its error, and leave without the parent's exit code
        code = 0
        try:
            os.close(read)
            try:
                payload = pickle.dumps((None, None, work()))
            except BaseException as exc:  # noqa: BLE001  (everything goes back to the parent)
                code = 1
                try:
                    payload = pickle.dumps((exc, traceback.format_exc(), None))
                except Exception:  # an exception that does not pickle: its type and message
                    payload = pickle.dumps((RuntimeError(f"{type(exc).__name__}: {exc}"), traceback.format_exc(),
                                            None))
            with os.fdopen(write, "wb") as f:
                f.write(payload)
        finally:
            os._exit(code)
    os.close(write)
    return pid, read, tuple(names)


def _join(helper: tuple[int, int, tuple[str, ...]]) -> Any:
    """Wait for the forked child; return its result, or raise its error here, its traceback as the cause."""
    import pickle

    pid, read, names = helper
    with os.fdopen(read, "rb") as f:
        payload = f.read()
    _, status = os.waitpid(pid, 0)
    if payload:
        exc, text, result = pickle.loads(payload)
        if exc is not None:
            raise exc from _ChildTraceback(text)
        if os.waitstatus_to_exitcode(status) == 0:
            return result
    raise RuntimeError(f"the process drawing {', '.join(names)} ended with status "
                       f"{os.waitstatus_to_exitcode(status)}")


def build_comparison_outputs(out: str, labels: Sequence[str]) -> None:
    """The comparison figure and report.html of a scenario with several algorithms."""
    import fedsim.output.report as report

    report.comparison_figure(Path(out), list(labels))
    report.html_report(out)


class Job:
    """One build handed to the second process; :meth:`result` waits for it."""

    def __init__(self, future: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._future, self._fn, self._args = future, fn, args

    def result(self) -> Any:
        """Wait for the build and return what it returned; its error is raised here.  If the second
        process died (or never started), the build runs again here, in this process (never forked: this
        process holds torch's threads)."""
        from concurrent.futures import CancelledError
        from concurrent.futures.process import BrokenProcessPool

        if self._future is not None:
            try:
                return self._future.result()
            except (BrokenProcessPool, CancelledError):
                pass
        return self._fn(*self._args)


class OutputProcess:
    """The second process that builds outputs, started at once (:func:`fedsim.sim.executor.spawn_pool`:
    a fresh interpreter that ignores Ctrl-C and ends with the run's process; the run decides when it
    stops)."""

    def __init__(self) -> None:
        from fedsim.sim.executor import spawn_pool

        self._pool, _ = spawn_pool(1, initializer=_warm)
        #: builds handed over and not yet waited for, with what the runner needs to record them
        self.pending: list[tuple[Job, Any]] = []

    def submit(self, fn: Callable[..., Any], *args: Any, **there: Any) -> Job:
        """Hand ``fn(*args, **there)`` (a module-level function of this module) to the second process;
        ``there``: the keywords that apply only there (``fork``), left out if it runs here instead."""
        try:
            future = self._pool.submit(fn, *args, **there)
        except RuntimeError:  # the pool is broken or shut down: the job runs here when waited for
            future = None
        return Job(future, fn, args)

    def close(self) -> None:
        """Stop the second process now (what it was building is lost; call after waiting for the jobs
        that matter)."""
        for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
            if proc.is_alive():
                proc.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
