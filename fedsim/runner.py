"""Run a scenario: build data, world and model, run each algorithm variant, write the run directory.

Run directory (one per variant; a scenario with several algorithms also gets a top-level comparison)::

    <out>/scenario.yaml     the resolved scenario (every default filled in)
    <out>/partition.csv     samples and label histogram per client
    <out>/trace.jsonl       the event trace, written while the run goes (``trace.compact.gz`` with
                            ``output.trace_format: compact``)
    <out>/metrics.csv       one row per evaluation (virtual time, version, accuracy, loss, bytes)
    <out>/summary.json      final numbers and why the run stopped
    <out>/final_model.pt    the final global state dict (CPU tensors, whatever ``train.device`` was)
    <out>/*.png             accuracy vs virtual time, per-client timeline
    <out>/checkpoints/v{version:06d}.pt   with ``output.checkpoints: N``: the global state dict at version 0,
                            every N versions and the final version (``fedsim check`` probes them)
    <out>/probes_live.csv   with ``eval.probe_every: N``: theory probes of the live global model (a version
                            hook the analysis package plugs in), at version 0, every N versions and the end

Data, partition and the initial model are rebuilt from ``scenario.yaml`` alone by :func:`prepare_data`
and :func:`build_global_model`; analysis code uses exactly these to re-measure saved checkpoints.

A run that fails midway (diverged training, interrupt, SIGTERM, an unexpected error) still writes metrics,
summary and figures for what it did, with ``status`` saying what happened (``ok``, ``diverged``,
``interrupted``, ``error``).  A run whose figures or report fail to build keeps everything written before
the failure and says ``outputs_failed`` (with ``outputs_error``, and the traceback in ``outputs_error.txt``);
the command line then exits 3.

Before anything is written, :func:`preflight` runs every check that can fail (dataset, partition, model,
device and server profiles, memory, ``train.device``, the work estimate), and :func:`prepare_run_dir`
refuses a non-empty run folder unless ``force`` (which clears it): a folder never mixes two runs.
"""
from __future__ import annotations

import functools
import gc
import json
import math
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import simpy
import torch

from fedsim.errors import ConfigError, DivergenceError, FedsimError, Terminated
from fedsim.learn.accelerator import (cpu_state, data_on, deterministic_workspace, memory_available, run_device,
                                      set_deterministic)
from fedsim.learn.costs import memory_estimate
from fedsim.learn.data import FederatedData, load_dataset
from fedsim.learn.models import build_model
from fedsim.learn.partition import partition, partition_summary
from fedsim.learn.train import num_steps
from fedsim.plugins import plugin_version_hooks
from fedsim.runtime import Context
from fedsim.training import sgd_config
from fedsim.scenario import AlgorithmSpec, Scenario, dump_scenario
from fedsim.sim.executor import Executor, make_executor
from fedsim.sim.rng import Streams
from fedsim.sim.trace import TRACE_FILES, Trace, load_trace, trace_path
from fedsim.system.devices import check_memory
from fedsim.system.world import World


@dataclass
class Prepared:
    data: FederatedData
    parts: list[np.ndarray]
    #: one-line findings of :func:`preflight` worth telling the user (e.g. the host device's memory)
    notes: list[str] = dc_field(default_factory=list)


