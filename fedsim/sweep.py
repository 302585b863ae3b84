"""Sweeps: one run per point of a grid of scenario fields (and per seed), and what each point costs.

    fedsim sweep default channel.uplink.mbps=0.5,2,8 --target 0.9
    fedsim sweep default channel.uplink.mbps=0.5,2 devices.jitter=0,0.2 --seeds 0,1 --jobs 2

Every override whose value is a comma-separated list (outside brackets) is a swept field; several give
their Cartesian grid.  Each point runs with the scenario's seed, or once per ``--seeds`` seed, so points
differ only in the swept values.  A point's runs are independent of each other (every random draw comes
from the run's own seeded streams), so they may run one after another, in local processes (``jobs``) or
as Ray tasks (``ray``) and write the same traces.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from fedsim.errors import ConfigError, Terminated  # noqa: E402
from fedsim.files import start_folder, write_csv, write_json, write_text  # noqa: E402
from fedsim.output.report import save_figure  # noqa: E402

#: Per-run numbers a sweep tabulates; sweep.csv gives their mean (and std over seeds) per point.
RUN_COLUMNS = ("final_accuracy", "best_accuracy", "time_to_target_s", "virtual_time_s", "bytes_up", "bytes_down",
               "bytes_total", "energy_j")


def split_grid(overrides: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The swept fields (every ``key=v1,v2,...``, in the order given) and the other overrides."""
    grid: list[tuple[str, list[str]]] = []
    rest: list[str] = []
    for o in overrides:
        if "=" in o and _is_list(o.split("=", 1)[1]):
            key, raw = (x.strip() for x in o.split("=", 1))
            values = [v.strip() for v in raw.split(",") if v.strip()]
            if len(values) < 2:
                raise ConfigError(key, "a swept field needs at least two values (e.g. 1,5,20)")
            if len(set(values)) != len(values):
                raise ConfigError(key, f"got {raw!r}: a value is repeated")
            if key in (k for k, _ in grid):
                raise ConfigError(key, "is swept twice; give its values in one key=v1,v2,...")
            grid.append((key, values))
        else:
            rest.append(o)
    if not grid:
        raise ConfigError("sweep", "give at least one key=v1,v2,... to sweep, e.g. channel.uplink.mbps=1,5,20")
    return grid, rest


def _is_list(raw: str) -> bool:
    raw = raw.strip()
    return "," in raw and not raw.startswith(("[", "{"))


def time_to_accuracy(metrics: pd.DataFrame, target: float) -> float:
    """First virtual time at which test accuracy reaches ``target`` (inf if never)."""
    hit = metrics[metrics["accuracy"] >= target]
    return float(hit["t"].iloc[0]) if len(hit) else math.inf


@dataclasses.dataclass
class Unit:
    """One run of a sweep: a grid point (raw values per swept key), a seed (None: the scenario's own), the
    validated scenario and its folder."""

    point: dict[str, str]
    seed: int | None
    scenario: Any
    folder: Path

    def name(self) -> str:
        parts = [f"{k}={v}" for k, v in self.point.items()] + ([f"seed {self.seed}"] if self.seed is not None else [])
        return ", ".join(parts)


def _folder_name(point: dict[str, str]) -> str:
    """``k1=v1,k2=v2``: readable and one level deep (a value's odd characters become ``-``)."""
    return ",".join(f"{k}={re.sub(r'[^A-Za-z0-9_.+=-]+', '-', v).strip('-') or 'x'}" for k, v in point.items())


def check_target(target: float | None) -> None:
    if target is not None and not (math.isfinite(target) and 0 < target <= 1):
        raise ConfigError("--target", f"got {target!r} (allowed: an accuracy in (0, 1], e.g. 0.9)")


def check_jobs(jobs: int, ray: str | None) -> None:
    from fedsim.sim.executor import check_jobs_count

    check_jobs_count(jobs)
    if ray is not None:
        if ray not in ("local", "auto") and ":" not in ray:  # e.g. `--ray default key=...` took the scenario
            raise ConfigError("--ray", f"got {ray!r} (allowed: no value for a local Ray, auto, HOST:PORT or "
                                       "ray://HOST:PORT; write --ray=ADDRESS or put --ray after the scenario)")
        try:
            import ray as _ray  # noqa: F401
        except ImportError:
            raise ConfigError("--ray", "needs Ray installed (pip install 'fedsim[ray]')") from None
        if ray != "local":
            from fedsim.sim.executor import check_ray_address

            check_ray_address(ray, "--ray")  # before any folder or progress bar: Ray would retry for minutes


