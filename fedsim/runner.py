"""Run a scenario: build data, world and model, run each algorithm variant, write the run directory.

Run directory (one per variant; a scenario with several algorithms also gets a top-level comparison)::

    <out>/scenario.yaml     the resolved scenario (every default filled in)
    <out>/partition.csv     samples and label histogram per client
    <out>/trace.jsonl       the event trace, written while the run goes (``trace.compact.gz`` with
                            ``output.trace_format: compact``)
    <out>/metrics.csv       one row per evaluation (virtual time, version, accuracy, loss, bytes)
    <out>/summary.json      final numbers and why the run stopped
    <out>/final_model.pt    the final global state dict (CPU tensors, whatever ``train.device`` was)
    <out>/*.svg             the run figures (accuracy vs virtual time, per-client timeline, ...), SVG
                            written directly; report.html embeds them
    <out>/checkpoints/v{version:06d}.pt   with ``output.checkpoints: N``: the global state dict at version 0,
                            every N versions and the final version (``fedsim check`` probes them)
    <out>/probes_live.csv   with ``eval.probe_every: N``: theory probes of the live global model (a version
                            hook the analysis package plugs in), at version 0, every N versions and the end

Data, partition and the initial model are rebuilt from ``scenario.yaml`` alone by :func:`fedsim.build.prepare_data`
and :func:`fedsim.build.build_global_model`; analysis code uses exactly these to re-measure saved checkpoints.

Every file goes through :mod:`fedsim.files` (listed in ``<out>/.fedsim-manifest``, renamed into place
whole).  summary.json says ``building_outputs`` while the figures and report are drawn and ``ok`` only
once the last is written; a stop there makes it ``interrupted`` (``outputs_interrupted`` says so).

A run that fails midway (diverged training, interrupt, SIGTERM, SIGHUP, an unexpected error) still writes
metrics, summary and figures for what it did, with ``status`` saying what happened (``ok``, ``diverged``,
``interrupted``, ``error``).  Each figure fails on its own: one that cannot be drawn is left out, the other
figures and report.html are written (the page lists it under "Figures not drawn"), the status stays ``ok``
and ``figures_missing`` names it with a one-line reason (tracebacks in ``figures_error.txt``); the command
line warns and exits 0.  A run whose report (or the reading of its files for the outputs) fails keeps
everything written before the failure and says ``outputs_failed`` (with ``outputs_error``, and the
traceback in ``outputs_error.txt``); the command line then exits 3.

Before anything is written, :func:`fedsim.preflight.preflight` runs every check that can fail (dataset, partition, model,
device and server profiles, memory, ``train.device``, the work estimate), and :func:`fedsim.rundirs.prepare_run_dir`
refuses a non-empty run folder unless ``force`` (which clears what fedsim wrote there, and refuses a folder
holding anything else): a folder never mixes two runs.
"""
from __future__ import annotations

import gc
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import simpy
import torch

from fedsim.algorithms.algorithm import build_algorithm
from fedsim.build import Prepared, build_global_model
from fedsim.errors import ConfigError, DivergenceError, FedsimError, Terminated
from fedsim.files import BUILDING, start_folder, write_csv, write_json, write_text, writing
from fedsim.learn.accelerator import cpu_state, data_on, run_device, set_deterministic
from fedsim.learn.partition import partition_summary
from fedsim.output.process import (MAX_EVENTS, OutputProcess, build_comparison_outputs,
                                   build_run_outputs)
from fedsim.output.process import wanted as output_process_wanted
from fedsim.plugins import plugin_version_hooks
from fedsim.preflight import check_memory_fits, preflight
from fedsim.rundirs import prepare_run_dir
from fedsim.context import Context
from fedsim.scenario import AlgorithmSpec, Scenario, dump_scenario
from fedsim.sim.executor import Executor, make_executor
from fedsim.sim.rng import Streams
from fedsim.sim.trace import TRACE_FILES, Trace, load_trace, trace_path
from fedsim.system.topology import rate_graph
from fedsim.system.world import World