def prepare_data(scenario: Scenario) -> Prepared:
    """Load the dataset and partition it across clients (both from named streams)."""
    streams = Streams(scenario.seed)
    d = scenario.data
    data = load_dataset(d.name, root=d.root, num_clients=d.num_clients, rng=streams.numpy("data", "load"), options=d.options,
                        base_dirs=(scenario.source_dir,))
    p = d.partition
    if data.train.task != "classification" and p.method in ("dirichlet", "dirichlet_client", "shards"):
        raise ConfigError("data.partition.method", f"'{p.method}' splits by class label, but dataset '{d.name}' is a "
                                                   f"{data.train.task} task without classes (allowed: iid, quantity, "
                                                   f"natural)")
    if p.method == "shards" and p.labels_per_client > data.train.num_classes:
        raise ConfigError("data.partition.labels_per_client", f"got {p.labels_per_client}, but dataset '{d.name}' has "
                          f"{data.train.num_classes} classes (allowed: 1 to {data.train.num_classes})")
    try:
        parts = partition(
            data.train.y.numpy(), d.num_clients, p.method, streams.numpy("data", "partition"), alpha=p.alpha,
            labels_per_client=p.labels_per_client, sigma=p.sigma, min_size=p.min_size, natural=data.natural_partition,
            size_weights=p.size_weights,
        )
    except ConfigError as exc:  # the partition module names its own arguments; say the scenario's path
        field = exc.field
        if field == "partition.num_clients":
            field = "data.num_clients"
        elif field.startswith("partition."):
            field = "data." + field
        raise ConfigError(field, exc.message) from None
    empty = [i for i, ix in enumerate(parts) if len(ix) == 0]
    if empty:
        raise ConfigError(
            "data.num_clients",
            f"{len(empty)} of {len(parts)} clients got no training samples from {d.name} ({len(data.train)} samples); "
            "use fewer clients or a partition with min_size >= 1",
        )
    return Prepared(data, parts)


#: Most parameter memory a simulated model may have (1 GiB of float32: 268 million parameters).  Models of
#: on-device training are far smaller; a larger one is a typo (``hidden: [100000, 100000]``), and building it
#: would exhaust the machine before any check could name the field.
MAX_MODEL_BYTES = 2**30


def build_global_model(scenario: Scenario, data: FederatedData) -> torch.nn.Module:
    """The scenario's model for its dataset.  It is first built without memory (PyTorch's meta device), so
    a model too large to build, or one that cannot take the dataset's inputs, is one ConfigError."""
    m = scenario.model
    shape, task = tuple(data.train.input_shape), getattr(data.train, "task", "classification")
    from fedsim.learn.models import REGRESSION_MODELS

    if m.name in REGRESSION_MODELS and task == "classification":
        raise ConfigError("model.name", f"got {m.name!r}, the regression model (one output, squared loss), but dataset "
                          f"'{data.train.name}' is a classification task (allowed: any other model)")
    build = functools.partial(build_model, m.name, shape, data.train.num_outputs, hidden=m.hidden, width=m.width,
                              depth=m.depth, bn=m.bn, options=m.options,
                              base_dirs=(scenario.source_dir,))
    try:
        with torch.device("meta"):
            probe = build(seed_generator=None)
    except ConfigError:
        raise
    except (RuntimeError, ValueError) as exc:  # e.g. a pooling layer left with a 0x0 image
        raise ConfigError("model.name", f"model {m.name!r} cannot take the inputs of dataset '{data.train.name}' "
                          f"(shape {shape}): {' '.join(str(exc).split())[:200]}") from None
    size = sum(p.numel() * p.element_size() for p in probe.parameters())
    if size > MAX_MODEL_BYTES:
        n = sum(p.numel() for p in probe.parameters())
        raise ConfigError("model", f"model {m.name!r} on inputs {shape} would have {n:,} parameters ({size / 1e9:.3g} GB; "
                          f"allowed: at most {MAX_MODEL_BYTES / 1e9:.3g} GB); lower model.hidden, model.width or model.depth")
    return build(seed_generator=Streams(scenario.seed).torch("model", "init"))


def _check_memory(world: World, model: torch.nn.Module, scenario: Scenario, input_shape: tuple[int, ...]) -> None:
    """Refuse a model that does not fit a device of the mix (names the device, the need and the budget)."""
    if not scenario.devices.check_memory:
        return
    need = memory_estimate(model, input_shape, scenario.train.batch_size, momentum=scenario.train.momentum > 0).total
    for prof in world.profiles.values():
        check_memory(prof, need, f"training model '{scenario.model.name}' (batch {scenario.train.batch_size})")