def check_resume_root(out: Path, kind: str) -> None:
    """Refuse to resume a sweep or ``--seeds`` (``kind``) into a folder that is not fedsim's (a user's
    folder: :func:`fedsim.rundirs.is_fedsim_folder`), holds a single run at its top (its runs would be mixed
    with the units' sub-folders), or the other kind's folder."""
    if not out.is_dir():
        return
    from fedsim.rundirs import is_fedsim_folder

    if any(out.iterdir()) and not is_fedsim_folder(out):
        first = sorted(p.name for p in out.iterdir())[0]
        raise ConfigError("--resume", f"'{out}' holds no fedsim run or batch (first: '{first}'); not resuming "
                          "into it (give another --out)")
    other = {"sweep": "seeds.csv", "seeds": "sweep.yaml"}[kind]
    for name, what in (("scenario.yaml", "a run"), ("summary.json", "a run"), (other, f"a {'--seeds' if kind == 'sweep' else 'sweep'} folder")):
        if (out / name).exists():
            raise ConfigError("--resume", f"'{out}' holds {what} ({name}), not a {'sweep' if kind == 'sweep' else '--seeds'} "
                              "folder; not resuming into it (give another --out, or --force to clear)")


def run_units(units: Sequence[Unit], *, jobs: int = 1, ray: str | None = None, resume: bool = False,
              progress: bool = True, allow_large: bool = False, what: str = "sweep",
              on_ready: Callable[[], None] | None = None) -> list[list[dict[str, Any]]]:
    """Run every unit into its folder; returns each unit's summaries (one per algorithm), in order.

    With ``resume``, a folder that holds a finished run of exactly the unit's scenario is reused, an
    incomplete one (killed, interrupted, failed) is said so and run again, and one of another scenario is
    refused before anything runs.  ``on_ready`` is called once every folder is known to be usable, before
    anything is said about the units (the CLI says what it runs there, so a refusal is never preceded by
    it).  ``jobs`` > 1 runs units in that many local processes; ``ray`` (an address, or ``"local"`` for a Ray
    started here) runs them as Ray tasks.  Either way each run is the run the serial loop would make: same
    seed, same streams, one torch thread."""
    from fedsim.rundirs import run_state
    from fedsim.runner import can_redraw, redraw_outputs

    results: list[list[dict[str, Any]] | None] = [None] * len(units)
    todo: list[int] = []
    incomplete: list[str] = []
    redraw: list[int] = []
    for i, u in enumerate(units):
        if resume:
            state, summaries, why = run_state(u.folder, u.scenario)
            if state == "different":
                raise ConfigError("--resume", f"{why}; not resuming into it (give another --out, or --force to clear)")
            if state == "finished":
                results[i] = summaries
                continue
            if state == "incomplete":
                if can_redraw(u.scenario, u.folder):
                    redraw.append(i)
                    incomplete.append(f"fedsim: {u.name() or u.folder.name}: its simulation finished; drawing its "
                                      f"figures and report ({why})")
                    continue
                incomplete.append(f"fedsim: {u.name() or u.folder.name}: incomplete run ({why}); running it again")
        todo.append(i)
    if on_ready is not None:
        on_ready()
    for line in incomplete:
        print(line, file=sys.stderr, flush=True)
    for i in redraw:  # from the run's files, here: no simulation is repeated for its figures
        results[i] = redraw_outputs(units[i].scenario, units[i].folder)
    if resume and len(todo) < len(units):
        print(f"fedsim: resuming: {len(units) - len(todo) - len(redraw)} of {len(units)} runs already finished"
              + (f", {len(redraw)} drawn again" if redraw else "") + f", running {len(todo)}",
              file=sys.stderr, flush=True)
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc=what, unit="run", disable=not progress or not todo, dynamic_ncols=True,
               position=0, leave=True)
    try:
        if ray is not None:
            from fedsim.sim.executor import RayExecutor

            try:
                executor = RayExecutor(jobs if jobs > 1 else None, None if ray == "local" else ray, threads=1,
                                       field="--ray")
            except ConfigError:
                raise
            except Exception as exc:  # no cluster at that address, a version mismatch, ...
                text = " ".join(str(exc).split())[:200]
                raise ConfigError("--ray", f"cannot start or join Ray at {ray!r}: {type(exc).__name__}: {text}") from None
            handles = []
            try:
                handles = [(i, executor.submit(_run_unit, units[i].scenario, str(units[i].folder.resolve()),
                                               allow_large)) for i in todo]
                for i, h in handles:
                    bar.set_postfix_str(f"waiting for {units[i].name()}", refresh=True)
                    results[i] = h.result()
                    bar.update(1)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: cancel the tasks (a running one is interrupted)
                _cancel_ray([h for _, h in handles])
                raise
            finally:
                executor.close()
        elif jobs > 1 and len(todo) > 1:
            _run_in_processes(units, todo, results, min(jobs, len(todo)), allow_large, bar)
        else:
            from fedsim.runner import run_scenario

            for n, i in enumerate(todo, 1):
                bar.set_description_str(f"{what} {n}/{len(todo)}: {units[i].name()}")
                results[i] = run_scenario(units[i].scenario, units[i].folder, progress=progress, force=resume,
                                          allow_large=allow_large)
                bar.update(1)
    finally:
        bar.close()
    return [r if r is not None else [] for r in results]