#: Where stderr is not a terminal (a piped or redirected log), the progress is a plain line at most every
#: this many percent of the run, and at least one a minute of wall time while the run advances.
PIPED_PROGRESS_STEP = 10.0
PIPED_PROGRESS_EVERY_S = 60.0


class _Progress:
    """A tqdm bar over model versions (or virtual seconds when only a time limit is set) on a terminal;
    on a pipe or a file, a plain line per :data:`PIPED_PROGRESS_STEP` percent (or a minute) and one at
    the end, since a bar redrawn with carriage returns many times a second floods a log."""

    def __init__(self, scenario: Scenario, label: str, enabled: bool, stream: Any = None) -> None:
        self.bar = None
        self.plain = False
        if not enabled:
            return
        st = scenario.stop
        self.by_time = st.max_versions is None
        self.total = float(st.max_time_s if self.by_time else st.max_versions)
        self.unit = "s" if self.by_time else "ver"
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        if not (callable(isatty) and isatty()):
            self.plain = True
            self.t0 = self.last_t = time.monotonic()
            self.last_pct = -math.inf
            self.line = ""
            return
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, desc=label, unit=self.unit, leave=True, dynamic_ncols=True, file=self.stream,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} {unit} [{elapsed}<{remaining}{postfix}]")

    def _say(self, now: float, version: int, last: bool = False) -> None:
        """The piped log's line for where the run is now (printed when it moved far or long enough, and
        the ``last`` one unless it was just printed)."""
        n = min(now if self.by_time else version, self.total)
        pct = 100.0 * n / self.total if self.total > 0 else 100.0
        wall = time.monotonic()
        where = f"{self.label}: {pct:3.0f}% {n:.0f}/{self.total:.0f} {self.unit} t={now:.1f}s v={version}"
        if where == self.line:
            return
        if last or pct >= self.last_pct + PIPED_PROGRESS_STEP or (wall - self.last_t >= PIPED_PROGRESS_EVERY_S
                                                                  and pct > self.last_pct):
            print(f"{where} [{wall - self.t0:.0f} s]", file=self.stream, flush=True)
            self.last_pct, self.last_t, self.line = pct, wall, where

    def __call__(self, now: float, version: int) -> None:
        if self.plain:
            self._say(now, version)
            return
        if self.bar is None:
            return
        target = now if self.by_time else version
        self.bar.update(max(0.0, min(target, self.bar.total) - self.bar.n))
        self.bar.set_postfix_str(f"t={now:.1f}s v={version}", refresh=False)

    def close(self, now: float | None = None, version: int | None = None) -> None:
        """Close the bar at where the run ended (a round-based algorithm reports its last round before the
        stop time, so without this a bar that ran to the end would stay at 96%); a piped log gets its last
        line."""
        if self.plain:
            if now is not None and version is not None:
                self._say(now, version, last=True)
            self.plain = False
            return
        if self.bar is not None:
            if now is not None and version is not None:
                self(now, version)
            self.bar.close()


VersionHookFactory = Callable[[Context], Any]