class _Progress:
    """A tqdm bar over model versions (or virtual seconds when only a time limit is set)."""

    def __init__(self, scenario: Scenario, label: str, enabled: bool) -> None:
        self.bar = None
        if not enabled:
            return
        from tqdm import tqdm

        st = scenario.stop
        self.by_time = st.max_versions is None
        total = st.max_time_s if self.by_time else st.max_versions
        unit = "s" if self.by_time else "ver"
        self.bar = tqdm(total=total, desc=label, unit=unit, leave=True, dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} {unit} [{elapsed}<{remaining}{postfix}]")

    def __call__(self, now: float, version: int) -> None:
        if self.bar is None:
            return
        target = now if self.by_time else version
        self.bar.update(max(0.0, min(target, self.bar.total) - self.bar.n))
        self.bar.set_postfix_str(f"t={now:.1f}s v={version}", refresh=False)

    def close(self, now: float | None = None, version: int | None = None) -> None:
        """Close the bar at where the run ended (a round-based algorithm reports its last round before the
        stop time, so without this a bar that ran to the end would stay at 96%)."""
        if self.bar is not None:
            if now is not None and version is not None:
                self(now, version)
            self.bar.close()


VersionHookFactory = Callable[[Context], Any]


def run_variant(
    scenario: Scenario, spec: AlgorithmSpec, out: Path, prepared: Prepared, *, progress: bool = True,
    version_hooks: Sequence[VersionHookFactory] | None = None,
) -> dict[str, Any]:
    """Run one algorithm on the scenario's world; returns the summary (also saved as summary.json).

    ``version_hooks``: factories ``make(ctx) -> hook or None``; each hook is called as ``hook(ctx, final)`` at
    every snapshot and, if it has ``finish(run_dir)``, once at the end (live theory probes write their CSV
    there).  None: the hooks that installed plugins provide (``fedsim.plugins``), so the measurement code
    is injected by its package and fedsim never imports it."""
    out.mkdir(parents=True, exist_ok=True)
    variant = scenario.variant(spec)
    (out / "scenario.yaml").write_text(dump_scenario(variant), encoding="utf-8")
    data, parts = prepared.data, prepared.parts
    labels = data.train.y.cpu().numpy()
    partition_summary(parts, labels, data.train.num_classes).to_csv(out / "partition.csv", index=False)

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
            _check_memory(world, model, scenario, tuple(data.train.input_shape))
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
        algo = spec.cls(ctx, spec.params)
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
        last = ctx.versions.metrics[-1] if ctx.versions.metrics else None
        if last is None or last["version"] != ctx.version or last["t"] != env.now:
            ctx.versions.evaluate()
        ctx.versions.snapshot(final=True)
        message = ctx.versions.stop_reason
    except DivergenceError as exc:
        status, message = "diverged", str(exc)
    except KeyboardInterrupt as exc:
        status, message = "interrupted", ("terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted by the user")
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
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False), encoding="utf-8")
        if scenario.output.figures:
            with building_outputs(out, [summary], "figures and report") as built:
                import fedsim.report as report

                report.run_figures(out, timeline_window=scenario.output.timeline_window,
                                   timeline_clients=scenario.output.timeline_clients)
                if ctx is not None:
                    report.topology_figure(ctx.world, out / "topology.png")
                report.html_report(out)
            if not built:  # the summary says so (written again); figures of a failed run never hide its failure
                (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False), encoding="utf-8")
    if failure is not None:
        raise failure
    return summary