#: Seconds the running points of an interrupted parallel sweep get to write their summaries (status
#: ``interrupted``, trace kept) before their processes are killed; the whole stop stays within 5 s.
STOP_GRACE_S = 2.0

#: In a worker process: set once the sweep is stopping (then no further point starts there), and whether a
#: point is running (only a running point is interrupted; an idle worker just remembers to stop).
_STOPPING: list[int] = []
_RUNNING: list[bool] = [False]


def _worker_stop(signum: int, frame: Any) -> None:
    """A worker's handler of the stop signal its parent sends: interrupt the running point, once."""
    first = not _STOPPING
    _STOPPING.append(signum)
    if first and _RUNNING[0]:
        _interrupt_point(signum, frame)


def _interrupt_point(signum: int, frame: Any) -> None:
    """Raise the running point's interrupt, unless the signal came inside the import machinery: there it
    may land in a callback (a module lock's weakref callback) that prints the exception and swallows it,
    so the point would run on until killed.  Then it is raised 10 ms later, from ordinary code."""
    if (frame is not None and frame.f_code.co_filename.startswith("<frozen importlib")
            and hasattr(signal, "setitimer")):
        signal.signal(signal.SIGALRM, lambda _s, later: _interrupt_point(signum, later))
        signal.setitimer(signal.ITIMER_REAL, 0.01)
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _worker_signals() -> None:
    """Signals in a sweep's worker process: the terminal's Ctrl-C, which reaches every process of the
    group, is ignored from the worker's start (:func:`fedsim.sim.executor.spawn_pool`; the parent decides
    and forwards one stop signal, so a point is never interrupted twice, e.g. while it writes its summary);
    SIGTERM from the parent stops the point as terminated, and :data:`_INTERRUPT_SIGNAL` as interrupted."""
    signal.signal(signal.SIGTERM, _worker_stop)
    signal.signal(_INTERRUPT_SIGNAL, _worker_stop)


#: The signal a parent sends its workers for Ctrl-C (SIGINT itself is ignored there; see _worker_signals).
_INTERRUPT_SIGNAL = getattr(signal, "SIGUSR1", signal.SIGTERM)


def _run_in_processes(units: Sequence[Unit], todo: list[int], results: list[Any], workers: int, allow_large: bool,
                      bar: Any) -> None:
    """Run the units ``todo`` in ``workers`` local processes, filling ``results``.

    On Ctrl-C or SIGTERM here (KeyboardInterrupt, :class:`fedsim.errors.Terminated`) the pending points are
    cancelled, the running ones get one stop signal (they write their summaries, status ``interrupted``,
    keeping their traces) and :data:`STOP_GRACE_S` to finish, then any process still alive is killed; the
    interrupt is raised again.  ``--resume`` then runs what did not finish."""
    from concurrent.futures import as_completed

    from fedsim.sim.executor import spawn_pool

    # a fresh interpreter per worker (no forked torch state), importing this same tree, Ctrl-C ignored
    pool, _ = spawn_pool(workers, _worker_signals)
    futures: dict[Any, int] = {}
    try:
        futures = {pool.submit(_run_unit, units[i].scenario, str(units[i].folder), allow_large): i for i in todo}
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            bar.set_postfix_str(f"done {units[i].name()}", refresh=False)
            bar.update(1)
    except KeyboardInterrupt as exc:
        _stop_pool(pool, list(futures), signal.SIGTERM if isinstance(exc, Terminated) else _INTERRUPT_SIGNAL)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_pool(pool: Any, futures: list[Any], signum: int) -> None:
    """Cancel what has not started, send each worker ``signum`` once, give the running points
    :data:`STOP_GRACE_S` to write their summaries, then kill what is left."""
    import os
    import time
    from concurrent.futures import wait

    deadline = time.monotonic() + STOP_GRACE_S
    processes = list((getattr(pool, "_processes", None) or {}).values())  # the pool's workers, started or starting
    for f in futures:
        f.cancel()  # a point not yet handed to a worker never starts
    for proc in processes:
        if proc.is_alive() and proc.pid is not None:
            try:
                os.kill(proc.pid, signum)
            except OSError:  # it has just ended
                pass
    running = [f for f in futures if not f.done()]
    while running and time.monotonic() < deadline:
        try:
            wait(running, timeout=max(0.0, deadline - time.monotonic()))
            break
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, kill now
            break
    for proc in processes:
        if proc.is_alive():
            proc.kill()