def run_variant(
    scenario: Scenario, spec: AlgorithmSpec, out: Path, prepared: Prepared, *, progress: bool = True,
    version_hooks: Sequence[VersionHookFactory] | None = None, outputs: OutputProcess | None = None,
) -> dict[str, Any]:
    """Run one algorithm on the scenario's world; returns the summary (also saved as summary.json).

    ``outputs``: a second process that builds the figures and report (:mod:`fedsim.output.process`); the
    build is handed to it and left in its ``pending`` list for the caller to wait for
    (:func:`finish_outputs`), which records a failure in the summary as building them here would.

    ``version_hooks``: factories ``make(ctx) -> hook or None``; each hook is called as ``hook(ctx, final)`` at
    every snapshot and, if it has ``finish(run_dir)``, once at the end (live theory probes write their CSV
    there).  None: the hooks that installed plugins provide (``fedsim.plugins``), so the measurement code
    is injected by its package and fedsim never imports it."""
    start_folder(out)
    variant = scenario.variant(spec)
    write_text(out / "scenario.yaml", dump_scenario(variant))
    data, parts = prepared.data, prepared.parts
    labels = data.train.y.cpu().numpy()
    write_csv(partition_summary(parts, labels, data.train.num_classes), out / "partition.csv")

    torch.set_num_threads(1)
    env = simpy.Environment()
    streams = Streams(scenario.seed)
    for name in TRACE_FILES.values():
        (out / name).unlink(missing_ok=True)  # a trace of an earlier run in another format
    fmt = scenario.output.trace_format
    trace = Trace(out / TRACE_FILES[fmt], flush_every=scenario.output.flush_every, fmt=fmt, background=True)
    bar = _Progress(scenario, spec.label, progress)
    status, message = "ok", ""
    failure: BaseException | None = None
    wall0 = time.perf_counter()
    ctx: Context | None = None
    executor: Executor | None = None
    hooks: list[Any] = []
    for stale in [*(out / "checkpoints").glob("v*.pt"), out / "probes.csv", out / "probes_live.csv"]:
        stale.unlink(missing_ok=True)  # outputs of an earlier run in the same directory
    deterministic_before: bool | None = None
    try:
        device = run_device(scenario.train)
        if scenario.train.deterministic:
            deterministic_before = set_deterministic(True, device)
        data = data_on(data, device)  # already there when preflight moved it (the same object then)
        world = World.from_scenario(env, streams, trace, len(parts), scenario)
        model = build_global_model(scenario, data)
        if not spec.cls.fits_devices(spec.params):  # else the algorithm fits clients itself
            check_memory_fits(world, model, scenario, tuple(data.train.input_shape))
        tr = scenario.train
        executor = make_executor(tr.executor, tr.workers, tr.ray_address)
        ctx = Context(scenario, env, streams, trace, world, data, parts, model, progress=bar, run_dir=out,
                      executor=executor)
        for make in (version_hooks if version_hooks is not None else plugin_version_hooks()):
            hook = make(ctx)
            if hook is not None:
                ctx.versions.version_hooks.append(hook)
                hooks.append(hook)
        if scenario.eval.probe_every is not None and not hooks:
            raise ConfigError("eval.probe_every", "needs a probe hook (the analysis package provides one: install "
                                                  "fedsim with its analysis package, or pass version_hooks)")
        ctx.versions.evaluate(round_=0)
        ctx.versions.snapshot()
        algo = build_algorithm(spec.cls, ctx, spec.params)
        env.process(algo.run())
        env.process(ctx.versions.stop_clock())
        env.process(ctx.versions.eval_clock())
        try:
            with few_collections():
                env.run(until=ctx.done)
        except RuntimeError as exc:  # SimPy: nothing left to happen before the stop rule
            if "until" not in str(exc) and "No scheduled events" not in str(exc):
                raise
            ctx.versions.stop_reason = "no more events (no client can participate)"
        world.cut_open_work("run_end")  # work under way when the run stopped: in the trace as in the totals
        last = ctx.versions.metrics[-1] if ctx.versions.metrics else None
        if last is None or last["version"] != ctx.version or last["t"] != env.now:
            ctx.versions.evaluate()
        ctx.versions.snapshot(final=True)
        message = ctx.versions.stop_reason
    except DivergenceError as exc:
        status, message = "diverged", str(exc)
    except KeyboardInterrupt as exc:
        status, message = "interrupted", stop_words(exc)
        failure = exc
    except BaseException as exc:  # recorded, then re-raised: the CLI turns it into one line
        status, message = "error", f"{type(exc).__name__}: {exc}" if not isinstance(exc, FedsimError) else str(exc)
        failure = exc
    finally:
        if deterministic_before is not None:
            torch.use_deterministic_algorithms(deterministic_before)
        bar.close(env.now, ctx.version if ctx is not None else 0)
        trace.close()
        if executor is not None:
            executor.close()
        for hook in hooks:
            finish = getattr(hook, "finish", None)
            if finish is not None:
                finish(out)
        wall = time.perf_counter() - wall0
        summary = _summarise(scenario, spec, out, ctx, env.now, wall, status, message)
        # while the figures and report are drawn the file says so: ``ok`` only once the last one is written
        write_summary(out, summary, building=bool(scenario.output.figures))
        if scenario.output.figures:
            # the one figure drawn from the simulation's objects, not its files: its graph is taken now
            topology = rate_graph(ctx.world) if ctx is not None else None
            # the outputs read the run's files: the simulation's objects (world, clients, models, the
            # event queue) are dropped first, so their memory is free before the trace is read
            ctx = executor = world = model = algo = env = None  # type: ignore[assignment]  # noqa: F841
            hooks.clear()
            args = (str(out), scenario.output.timeline_window, scenario.output.timeline_clients, topology)
            if outputs is not None and summary.get("trace_events", 0) <= MAX_EVENTS:
                outputs.pending.append((outputs.submit(build_run_outputs, *args, fork=True),
                                        (out, summary, "figures and report")))
            else:
                _build_recorded(out, summary, "figures and report", lambda: build_run_outputs(*args))
    if failure is not None:
        raise failure
    return summary