#: ``status`` of a run whose simulation ended but whose figures or report failed to build: never ``ok``.
OUTPUTS_FAILED = "outputs_failed"
#: The traceback of a failed output build, beside the outputs written before it failed.
OUTPUTS_ERROR_FILE = "outputs_error.txt"


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
    not a failure of the outputs: it propagates."""
    import traceback

    built = _Built()
    try:
        yield built
    except Exception as exc:
        built.ok = False
        text = " ".join(str(exc).split())[:300] or "(no message)"
        (out / OUTPUTS_ERROR_FILE).write_text(traceback.format_exc(), encoding="utf-8")
        line = f"{what}: {type(exc).__name__}: {text} (traceback in {out / OUTPUTS_ERROR_FILE})"
        for summary in summaries:
            if summary.get("status") == "ok":
                summary["status"] = OUTPUTS_FAILED
            summary["outputs_error"] = line


def _summarise(scenario: Scenario, spec: AlgorithmSpec, out: Path, ctx: Context | None, now: float, wall: float,
               status: str, message: str) -> dict[str, Any]:
    summary: dict[str, Any] = {"scenario": scenario.name, "algorithm": spec.name, "label": spec.label, "seed": scenario.seed,
                               "status": status, "stop_reason": message, "virtual_time_s": float(now), "wall_time_s": wall,
                               "theorems": list(spec.cls.theorems)}  # what `fedsim check` holds the run against
    owner = next((c for c in spec.cls.__mro__ if "theorems" in vars(c)), spec.cls)
    if owner is not spec.cls and spec.cls.theorems:  # inherited: the check says from where, so it is never silent
        summary["theorems_declared_by"] = f"{owner.__module__}:{owner.__qualname__}"
    if ctx is None:
        return summary
    metrics = pd.DataFrame(ctx.versions.metrics)
    metrics.to_csv(out / "metrics.csv", index=False)
    torch.save(cpu_state(ctx.global_state), out / "final_model.pt")  # loads without the run's accelerator
    if ctx.versions.client_metrics:
        pd.DataFrame(ctx.versions.client_metrics).to_csv(out / "client_metrics.csv", index=False)
    df = load_trace(trace_path(out), kinds=("apply", "drop"), columns=("staleness",))
    applied = df[df["kind"] == "apply"] if len(df) else df
    acc = metrics["accuracy"] if len(metrics) else pd.Series(dtype=float)
    world = ctx.world
    world.finish(now)
    energy = world.energy_table()
    if len(energy):
        energy.to_csv(out / "energy.csv", index=False)
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


#: Work beyond these needs ``allow_large`` (``--allow-large``): real SGD steps, simulated events, slots.
LARGE_SGD_STEPS = 10**8
LARGE_EVENTS = 10**7
LARGE_SLOTS = 10**5
#: Evaluations a run may do before ``eval.every_s`` is refused as dominating the run.
MAX_EVALUATIONS = 10**5


@dataclass
class Estimate:
    """What a run will cost, known before it starts (upper bounds where the stop rules allow)."""

    steps_per_task: int
    tasks: float
    sgd_steps: float
    events: float
    slots: int
    fastest_task_s: float
    bound: str = "stop"
    server_steps: int = 0  # the server's own SGD steps per model version


def _fastest_task_s(scenario: Scenario, world: World, model: torch.nn.Module, prepared: Prepared, steps: list[int]) -> float:
    """Jitter-free lower estimate of one task: download + compute + upload of the fastest client."""
    from fedsim.learn.costs import flops_per_sample, state_bytes
    from fedsim.learn.train import samples_processed
    from fedsim.system.devices import compute_time

    cost = flops_per_sample(model, tuple(prepared.data.train.input_shape)).total
    nbytes = state_bytes(model.state_dict()) * 8.0
    lat = scenario.network.latency_s
    best = math.inf
    for c, idx in enumerate(prepared.parts):
        samples = samples_processed(len(idx), steps[c], scenario.train.batch_size)
        own = world._flops_per_s[c]
        comp = cost * samples / own if own > 0 else compute_time(world.device(c), cost * samples,
                                                                 model=scenario.model.name, samples=samples)
        up, down = world.uplink_bps(c), world.downlink_bps(c)
        best = min(best, comp + nbytes / down + nbytes / up + 2 * lat)
    return float(best)


def estimate_work(scenario: Scenario, spec: AlgorithmSpec, world: World, model: torch.nn.Module,
                  prepared: Prepared) -> Estimate:
    """Tasks, SGD steps and events the stop rules allow, from the algorithm's knobs and the fastest task."""
    work = spec.cls.work(spec.params)  # declared by the algorithm, never guessed from its config
    sgd = sgd_config(scenario)
    fixed = work.steps_per_task
    steps = [int(fixed) if fixed is not None else num_steps(len(ix), sgd) for ix in prepared.parts]
    slots = int(work.slots)
    per_version = max(1, int(work.per_version))  # updates one model version needs
    fastest = _fastest_task_s(scenario, world, model, prepared, steps)
    st = scenario.stop
    bounds = []
    if st.max_versions is not None:
        bounds.append((float(st.max_versions) * per_version, "stop.max_versions"))
    if st.max_updates is not None:
        bounds.append((float(st.max_updates) + slots, "stop.max_updates"))
    if st.max_time_s is not None and fastest > 0:
        bounds.append((st.max_time_s / fastest * min(slots, len(prepared.parts)) + slots, "stop.max_time_s"))
    tasks, bound = min(bounds) if bounds else (math.inf, "stop")
    tasks = max(tasks, float(min(slots, len(prepared.parts))))  # every slot starts a task at once
    per_task = max(steps)
    server = int(work.server_steps)
    versions = float(st.max_versions) if st.max_versions is not None else tasks / per_version + 1
    sgd_steps = 0.0 if scenario.train.systems_only else tasks * per_task + versions * server
    events = tasks * (per_task if work.exchanges_per_step else 1) * 4 + slots
    return Estimate(per_task, tasks, sgd_steps, events, slots, fastest, bound, server)