def _cancel_ray(handles: list[Any]) -> None:
    """Cancel Ray tasks: one not started never runs; a running one gets a KeyboardInterrupt, so it writes
    its summary (status ``interrupted``).  Waits at most :data:`STOP_GRACE_S`."""
    try:
        import ray

        refs = [h.ref for h in handles]
        for ref in refs:
            ray.cancel(ref, force=False)
        ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S)
    except Exception:  # noqa: BLE001 - stopping: Ray's own shutdown follows
        pass


def _run_unit(scenario: Any, folder: str, allow_large: bool) -> list[dict[str, Any]]:
    """One run in a worker process or Ray task (module level, so it pickles).  In a worker of a sweep that
    is stopping it does not start (see :func:`_worker_stop`)."""
    import warnings

    from fedsim.runner import run_scenario

    _RUNNING[0] = True
    try:
        if _STOPPING:
            raise KeyboardInterrupt("the sweep is stopping")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # as the CLI does: results carry NaN/None instead
            with np.errstate(all="ignore"):
                return run_scenario(scenario, folder, progress=False, force=True, allow_large=allow_large)
    finally:
        _RUNNING[0] = False


def run_row(unit: Unit, summary: dict[str, Any], goal: float | None) -> dict[str, Any]:
    """One run's row of ``sweep_runs.csv``: the point, seed, algorithm and the run's numbers."""
    folder = unit.folder / summary["label"] if len(unit.scenario.algorithms) > 1 else unit.folder
    ttt = None
    if goal is not None and (folder / "metrics.csv").exists():
        ttt = time_to_accuracy(pd.read_csv(folder / "metrics.csv"), goal)
    up, down = summary.get("bytes_up"), summary.get("bytes_down")
    return {**{k: yaml.safe_load(v) for k, v in unit.point.items()},
            "seed": unit.scenario.seed, "label": summary["label"], "status": summary["status"],
            "final_accuracy": summary.get("final_accuracy"), "best_accuracy": summary.get("best_accuracy"),
            "target": goal, "time_to_target_s": ttt, "reached_target": None if ttt is None else bool(math.isfinite(ttt)),
            "virtual_time_s": summary.get("virtual_time_s"), "bytes_up": up, "bytes_down": down,
            "bytes_total": (up or 0) + (down or 0) if up is not None or down is not None else None,
            "energy_j": summary.get("energy_j"), "wall_time_s": summary.get("wall_time_s"), "run_dir": str(folder)}


def aggregate(runs: pd.DataFrame, keys: Sequence[str], seeded: bool) -> pd.DataFrame:
    """Per point and algorithm: the runs' numbers, or with seeds their mean and std (``<col>_std``).

    Time to target is averaged over the seeds that reached it (inf when none did); ``reached_target``
    then counts them, out of ``runs``."""
    rows = []
    for group_key, g in runs.groupby([*keys, "label"], sort=False, dropna=False):
        *point, label = group_key
        row: dict[str, Any] = dict(zip(keys, point))
        row.update(label=label, runs=len(g), status=",".join(sorted(set(g["status"]))))
        row["target"] = g["target"].iloc[0]
        for col in RUN_COLUMNS:
            vals = pd.to_numeric(g[col], errors="coerce")
            if col == "time_to_target_s":
                vals = vals[np.isfinite(vals)]
                if g[col].isna().all():
                    row[col] = None
                    if seeded:
                        row[f"{col}_std"] = None
                    continue
                row[col] = float(vals.mean()) if len(vals) else math.inf
            else:
                row[col] = float(vals.mean()) if vals.notna().any() else None
            if seeded:
                row[f"{col}_std"] = float(vals.std(ddof=1)) if vals.notna().sum() > 1 else None
        reached = g["reached_target"]
        if reached.notna().any():
            row["reached_target"] = int(reached.sum()) if seeded else bool(reached.iloc[0])
        else:
            row["reached_target"] = None
        rows.append(row)
    return pd.DataFrame(rows)