def stop_words(exc: BaseException) -> str:
    """How a run stopped by ``exc`` (an interrupt) says so: ``terminated (SIGTERM)``, ``terminated
    (SIGHUP)`` or ``interrupted by the user`` (Ctrl-C)."""
    return f"terminated ({exc.signame})" if isinstance(exc, Terminated) else "interrupted by the user"


def write_summary(out: Path, summary: dict[str, Any] | list[dict[str, Any]], *, building: bool = False) -> None:
    """summary.json (a run's summary, or a multi-algorithm run's list), written atomically; ``building``:
    each ``ok`` is written as :data:`BUILDING` (the outputs are being drawn)."""
    listed = summary if isinstance(summary, list) else [summary]
    if building:
        listed = [{**s, "status": BUILDING} if s.get("status") == "ok" else s for s in listed]
    write_json(out / "summary.json", listed if isinstance(summary, list) else listed[0], sort_keys=False)


def _build_recorded(out: Path, summary: dict[str, Any] | list[dict[str, Any]], what: str,
                    build: Callable[[], Any]) -> None:
    """``build()`` inside :func:`building_outputs`, then summary.json written with its final status: ``ok``
    only now that every output is written, :data:`OUTPUTS_FAILED` after a failure (figures of a failed build
    never hide it).  A build that returns failed figures (:func:`fedsim.output.process.build_run_outputs`:
    name → one line) leaves the status ``ok`` and records them as :data:`FIGURES_MISSING`: the rest of the
    outputs and report.html were written, so one degenerate figure does not fail the run.  An interrupt
    while drawing (Ctrl-C, SIGTERM, SIGHUP) makes an ``ok`` run ``interrupted``, says so in ``outputs_interrupted``, and is raised again."""
    listed = summary if isinstance(summary, list) else [summary]
    try:
        with building_outputs(out, listed, what):
            missing = build()
            if missing:
                for s in listed:
                    s[FIGURES_MISSING] = dict(missing)
    except KeyboardInterrupt as exc:
        for s in listed:
            if s.get("status") == "ok":  # a run already stopped in its simulation keeps what it says
                s["status"] = "interrupted"
                s["outputs_interrupted"] = f"{what}: {stop_words(exc)} while they were drawn; --resume draws them"
        try:
            write_summary(out, summary)
        finally:
            raise
    write_summary(out, summary)


def undrawn(summary: Any) -> bool:
    """Whether a run's summary says its simulation ended ``ok`` but its figures and report were not all
    written: killed while drawing (:data:`BUILDING`), stopped then (``outputs_interrupted``), or failed
    (:data:`OUTPUTS_FAILED`)."""
    if not isinstance(summary, dict):
        return False
    status = summary.get("status")
    return status in (BUILDING, OUTPUTS_FAILED) or (status == "interrupted" and "outputs_interrupted" in summary)


def can_redraw(scenario: Scenario, out: str | Path) -> bool:
    """Whether the figures and report of the run of ``scenario`` in ``out`` can be drawn again from its files
    (:func:`redraw_outputs`): its summary says they were not all written (:func:`undrawn`) and its metrics
    and trace are there; not for several algorithms (their comparison too), a hierarchical network
    (``topology.png`` is drawn from the live world) or figures off: such a run runs again."""
    from fedsim.rundirs import read_summary

    out = Path(out)
    return (len(scenario.algorithms) == 1 and bool(scenario.output.figures)
            and scenario.network.topology.kind != "hierarchical" and undrawn(read_summary(out / "summary.json"))
            and (out / "metrics.csv").is_file() and trace_path(out).is_file())