def _check_estimate(scenario: Scenario, spec: AlgorithmSpec, est: Estimate, allow_large: bool) -> list[str]:
    """Refuse runaway runs (unless ``allow_large``), eval intervals that dominate a run, hopeless deadlines."""
    alg = "algorithm" if len(scenario.algorithms) == 1 else f"algorithm.{spec.label}"
    work = spec.cls.work(spec.params)
    notes = []
    if not allow_large:
        if est.slots > LARGE_SLOTS:
            raise ConfigError(f"{alg}.{work.slots_field}", f"{est.slots} parallel slots is absurd for "
                              f"{scenario.data.num_clients} clients (allowed: at most {LARGE_SLOTS:,}; --allow-large to run anyway)")
        if est.sgd_steps > LARGE_SGD_STEPS:
            steps_field = (f"{alg}.{work.steps_field}" if work.steps_per_task is not None else "train.local_steps")
            field = steps_field if est.steps_per_task > LARGE_SGD_STEPS / 100 else est.bound
            server = ""
            if est.server_steps > LARGE_SGD_STEPS / 100:
                field = f"{alg}.{work.server_field}" if work.server_field else est.bound
            if est.server_steps:
                server = f" + {est.server_steps:,} server steps per version"
            raise ConfigError(field, f"the run would take about {est.sgd_steps:.3g} SGD steps "
                              f"({est.steps_per_task:,} per task × {est.tasks:.3g} tasks{server}; allowed without "
                              f"--allow-large: {LARGE_SGD_STEPS:.0e}); lower the steps or the stop rules, or pass --allow-large")
        if est.events > LARGE_EVENTS:
            raise ConfigError(est.bound, f"the run would simulate about {est.events:.3g} events (allowed without "
                              f"--allow-large: {LARGE_EVENTS:.0e}); lower the stop rules or pass --allow-large")
    horizon = scenario.stop.max_time_s
    if horizon is None and math.isfinite(est.tasks):
        horizon = est.tasks * est.fastest_task_s / max(1, min(est.slots, scenario.data.num_clients))
    retry = work.retry_s
    idle_possible = est.slots > scenario.data.num_clients or scenario.availability.model != "always"
    if retry is not None and idle_possible and horizon is not None and not allow_large:
        # a slot (or round) that finds nobody reachable waits retry_s and tries again
        retries = horizon / retry * max(1, est.slots)
        if retries > LARGE_EVENTS:
            raise ConfigError(f"{alg}.retry_s", f"got {retry!r}: idle slots would retry about {retries:.3g} times in "
                              f"{horizon:.3g} s of virtual time (allowed without --allow-large: {LARGE_EVENTS:.0e}; "
                              f"i.e. retry_s >= {horizon * max(1, est.slots) / LARGE_EVENTS:.3g})")
    every = scenario.eval.every_s
    if every is not None:
        if horizon is not None and horizon / every > MAX_EVALUATIONS:
            raise ConfigError("eval.every_s", f"got {every!r}: about {horizon / every:.3g} evaluations in "
                              f"{horizon:.3g} s of virtual time would dominate the run (allowed: at most "
                              f"{MAX_EVALUATIONS:,} evaluations, i.e. every_s >= {horizon / MAX_EVALUATIONS:.3g})")
    deadline = work.deadline_s
    # sub-model algorithms train smaller models than the full one the estimate costs: no lower bound there
    if deadline is not None and not spec.cls.fits_devices(spec.params) and deadline < est.fastest_task_s:
        raise ConfigError(f"{alg}.deadline_s", f"got {deadline!r}: shorter than the fastest client's task "
                          f"({est.fastest_task_s:.4g} s of download, compute and upload without jitter), so "
                          f"every round would drop every client (allowed: >= {est.fastest_task_s:.4g})")
    return notes