def plan_sweep(source: str | None, overrides: list[str], out: Path, *,
               seeds: Sequence[int] | None = None) -> tuple[list[tuple[str, list[str]]], list[Unit]]:
    """The grid and its units (validated scenarios and folders), before anything runs."""
    from fedsim import load_scenario

    grid, rest = split_grid(overrides)
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise ConfigError("--seeds", f"give distinct seeds, e.g. 0,1,2 (got {list(seeds)})")
    units = []
    for values in itertools.product(*(v for _, v in grid)):
        point = dict(zip((k for k, _ in grid), values))
        sc = load_scenario(source, rest + [f"{k}={v}" for k, v in point.items()])
        base = out / _folder_name(point)
        if seeds is None:
            units.append(Unit(point, None, sc, base))
        else:
            units.extend(Unit(point, s, dataclasses.replace(sc, seed=s), base / f"seed-{s}") for s in seeds)
    return grid, units


def run_sweep(source: str | None, overrides: list[str], out: Path, *, target: float | None,
              seeds: Sequence[int] | None = None, jobs: int = 1, ray: str | None = None, resume: bool = False,
              force: bool = False, progress: bool = True, allow_large: bool = False) -> pd.DataFrame:
    """Run the grid into ``out/<k1=v1,k2=v2>`` (``/seed-<s>`` with seeds); returns sweep.csv's table.

    Writes ``sweep_runs.csv`` (a row per run), ``sweep.csv`` (a row per point and algorithm: mean, and std
    over seeds), ``sweep.json``, and figures: ``sweep.png`` (a line per algorithm against a 1-D sweep's
    value, error bars over seeds) or ``sweep_heatmap*.png`` (a 2-D grid: time to target, final accuracy,
    bytes and energy per cell).  Every scenario is validated, and with ``resume`` every existing folder
    checked, before the first run."""
    from fedsim.preflight import preflight
    from fedsim.rundirs import prepare_run_dir

    check_target(target)
    check_jobs(jobs, ray)
    grid, units = plan_sweep(source, overrides, out, seeds=seeds)
    if target is not None and any(u.scenario.train.systems_only for u in units):
        raise ConfigError("--target", "a systems-only run (train.systems_only: true) measures no accuracy")
    for u in units:
        preflight(u.scenario, allow_large=allow_large)
    if resume:
        if out.exists() and not out.is_dir():
            raise ConfigError("--out", f"'{out}' is a file, not a folder")
        check_resume_root(out, "sweep")
        start_folder(out)
    else:
        out = prepare_run_dir(out, force=force)
    write_text(out / "sweep.yaml", yaml.safe_dump({
        "scenario": source, "overrides": list(overrides), "grid": {k: v for k, v in grid}, "seeds": seeds,
        "target": target}, sort_keys=False))
    from fedsim.scenario import warn_implausible

    summaries = run_units(units, jobs=jobs, ray=ray, resume=resume, progress=progress, allow_large=allow_large,
                          on_ready=lambda: warn_implausible([u.scenario for u in units]))
    rows = []
    for u, ss in zip(units, summaries):
        goal = target if target is not None else u.scenario.stop.target_accuracy
        rows.extend(run_row(u, s, goal) for s in ss)
    keys = [k for k, _ in grid]
    runs = pd.DataFrame(rows)
    write_csv(runs, out / "sweep_runs.csv")
    table = aggregate(runs, keys, seeded=seeds is not None)
    write_csv(table, out / "sweep.csv")
    write_json(out / "sweep.json", table.to_dict(orient="records"), default=str)
    for stale in [out / "sweep.png", *out.glob("sweep_heatmap*.png")]:
        stale.unlink(missing_ok=True)
    if len(keys) == 1:
        sweep_figure(table, out / "sweep.png", keys[0])
    elif len(keys) == 2:
        for label, g in table.groupby("label", sort=False):
            several = table["label"].nunique() > 1
            heatmap_figure(g, out / (f"sweep_heatmap_{label}.png" if several else "sweep_heatmap.png"), keys,
                           title=str(label) if several else "")
    from fedsim.output.folder_report import folder_report

    folder_report(out, "sweep")  # report.html: the grid, its heat maps, a link to every run
    return table