def redraw_outputs(scenario: Scenario, out: str | Path) -> list[dict[str, Any]]:
    """Draw again, from its files, the figures and report of a run in ``out`` whose simulation ended ``ok``
    but whose outputs were not all written (:func:`can_redraw` must hold); returns its summaries, as
    :func:`run_scenario` would.  What ``--resume`` does with such a run: a simulation of hours is not
    repeated for its figures."""
    from fedsim.files import TMP_SUFFIX
    from fedsim.rundirs import read_summary

    out = Path(out)
    summary = {k: v for k, v in read_summary(out / "summary.json").items()
               if k not in ("outputs_error", "outputs_interrupted", FIGURES_MISSING)}
    summary["status"] = "ok"
    for stale in [out / OUTPUTS_ERROR_FILE, *out.glob(f".*{TMP_SUFFIX}")]:
        stale.unlink(missing_ok=True)  # the failed build's traceback, files cut short while written
    write_summary(out, summary, building=True)
    out_s = str(out)
    _build_recorded(out, summary, "figures and report", lambda: build_run_outputs(
        out_s, scenario.output.timeline_window, scenario.output.timeline_clients, None))
    return [summary]


def finish_outputs(outputs: OutputProcess) -> None:
    """Wait for the builds handed to the second process, in order, and record each failure as a build
    in this process would be (:func:`_build_recorded`)."""
    while outputs.pending:
        job, (out, summary, what) = outputs.pending.pop(0)
        _build_recorded(out, summary, what, job.result)


#: ``status`` of a run whose simulation ended but whose figures or report failed to build: never ``ok``.
OUTPUTS_FAILED = "outputs_failed"
#: The traceback of a failed output build, beside the outputs written before it failed.
OUTPUTS_ERROR_FILE = "outputs_error.txt"
#: summary.json's field for the figures that failed to draw while the rest of the outputs were written
#: (status stays ``ok``): figure name → one line; their tracebacks are in ``figures_error.txt``.
FIGURES_MISSING = "figures_missing"


class _Built:
    """Whether a :func:`building_outputs` block finished (false once it failed)."""

    def __init__(self) -> None:
        self.ok = True

    def __bool__(self) -> bool:
        return self.ok


@contextmanager
def building_outputs(out: Path, summaries: list[dict[str, Any]], what: str) -> Any:
    """Build a run's derived outputs (figures, report) inside this block; a failure there is recorded, not
    raised, so the simulation's own outputs and whatever was built before the failure are kept.

    Each summary of ``summaries`` whose status was ``ok`` becomes :data:`OUTPUTS_FAILED`, and every one
    gets ``outputs_error`` (one line: what failed, the exception, where the traceback is); the traceback
    goes to :data:`OUTPUTS_ERROR_FILE` in ``out``.  The caller writes the summaries again.  An interrupt is
    not a failure of the outputs: it propagates (:func:`_build_recorded` records it)."""
    import traceback

    built = _Built()
    try:
        yield built
    except Exception as exc:
        built.ok = False
        text = " ".join(str(exc).split())[:300] or "(no message)"
        where = f"traceback in {out / OUTPUTS_ERROR_FILE}"
        try:
            write_text(out / OUTPUTS_ERROR_FILE, traceback.format_exc())
        except OSError as err:  # a full disk: the summary still says what failed
            where = f"its traceback could not be written: {type(err).__name__}: {err}"
        line = f"{what}: {type(exc).__name__}: {text} ({where})"
        for summary in summaries:
            if summary.get("status") == "ok":
                summary["status"] = OUTPUTS_FAILED
            summary["outputs_error"] = line


#: The decisions a theorem covers (the server rule and step, the weights, client selection, the local update,
#: the loop itself): a subclass that overrides one of them below the class that declared ``theorems`` runs
#: another algorithm, so it inherits no theorem unless it declares ``theorems`` again.
DECISION_HOOKS = ("run", "server_rule", "server_update", "server_phase", "select", "sample_clients", "eligible",
                  "assign", "client_job", "client_model", "dispatch", "launch", "local_iterations", "schedule",
                  "client_optimizer", "quorum", "clock", "buffer_size", "max_staleness")