def preflight(scenario: Scenario, *, allow_large: bool = False) -> Prepared:
    """Every check that can fail, before anything is written: data, partition, model, profiles, memory,
    settings with no effect, the work estimate.  Returns the prepared data for the run."""
    from fedsim.sim.trace import Trace as _Trace

    device = run_device(scenario.train)  # an accelerator this machine lacks is refused before any work
    if scenario.train.deterministic:
        deterministic_workspace(device)  # before the first cuBLAS call, which fixes its workspace
    if scenario.train.systems_only and scenario.stop.target_accuracy is not None:
        raise ConfigError("stop.target_accuracy", f"got {scenario.stop.target_accuracy!r}, but a systems-only run "
                          "(train.systems_only: true) measures no accuracy, so this stop rule can never fire")
    prepared = prepare_data(scenario)
    world = World.from_scenario(simpy.Environment(), Streams(scenario.seed), _Trace(None), len(prepared.parts), scenario)
    model = build_global_model(scenario, prepared.data)
    prepared.data = data_on(prepared.data, device)  # moved once; every variant's context shares it
    for spec in scenario.algorithms:
        if not spec.cls.fits_devices(spec.params):  # else the algorithm fits clients itself
            _check_memory(world, model, scenario, tuple(prepared.data.train.input_shape))
        note = _check_host_memory(scenario, spec, model, prepared, device)
        if note and note not in prepared.notes:
            prepared.notes.append(note)
        _check_estimate(scenario, spec, estimate_work(scenario, spec, world, model, prepared), allow_large)
        # the algorithm's own set-up checks (cut layer, task kind, ...) on a throwaway context
        variant = scenario.variant(spec)
        env = simpy.Environment()
        streams = Streams(scenario.seed)
        trial = _Trace(None)
        w = World.from_scenario(env, streams, trial, len(prepared.parts), variant)
        ctx = Context(variant, env, streams, trial, w, prepared.data, prepared.parts, build_global_model(scenario, prepared.data))
        spec.cls(ctx, spec.params)
    return prepared


def _check_host_memory(scenario: Scenario, spec: AlgorithmSpec, model: torch.nn.Module, prepared: Prepared,
                       device: torch.device) -> str:
    """Batched rounds train a round's clients at once on the host device: refuse a round that does not fit
    its memory (one line: need, what is free, where), else return that finding as one line ("" when the
    run trains nothing batched, or the device's memory cannot be read).

    The need is, per client of a round (at most the algorithm's parallel slots), the model's training
    memory at ``train.batch_size`` (:func:`~fedsim.learn.costs.memory_estimate`: parameters, gradients,
    momentum, activations), plus the dataset, which lives on the device for the whole run."""
    from fedsim.learn.batched import can_batch

    tr = scenario.train
    if not tr.batched or tr.systems_only or not can_batch(model, prepared.data.train.task):
        return ""
    clients = max(1, min(int(spec.cls.work(spec.params).slots), len(prepared.parts)))
    per_client = memory_estimate(model, tuple(prepared.data.train.input_shape), tr.batch_size,
                                 momentum=tr.momentum > 0).total
    data = sum(t.numel() * t.element_size() for ds in (prepared.data.train, prepared.data.test) for t in (ds.x, ds.y))
    need = per_client * clients + data
    free = memory_available(device)
    if free is None:
        return ""
    have, what = free
    gib = 2.0 ** 30
    line = (f"a batched round of {clients} clients needs about {need / gib:.3g} GiB on {device} "
            f"({per_client / gib:.3g} GiB per client at batch {tr.batch_size}, {data / gib:.3g} GiB of data); "
            f"{have / gib:.3g} GiB {what}")
    if need > have:
        raise ConfigError("train.batched", f"{line} (allowed: a round that fits; fewer clients per round, a smaller "
                                           "batch_size, or train.batched: false)")
    return f"train.batched: {line}"