def _xs(values: pd.Series) -> tuple[list[Any], bool]:
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    return (list(values) if numeric else list(range(len(values)))), numeric


def sweep_figure(table: pd.DataFrame, path: Path, key: str) -> None:
    """Time to target accuracy (or, with no target, accuracy) against the swept value; error bars are the
    std over seeds where the table has it.

    Without a target each point is the mean over its seeds of each run's final accuracy (its last
    evaluation), drawn solid, and beside it, dashed with open markers, the mean over its seeds of each
    run's best accuracy (its highest evaluation): a run that got worse near its end (FedBuff at 0.844
    final after 0.916 best) shows the gap instead of one number standing for both.  The legend says how
    many seeds each point averages."""
    fig, ax = plt.subplots(figsize=(6, 4))
    use_target = table["time_to_target_s"].notna().any()
    ycol = "time_to_target_s" if use_target else "final_accuracy"
    if not use_target and table[ycol].isna().all():  # systems-only: the virtual time of the run
        ycol = "virtual_time_s"
    numeric = pd.api.types.is_numeric_dtype(table[key]) and not pd.api.types.is_bool_dtype(table[key])
    finite = pd.to_numeric(table[ycol], errors="coerce").replace(math.inf, float("nan"))
    top = float(finite.max()) if finite.notna().any() else 1.0
    order = list(dict.fromkeys(table[key].tolist()))
    for label, group in table.groupby("label", sort=False):
        x = group[key].tolist() if numeric else [order.index(v) for v in group[key]]
        y = pd.to_numeric(group[ycol], errors="coerce").replace(math.inf, float("nan"))
        std = group.get(f"{ycol}_std")
        seeds = int(group["runs"].max()) if "runs" in group else 1
        what = {"final_accuracy": "final, ", "time_to_target_s": "", "virtual_time_s": ""}[ycol]
        if std is not None and pd.to_numeric(std, errors="coerce").notna().any():
            line = ax.errorbar(x, y, yerr=pd.to_numeric(std, errors="coerce"), marker="o", capsize=3,
                               label=f"{label} ({what}mean ± std, {seeds} seeds)").lines[0]
        else:
            line = ax.plot(x, y, marker="o", label=f"{label} ({what}{seeds} seed{'s' * (seeds != 1)})")[0]
        if ycol == "final_accuracy" and "best_accuracy" in group:
            best = pd.to_numeric(group["best_accuracy"], errors="coerce")
            if best.notna().any():
                ax.plot(x, best, marker="o", linestyle="--", markerfacecolor="none", color=line.get_color(),
                        label=f"{label} (best, mean of {seeds} seed{'s' * (seeds != 1)})")
        if use_target:  # never reached: an open marker above the data, not a missing (or fastest) point
            miss = ~group[ycol].apply(lambda v: v is not None and math.isfinite(v))
            if miss.any():
                xs = [xv for xv, m in zip(x, miss) if m]
                ax.scatter(xs, [top * 1.08] * len(xs), marker="^", facecolors="none", edgecolors=line.get_color(),
                           label=f"{label}: target not reached")
    if numeric:
        vals = sorted(set(table[key]))
        if all(v > 0 for v in vals) and max(vals) / min(vals) >= 10:
            from matplotlib.ticker import NullLocator

            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(NullLocator())  # the swept values are the ticks: no overlapping log labels
        ax.set_xticks(vals, [f"{v:g}" for v in vals])
    else:
        ax.set_xticks(list(range(len(order))), [str(v) for v in order])
    ax.set_xlabel(f"{key} (swept)")
    tgt = table["target"].iloc[0] if use_target else None
    ax.set_ylabel({"time_to_target_s": f"virtual time to {tgt:.0%} accuracy (s)" if use_target else "",
                   "final_accuracy": "test accuracy: final (solid), best (dashed)",
                   "virtual_time_s": "virtual time (s)"}[ycol])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