def overridden_decisions(cls: type, owner: type) -> list[str]:
    """The :data:`DECISION_HOOKS` that a class between ``cls`` and ``owner`` (the class that declared its
    ``theorems``; ``owner`` excluded) defines itself, as ``Class.hook``."""
    out = []
    for c in cls.__mro__:
        if c is owner:
            break
        out.extend(f"{c.__qualname__}.{h}" for h in DECISION_HOOKS if h in vars(c))
    return out


def _summarise(scenario: Scenario, spec: AlgorithmSpec, out: Path, ctx: Context | None, now: float, wall: float,
               status: str, message: str) -> dict[str, Any]:
    summary: dict[str, Any] = {"scenario": scenario.name, "algorithm": spec.name, "label": spec.label, "seed": scenario.seed,
                               "status": status, "stop_reason": message, "virtual_time_s": float(now), "wall_time_s": wall,
                               "theorems": list(spec.cls.theorems)}  # what `fedsim check` holds the run against
    owner = next((c for c in spec.cls.__mro__ if "theorems" in vars(c)), spec.cls)
    if owner is not spec.cls and spec.cls.theorems:  # inherited: the check says from where, so it is never silent
        summary["theorems_declared_by"] = f"{owner.__module__}:{owner.__qualname__}"
        changed = overridden_decisions(spec.cls, owner)
        if changed:  # a decision the theorem covers is not the declaring class's: the theorem is not inherited
            summary["theorems"] = []
            summary["theorems_withheld"] = {"theorems": list(spec.cls.theorems), "overrides": changed,
                                            "declared_by": summary["theorems_declared_by"]}
    if ctx is None:
        return summary
    metrics = pd.DataFrame(ctx.versions.metrics)
    write_csv(metrics, out / "metrics.csv")
    with writing(out / "final_model.pt", "wb") as fh:
        torch.save(cpu_state(ctx.global_state), fh)  # loads without the run's accelerator
    if ctx.versions.client_metrics:
        write_csv(pd.DataFrame(ctx.versions.client_metrics), out / "client_metrics.csv")
    df = load_trace(trace_path(out), kinds=("apply", "drop"), columns=("staleness",))
    applied = df[df["kind"] == "apply"] if len(df) else df
    acc = metrics["accuracy"] if len(metrics) else pd.Series(dtype=float)
    world = ctx.world
    world.finish(now)
    energy = world.energy_table()
    if len(energy):
        write_csv(energy, out / "energy.csv")
    summary.update(
        {
            "final_accuracy": float(acc.iloc[-1]) if len(acc) else None,
            "best_accuracy": float(acc.max()) if len(acc) else None,
            "final_loss": float(metrics["loss"].iloc[-1]) if len(metrics) else None,
            "versions": ctx.version,
            "updates_applied": int(len(applied)),
            "mean_staleness": float(applied["staleness"].mean()) if len(applied) else 0.0,
            "max_staleness": int(applied["staleness"].max()) if len(applied) else 0,
            "bytes_up": int(world.bytes_up),
            "bytes_down": int(world.bytes_down),
            "dropped": int((df["kind"] == "drop").sum()) if len(df) else 0,
            "server": world.server.summary(),
            "energy_j": float(energy["total_j"].sum()) if len(energy) else 0.0,
            "energy_j_by_device_class": ({k: float(v) for k, v in energy.groupby("device_class")["total_j"].sum().items()}
                                         if len(energy) else {}),
            "num_clients": ctx.num_clients,
            "device": str(ctx.device),
            "model_params": int(ctx.training.num_params),
            "flops_per_sample": {"forward": ctx.training.flop_cost.forward, "backward": ctx.training.flop_cost.backward},
            "trace_events": int(ctx.trace.count),
        }
    )
    return _finite(summary)


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: non-finite numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