def _looks_like_run(folder: Path) -> bool:
    """A folder fedsim wrote: a run (scenario.yaml/summary.json), a comparison of runs or a sweep."""
    if any((folder / name).exists() for name in ("summary.json", "scenario.yaml", "sweep.yaml", "comparison.csv")):
        return True
    return any((sub / "scenario.yaml").exists() or (sub / "summary.json").exists() for sub in folder.iterdir() if sub.is_dir())


def check_run_dir(out: str | Path, *, force: bool = False) -> None:
    """Refuse a run folder :func:`prepare_run_dir` would refuse, without touching anything (so a command
    can validate everything before it says what it is about to run)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"'{out}' is a file, not a folder (give a new or empty folder)")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError("--out", f"'{parent}' is a file, so '{out}' cannot be a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ConfigError("--out", f"'{out}' is not empty (an earlier run?); pass --force to clear it first, "
                              "or give a new folder")
        if not _looks_like_run(out):
            raise ConfigError("--out", f"'{out}' is not empty and holds no fedsim run; --force clears only run folders")


def prepare_run_dir(out: str | Path, *, force: bool = False) -> Path:
    """A fresh run folder: created if missing, refused if it is a file or a non-empty folder (unless
    ``force``, which clears a folder that holds fedsim output; other folders are never cleared)."""
    out = Path(out)
    check_run_dir(out, force=force)
    if out.is_dir() and any(out.iterdir()):
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


def _labels_held(out: Path) -> tuple[list[str], bool] | None:
    """The algorithm labels of the run ``out`` holds, read from its layout, and whether that is all of them
    (None when the layout cannot say).  A run of one algorithm keeps scenario.yaml at its top; one of
    several, a folder per label with its own scenario.yaml and, once finished, a list summary.json at its
    top (killed before, its folders so far are some of its labels).  A sweep or --seeds folder holds no
    run at its top: ``([], True)``."""
    import yaml

    if not (out / "scenario.yaml").exists() and ((out / "sweep.yaml").exists() or (out / "seeds.csv").exists()
                                                 or any(p.is_dir() and p.name.startswith("seed-") for p in out.iterdir())):
        return [], True
    try:
        if (out / "scenario.yaml").exists():
            algorithm = yaml.safe_load((out / "scenario.yaml").read_text(encoding="utf-8")).get("algorithm", {})
            return [str(algorithm.get("label", algorithm.get("name")))], True
        if (out / "summary.json").exists():
            listed = json.loads((out / "summary.json").read_text(encoding="utf-8"))
            return ([str(s["label"]) for s in listed], True) if isinstance(listed, list) else None
    except (OSError, ValueError, AttributeError, KeyError, TypeError, yaml.YAMLError):
        return None
    subs = sorted(p.name for p in out.iterdir() if (p / "scenario.yaml").exists())
    return (subs, False) if subs else None


def _algorithms_text(labels: list[str]) -> str:
    if not labels:
        return "no single run (a sweep or --seeds folder)"
    return f"{len(labels)} algorithms ({', '.join(labels)})" if len(labels) > 1 else f"one algorithm ({labels[0]})"


def run_state(out: str | Path, scenario: Scenario) -> tuple[str, list[dict[str, Any]] | None, str]:
    """What ``out`` holds of a run of ``scenario``, for resuming: ``("new", None, "")`` (missing or empty),
    ``("finished", summaries, "")`` (every algorithm's summary says ``ok`` and its saved scenario.yaml is
    ``scenario``'s, resolved), ``("incomplete", None, why)`` (killed, interrupted, failed or diverged: the
    summary is missing or its status is not ``ok``) or ``("different", None, why)`` (a run of another
    scenario, or no fedsim run).  A run killed outright writes no summary, so it is never taken as done."""
    import difflib

    out = Path(out)
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return "new", None, ""
    if not out.is_dir() or not _looks_like_run(out):
        return "different", None, f"'{out}' holds no fedsim run"
    several = len(scenario.algorithms) > 1
    labels = [spec.label for spec in scenario.algorithms]
    held = _labels_held(out)
    if held is not None:  # a folder laid out for other algorithms is another scenario's run: never cleared
        have, whole = held
        if (have != labels) if whole else (not several or not set(have) <= set(labels)):
            return "different", None, (f"'{out}' holds {'a run of ' if have else ''}{_algorithms_text(have)}, not a "
                                       f"run of {_algorithms_text(labels)}")
    folders = [(spec, out / spec.label if several else out) for spec in scenario.algorithms]
    for spec, d in folders:
        saved = d / "scenario.yaml"
        if saved.exists():
            want = dump_scenario(scenario.variant(spec))
            have = saved.read_text(encoding="utf-8")
            if have != want:
                diff = [ln for ln in difflib.unified_diff(have.splitlines(), want.splitlines(), n=0, lineterm="")
                        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
                first = " vs ".join(repr(ln[1:].strip()) for ln in diff[:2])
                return "different", None, f"'{saved}' is another scenario ({first})"
    summaries = []
    for spec, d in folders:
        path = d / "summary.json"
        if not path.exists() or not (d / "metrics.csv").exists():
            return "incomplete", None, f"'{d}' has no summary (the run was killed midway)"
        summary = json.loads(path.read_text(encoding="utf-8"))
        if summary.get("status") != "ok":
            return "incomplete", None, f"'{d}' stopped with status {summary.get('status')!r}"
        summaries.append(summary)
    if several and not (out / "summary.json").exists():
        return "incomplete", None, f"'{out}' was stopped before its last algorithm finished"
    return "finished", summaries, ""


def run_scenario(scenario: Scenario, out: str | Path, *, progress: bool = True, force: bool = False,
                 allow_large: bool = False,
                 version_hooks: Sequence[VersionHookFactory] | None = None,
                 on_ready: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Run every algorithm variant of ``scenario`` into ``out`` (a sub-directory per variant if several).

    All validation happens first (:func:`preflight`); then ``out`` must be new or empty (``force``: cleared).
    ``on_ready`` is called once both passed, before the first run (the CLI says what it runs there, so a
    bad input is never preceded by that line)."""
    from fedsim.scenario import check_label

    for i, spec in enumerate(scenario.algorithms):  # labels name sub-folders: never a way out of ``out``
        check_label(spec.label, f"algorithm[{i}].label")
    prepared = preflight(scenario, allow_large=allow_large)
    out = prepare_run_dir(out, force=force)
    if on_ready is not None:
        on_ready()
    if progress:
        for note in prepared.notes:
            print(f"fedsim: {note}", flush=True)
    summaries = []
    several = len(scenario.algorithms) > 1
    for spec in scenario.algorithms:
        target = out / spec.label if several else out
        summaries.append(run_variant(scenario, spec, target, prepared, progress=progress, version_hooks=version_hooks))
    if several:
        (out / "summary.json").write_text(json.dumps(summaries, indent=2), encoding="utf-8")
        if scenario.output.figures:
            # a failure here marks the comparison's summary (the variants' own outputs were built)
            listed = [dict(s) for s in summaries]
            with building_outputs(out, listed, "comparison figures and report") as built:
                import fedsim.report as report

                report.comparison_figure(out, [s["label"] for s in summaries])
                report.html_report(out)
            if not built:
                summaries = listed
                (out / "summary.json").write_text(json.dumps(summaries, indent=2), encoding="utf-8")
    return summaries