#: Heat-map panels of a 2-D sweep: column, title, how a cell's number is written.
HEATMAP_PANELS = (("time_to_target_s", "virtual time to target (s)", "{:.3g}"),
                  ("final_accuracy", "final test accuracy", "{:.3f}"),
                  ("bytes_total", "bytes moved (up + down)", None),
                  ("energy_j", "energy, all devices (J)", "{:.3g}"))


def heatmap_figure(table: pd.DataFrame, path: Path, keys: Sequence[str], title: str = "") -> bool:
    """A 2-D sweep as heat maps (rows: the first key's values, columns: the second's), one panel per
    measure the runs have; each cell is annotated with its value (± std over seeds).  A cell whose runs
    never reached the target is grey and says so."""
    from matplotlib import colormaps

    from fedsim.output.report import fmt_bytes

    ky, kx = keys
    rows_v = list(dict.fromkeys(table[ky].tolist()))
    cols_v = list(dict.fromkeys(table[kx].tolist()))
    panels = [p for p in HEATMAP_PANELS if p[0] in table and pd.to_numeric(table[p[0]], errors="coerce").notna().any()]
    if not panels:
        return False
    ncol = 2 if len(panels) > 1 else 1
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(1.2 + 1.6 * len(cols_v) * ncol + 1.5 * ncol,
                                                  1.2 + 0.9 * len(rows_v) * nrow + 0.8 * nrow), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (col, name, fmt) in zip(axes.flat, panels):
        grid = np.full((len(rows_v), len(cols_v)), np.nan)
        text = [["" for _ in cols_v] for _ in rows_v]
        for _, r in table.iterrows():
            i, j = rows_v.index(r[ky]), cols_v.index(r[kx])
            v = pd.to_numeric(pd.Series([r[col]]), errors="coerce").iloc[0]
            std = r.get(f"{col}_std")
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            if not math.isfinite(v):
                text[i][j] = "not\nreached"
                continue
            grid[i, j] = v
            say = fmt_bytes(v) if fmt is None else fmt.format(v)
            if std is not None and isinstance(std, (int, float)) and math.isfinite(std):
                say += "\n± " + (fmt_bytes(std) if fmt is None else f"{std:.2g}")
            if col == "time_to_target_s" and isinstance(r.get("reached_target"), (int, np.integer)) \
                    and not isinstance(r.get("reached_target"), bool) and r["reached_target"] < r["runs"]:
                say += f"\n({int(r['reached_target'])}/{int(r['runs'])} seeds)"
            text[i][j] = say
        cmap = colormaps["viridis_r" if col != "final_accuracy" else "viridis"].with_extremes(bad="#dddddd")
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto")
        finite = grid[np.isfinite(grid)]
        mid = (finite.min() + finite.max()) / 2 if len(finite) else 0.0
        for i in range(len(rows_v)):
            for j in range(len(cols_v)):
                dark = np.isfinite(grid[i, j]) and ((grid[i, j] > mid) == (col != "final_accuracy"))
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=8, color="white" if dark else "black")
        ax.set_xticks(range(len(cols_v)), [f"{v}" for v in cols_v])
        ax.set_yticks(range(len(rows_v)), [f"{v}" for v in rows_v])
        ax.set_xlabel(kx)
        ax.set_ylabel(ky)
        tgt = table["target"].iloc[0] if "target" in table else None
        ax.set_title(name.replace("target", f"{tgt:.0%} accuracy") if col == "time_to_target_s" and tgt else name,
                     fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    runs = int(table["runs"].max()) if "runs" in table else 1
    head = (f"{title}: " if title else "") + (f"mean ± std over {runs} seeds" if runs > 1 else "one run per cell")
    fig.suptitle(head, fontsize=10)
    save_figure(fig, path)
    plt.close(fig)
    return True


def run_seeds(scenario: Any, seeds: list[int], out: Path, *, target: float | None = None, progress: bool = True,
              force: bool = False, allow_large: bool = False, resume: bool = False,
              on_ready: Callable[[], None] | None = None) -> pd.DataFrame:
    """Run ``scenario`` once per seed into ``out/seed-<s>`` and compare algorithms across seeds.

    Writes ``seeds.csv`` (one row per algorithm and seed: final/best accuracy, time to ``target``, bytes,
    energy), ``seeds_summary.csv`` (mean and std over seeds per algorithm) and ``seeds.png`` (mean ± std
    of test accuracy against virtual time, each seed's curve held constant between evaluations).  Every
    seed's scenario is validated before the first run.  With ``resume``, seeds whose run in ``out`` finished
    (same resolved scenario) are reused and only the others run (see :func:`run_units`)."""
    import dataclasses

    import numpy as np

    from fedsim.preflight import preflight
    from fedsim.rundirs import prepare_run_dir

    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError("--seeds", f"give distinct seeds, e.g. 0,1,2 (got {seeds})")
    goal = target if target is not None else scenario.stop.target_accuracy
    if goal is not None and not (math.isfinite(goal) and 0 < goal <= 1):
        raise ConfigError("--target", f"got {goal!r} (allowed: an accuracy in (0, 1])")
    variants = [dataclasses.replace(scenario, seed=s) for s in seeds]
    for v in variants:
        preflight(v, allow_large=allow_large)
    if resume and out.is_dir():
        check_resume_root(out, "seeds")
        start_folder(out)
    else:
        out = prepare_run_dir(out, force=force)
    units = [Unit({}, seed, sc, out / f"seed-{seed}") for seed, sc in zip(seeds, variants)]
    done = run_units(units, resume=resume, progress=progress, allow_large=allow_large, what="seeds", on_ready=on_ready)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[pd.DataFrame]] = {}
    for seed, sc, summaries in zip(seeds, variants, done):
        sub = out / f"seed-{seed}"
        for s in summaries:
            folder = sub / s["label"] if len(sc.algorithms) > 1 else sub
            metrics = pd.read_csv(folder / "metrics.csv")
            curves.setdefault(s["label"], []).append(metrics)
            ttt = time_to_accuracy(metrics, goal) if goal is not None else None
            rows.append({"algorithm": s["label"], "seed": seed, "status": s["status"],
                         "final_accuracy": s.get("final_accuracy"), "best_accuracy": s.get("best_accuracy"),
                         "target": goal, "time_to_target_s": ttt,
                         "reached_target": None if ttt is None else bool(math.isfinite(ttt)),
                         "virtual_time_s": s["virtual_time_s"], "bytes_up": s.get("bytes_up"),
                         "bytes_down": s.get("bytes_down"), "energy_j": s.get("energy_j")})
    table = pd.DataFrame(rows)
    write_csv(table, out / "seeds.csv")
    numeric = ["final_accuracy", "best_accuracy", "virtual_time_s", "bytes_up", "bytes_down", "energy_j"]
    summary = table.groupby("algorithm", sort=False)[numeric].agg(["mean", "std"])
    summary.columns = [f"{a}_{b}" for a, b in summary.columns]
    if goal is not None:
        summary["reached_target"] = table.groupby("algorithm", sort=False)["reached_target"].sum().astype(int)
        summary["seeds"] = table.groupby("algorithm", sort=False).size()
        # over the seeds that reached the target (a seed that never did has no time; reached_target counts them)
        hit = table[table["reached_target"] == True].groupby("algorithm", sort=False)["time_to_target_s"]  # noqa: E712
        summary["time_to_target_s_mean"], summary["time_to_target_s_std"] = hit.mean(), hit.std()
    write_csv(summary.reset_index(), out / "seeds_summary.csv")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    drawn = 0
    for label, frames in curves.items():
        end = max(float(f["t"].max()) for f in frames)
        grid = np.linspace(0.0, end, 200)
        ys = []
        for f in frames:
            f = f.dropna(subset=["accuracy"]).sort_values("t")
            if len(f) == 0:
                continue
            idx = np.searchsorted(f["t"].to_numpy(), grid, side="right") - 1
            ys.append(np.where(idx >= 0, f["accuracy"].to_numpy()[np.clip(idx, 0, None)], np.nan))
        if not ys:
            continue
        arr = np.vstack(ys)
        mean, std = np.nanmean(arr, axis=0), np.nanstd(arr, axis=0)
        line = ax.plot(grid, mean, label=f"{label} (n={len(ys)} seeds)")[0]
        ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        drawn += 1
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend()
    else:  # no seed recorded an accuracy (a loss-only task, or evaluation off): say so, not an empty plot
        ax.text(0.5, 0.5, "no accuracy was recorded by any seed", transform=ax.transAxes, ha="center", va="center")
    save_figure(fig, out / "seeds.png")
    plt.close(fig)
    from fedsim.output.folder_report import folder_report

    folder_report(out, "seeds")  # report.html: the table, the seeds' curves, a link to every run
    return table