#: Collector thresholds while the event loop runs (Python's default: 700, 10, 10): allocations between
#: young-generation collections, and young (middle) collections between middle (old) ones.
GC_THRESHOLDS = (50_000, 100, 100)


@contextmanager
def few_collections() -> Any:
    """Collect cyclic garbage rarely while the event loop runs.

    The loop allocates many short-lived objects (SimPy events, generator frames, trace records) beside a
    large long-lived heap (torch, the data): at Python's default threshold the collector runs every 700
    allocations and its older generations rescan that heap, which cost 40% of a systems-only run
    (``benchmarks/scale.py``: 30 k → 54 k trace events/s at 10^4 clients; with every one of 10^5 clients
    in one round, whose processes all stay alive until it closes, raising the older generations' thresholds
    too takes the round from 12.0 s to 10.4 s, against 9.5 s with no collection at all; peak memory
    unchanged).  Nothing here relies on prompt collection (no finalisers with effects); the thresholds are
    restored afterwards.  The heap as it is when the loop starts (torch, data, model) is frozen too
    (``gc.freeze``), so the oldest generation's collections during the loop scan only what the loop made
    (``gas-cell-timing``: three full collections, about 0.5 s, before); it is unfrozen afterwards.
    """
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


def run_scenario(scenario: Scenario, out: str | Path, *, progress: bool = True, force: bool = False,
                 allow_large: bool = False,
                 version_hooks: Sequence[VersionHookFactory] | None = None,
                 on_ready: Callable[[], None] | None = None,
                 outputs_process: bool = False) -> list[dict[str, Any]]:
    """Run every algorithm variant of ``scenario`` into ``out`` (a sub-directory per variant if several).

    All validation happens first (:func:`preflight`); then ``out`` must be new or empty (``force``: cleared).
    ``on_ready`` is called once both passed, before the first run (the CLI says what it runs there, so a
    bad input is never preceded by that line).  ``outputs_process``: build the figures and report in a
    second process where :func:`fedsim.output.process.wanted` says it pays (``fedsim run`` does; a script
    asking for it needs the ``if __name__ == "__main__":`` guard that spawning a process needs)."""
    from fedsim.scenario import check_label

    for i, spec in enumerate(scenario.algorithms):  # labels name sub-folders: never a way out of ``out``
        check_label(spec.label, f"algorithm[{i}].label")
    # started first, so it imports the plotting stack while the data loads and the run simulates
    outputs = OutputProcess() if outputs_process and output_process_wanted(scenario) else None
    try:
        prepared = preflight(scenario, allow_large=allow_large)
        if outputs is not None and prepared.events > MAX_EVENTS:  # a big run: its outputs are built here
            outputs.close()
            outputs = None
        out = prepare_run_dir(out, force=force)
        if on_ready is not None:
            on_ready()
        for line in prepared.warnings:
            print(f"fedsim: warning: {line}", file=sys.stderr, flush=True)
        if progress:
            for note in prepared.notes:
                print(f"fedsim: {note}", flush=True)
        summaries = []
        several = len(scenario.algorithms) > 1
        for spec in scenario.algorithms:
            target = out / spec.label if several else out
            summaries.append(run_variant(scenario, spec, target, prepared, progress=progress,
                                         version_hooks=version_hooks, outputs=outputs))
        if outputs is not None:
            finish_outputs(outputs)  # each variant's own outputs (and status) before the comparison's
        if several:
            write_summary(out, summaries, building=bool(scenario.output.figures))
            if scenario.output.figures:
                # a failure here marks the comparison's summary (the variants' own outputs were built)
                listed = [dict(s) for s in summaries]
                args = (str(out), [s["label"] for s in summaries])
                if outputs is not None:
                    outputs.pending.append((outputs.submit(build_comparison_outputs, *args),
                                            (out, listed, "comparison figures and report")))
                    finish_outputs(outputs)
                else:
                    _build_recorded(out, listed, "comparison figures and report",
                                    lambda: build_comparison_outputs(*args))
                summaries = listed  # the same as before unless the comparison's build failed
    finally:
        if outputs is not None:
            try:  # builds already handed over (an interrupted run's too) are finished, as they would be here
                finish_outputs(outputs)
            finally:
                outputs.close()
    return summaries
