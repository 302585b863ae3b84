"""The ``fedsim`` command line.

    fedsim run [SCENARIO] [key=value ...] [--out DIR]   run a built-in scenario or a YAML file
    fedsim sweep [SCENARIO] key=v1,v2,... [--target A]  one run per grid point (and seed), time to accuracy
    fedsim show [SCENARIO] [key=value ...]              print the resolved scenario without running it
    fedsim reference                                    the scenario-field reference (docs/scenario-reference.md)
    fedsim scenarios                                    list the built-in scenarios
    fedsim profiles [NAME]                              list device profiles, or show one
    fedsim models [SCENARIO] [key=value ...]            the scenario's model: width groups, costs per width
    fedsim check RUN_DIR                                measured theory quantities of a finished run
    fedsim compare RUN_DIR... [--out DIR]               earlier runs side by side: table and overlaid figures
    fedsim figures RUN [--format png pdf svg] [--width column|page] [--out DIR]
                                                        a finished run's figures for a paper (matplotlib)

Bad input prints one line, ``fedsim: error: <field>: <what is wrong> (allowed: ...)``, and exits 2.
An unexpected failure inside a run prints one line, ``fedsim: internal error: ... (run with --debug for
the traceback)``, and exits 3; the run folder keeps its trace and a summary with ``status: error``.  A run
whose report fails to build exits 3 too, with one such line per run; its summary says
``status: outputs_failed`` and everything written before the failure is kept.  A figure that fails to draw
fails alone: the other outputs are written, ``fedsim: warning: ...: figures not drawn: ...`` is printed, the
summary keeps ``status: ok`` and names it in ``figures_missing``, and the command exits 0.  An exception raised in the
user's own code (an algorithm, model, dataset named in the scenario) prints
``fedsim: error in your code: module:qualname (file:line): <exception>`` and exits 4.
SIGTERM and SIGHUP (a closed terminal, a dropped ssh session; not under ``nohup``, which ignores it) are
handled like Ctrl-C (summary written, ``status: interrupted``), exit 143 for SIGTERM, 129 for SIGHUP (128 +
the signal's number; 130 for Ctrl-C), at once: a parallel sweep cancels the points not started and stops the running ones (see ``fedsim.sweep``).
"""
from __future__ import annotations

import argparse
import errno
import re
import signal
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, Sequence

from fedsim.errors import FedsimError, Terminated, UserDecisionError, one_line
from fedsim.inputfiles import shown_path

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERNAL = 3
#: File-system errors that come from the place the user gave (permissions, a read-only or full disk, a name
#: too long), not from fedsim: one line and exit 2, like bad input.
_FILE_SYSTEM_REFUSALS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG,
                         errno.EFBIG}


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def print_summary(s: dict[str, Any]) -> None:
    acc = s.get("final_accuracy")
    loss = s.get("final_loss")
    server = s.get("server", {})
    if acc is not None:
        learned = f"final accuracy {acc:.4f} (best {s.get('best_accuracy') or 0:.4f}), "
    elif loss is not None:  # a regression task: no accuracy, the loss is the measure
        learned = f"final loss {loss:.6g}, "
    else:
        learned = "systems-only (no training), "
    print(
        f"{s['label']:>10}: {s['status']}, {s['stop_reason']}\n"
        + f"{'':>10}  {learned}"
        + f"virtual time {s['virtual_time_s']:.1f} s, wall time {s['wall_time_s']:.1f} s\n"
        f"{'':>10}  bytes up {_fmt_bytes(s.get('bytes_up', 0))}, down {_fmt_bytes(s.get('bytes_down', 0))}, "
        f"updates {s.get('updates_applied', 0)}, mean staleness {s.get('mean_staleness', 0):.2f} (max {s.get('max_staleness', 0)}), "
        f"server wait {server.get('mean_wait', 0):.4f} s, utilisation {server.get('utilisation', 0):.1%}, "
        f"energy {s.get('energy_j', 0):.1f} J"
    )


def _safe_name(text: str) -> str:
    """A scenario name as a default folder name: letters, digits, ``_.-``, at most 100 characters (a longer
    name is cut, so any name gives a folder the file system holds)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:100].strip("-") or "run"


def _names_file(source: str) -> bool:
    """Whether ``source`` names an existing path (False for a name the file system cannot hold)."""
    try:
        return Path(source).exists()
    except (OSError, ValueError):
        return False


def _fresh_folder(base: Path) -> Path:
    """``base`` if new or empty, else ``base-2``, ``base-3``, ...: a run without --out never overwrites one."""
    candidate, n = base, 1
    while candidate.exists() and (not candidate.is_dir() or any(candidate.iterdir())):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def _parse_seeds(text: str) -> list[int]:
    from fedsim.errors import ConfigError

    try:
        seeds = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError("--seeds", f"got {text!r} (allowed: comma-separated integers >= 0, e.g. 0,1,2)") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ConfigError("--seeds", f"got {text!r} (allowed: comma-separated integers >= 0, e.g. 0,1,2)")
    return seeds


def _exit_code(statuses: Sequence[str], summaries: Sequence[dict[str, Any]] = ()) -> int:
    """0 when every run says ``ok`` (a warning line for each run with figures not drawn,
    ``figures_missing``); :data:`EXIT_INTERNAL` when a run's figures or report failed to build
    (status ``outputs_failed``: a failure in fedsim, said in one line per run, its outputs so far kept);
    else :data:`EXIT_FAILED` (diverged, interrupted, error)."""
    for s in summaries:
        if s.get("outputs_error"):
            print(f"fedsim: internal error: {s.get('label', 'run')}: {s['outputs_error']}", file=sys.stderr)
        if s.get("figures_missing"):  # the rest of the outputs were written: a warning, not a failure
            named = "; ".join(f"{k} ({v})" for k, v in s["figures_missing"].items())
            print(f"fedsim: warning: {s.get('label', 'run')}: figures not drawn: {named} "
                  "(report.html lists them; tracebacks in figures_error.txt)", file=sys.stderr)
    if any(st == "outputs_failed" for st in statuses):
        return EXIT_INTERNAL
    return EXIT_FAILED if any(st != "ok" for st in statuses) else 0


def cmd_run(args: argparse.Namespace) -> int:
    from fedsim import load_scenario

    source, overrides = args.scenario, list(args.overrides)
    if source is not None and "=" in source and not _names_file(source):
        overrides.insert(0, source)
        source = None
    scenario = load_scenario(source, overrides)
    seeds = _parse_seeds(args.seeds) if args.seeds else None
    if args.target is not None and seeds is None:
        raise FedsimError("--target is for --seeds (time to accuracy across seeds); a single run uses stop.target_accuracy")
    if args.resume and args.force:
        raise FedsimError("--resume keeps the finished runs in the folder and --force clears it: give one of them")
    default_out = Path(scenario.output.dir) / _safe_name(scenario.name)
    # --resume continues the folder named (or the default one, not a fresh -2)
    out = Path(args.out) if args.out else (default_out if args.resume else _fresh_folder(default_out))
    from fedsim.inputfiles import check_writable

    check_writable(out, "--out" if args.out else "output.dir")  # before anything runs or is printed

    def announce() -> None:  # only once every input is known to be good
        print(f"fedsim: running '{scenario.name}' ({', '.join(a.label for a in scenario.algorithms)}) → {out}", flush=True)
        from fedsim.scenario import warn_implausible

        warn_implausible([scenario])

    if seeds is not None:
        from fedsim.config import Domain
        from fedsim.rundirs import check_run_dir
        from fedsim.sweep import run_seeds

        if args.target is not None:
            Domain(gt=0, le=1, unit="(an accuracy)").check(args.target, "--target")
        if not args.resume:
            check_run_dir(out, force=args.force)
        # every seed is checked (preflight, distinct seeds, the folder, --resume's runs) before announce
        table = run_seeds(scenario, seeds, out, target=args.target, progress=not args.quiet, force=args.force,
                          allow_large=args.allow_large, resume=args.resume, on_ready=announce)
        import pandas as pd

        with pd.option_context("display.width", 200):
            print(table.drop(columns=["target", "bytes_down"]).to_string(index=False))
        print(f"run directory: {out} (seed-*/, seeds.csv, seeds_summary.csv, seeds.png)")
        return _exit_code(list(table["status"]))
    if args.resume:
        from fedsim.preflight import preflight
        from fedsim.sweep import Unit, run_units

        preflight(scenario, allow_large=args.allow_large)
        [summaries] = run_units([Unit({}, None, scenario, out)], resume=True, progress=not args.quiet,
                                allow_large=args.allow_large, what="run", on_ready=announce)
    else:
        from fedsim.runner import run_scenario

        summaries = run_scenario(scenario, out, progress=not args.quiet, force=args.force, allow_large=args.allow_large,
                                 on_ready=announce, outputs_process=True)
    for s in summaries:
        print_summary(s)
    print(f"run directory: {out}")
    return _exit_code([s["status"] for s in summaries], summaries)


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedsim import load_scenario
    from fedsim.sweep import run_sweep, split_grid

    source, overrides = args.scenario, list(args.overrides)
    if source is not None and "=" in source and not _names_file(source):
        overrides.insert(0, source)
        source = None
    if args.ray is not None and "=" in args.ray:  # `--ray key=v1,v2`: the override, not an address
        overrides.append(args.ray)
        args.ray = "local"
    if args.resume and args.force:
        raise FedsimError("--resume keeps the finished runs in the folder and --force clears it: give one of them")
    seeds = _parse_seeds(args.seeds) if args.seeds else None
    name = load_scenario(source, [o for o in overrides if "," not in o or o.split("=", 1)[-1].lstrip().startswith(("[", "{"))]).name
    default_out = Path("runs") / f"sweep-{_safe_name(name)}"
    # like `fedsim run`: a taken default folder gives -2, -3, ...; --resume continues the folder itself
    out = Path(args.out) if args.out else (default_out if args.resume else _fresh_folder(default_out))
    from fedsim.inputfiles import check_writable

    check_writable(out, "--out")
    table = run_sweep(source, overrides, out, target=args.target, seeds=seeds, jobs=args.jobs, ray=args.ray,
                      resume=args.resume, force=args.force, progress=not args.quiet, allow_large=args.allow_large)
    import pandas as pd

    keys = [k for k, _ in split_grid(overrides)[0]]
    cols = keys + ["label"] + (["runs"] if seeds else []) + ["status", "final_accuracy", "virtual_time_s",
                                                             "time_to_target_s"]
    with pd.option_context("display.width", 200):
        print(table[[c for c in cols if c in table]].to_string(index=False))
    figure = "sweep.png" if len(keys) == 1 else "sweep_heatmap*.png" if len(keys) == 2 else "no figure for > 2 keys"
    print(f"sweep directory: {out} (sweep.csv, sweep_runs.csv, {figure})")
    return _exit_code([s for joined in table["status"] for s in str(joined).split(",")])


def cmd_compare(args: argparse.Namespace) -> int:
    """Earlier runs side by side: comparison.csv / .md and overlaid figures."""
    from fedsim.output.compare import compare

    out = Path(args.out) if args.out else _fresh_folder(Path("runs") / "compare")
    from fedsim.inputfiles import check_writable

    check_writable(out, "--out")
    table = compare(args.runs, out, target=args.target, force=args.force)
    print((out / "comparison.md").read_text(encoding="utf-8"), end="")
    side = ", report.html side by side, differences.json" if len(table) == 2 else ""
    print(f"comparison directory: {out} (comparison.csv, comparison.md, compare_*.png{side}; {len(table)} runs)")
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    """A finished run's figures for a paper: matplotlib, at a column's width, PNG/PDF/SVG."""
    from fedsim.output.paper import paper_figures

    written = paper_figures(args.run, args.out, formats=args.format, width=args.width)
    folder = Path(args.out) if args.out else Path(args.run) / "figures"
    print(f"figures: {folder} ({len(written)} files: " + ", ".join(sorted({p.stem for p in written})) + ")")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print the resolved scenario (every default filled in, every stop rule shown) without running it."""
    from fedsim.scenario import dump_scenario, warn_implausible
    from fedsim import load_scenario

    source, overrides = args.scenario, list(args.overrides)
    if source is not None and "=" in source and not _names_file(source):
        overrides.insert(0, source)
        source = None
    scenario = load_scenario(source, overrides)
    print(dump_scenario(scenario), end="")
    print(_tx_power_lines(scenario), end="")
    warn_implausible([scenario])
    return 0


def _tx_power_lines(scenario: Any) -> str:
    """The transmit power each device class uses for its uplink SNR and energy, resolved (a device profile's
    ``radio.tx_power`` beats ``channel.uplink.tx_power_w``), as YAML comments after the scenario."""
    from fedsim.system.devices import tx_power_by_class

    lines = [f"#   {name}: {w:g} W ({src})" for name, w, src in tx_power_by_class(scenario)]
    return ("# transmit power per device class (uplink SNR and transmit energy; a device profile's radio.tx_power "
            "beats channel.uplink.tx_power_w):\n" + "\n".join(lines) + "\n")


def cmd_reference(args: argparse.Namespace) -> int:
    from fedsim.algorithms import installed_algorithms, references
    from fedsim.scenario import field_reference

    print(field_reference({**references(), **installed_algorithms()}), end="")
    extra = _installed_lines()
    if extra:
        print("\n## Installed by packages\n\n" + "\n".join(f"- {line}" for line in extra))
    return 0


def _installed_lines() -> list[str]:
    """What installed packages register under the entry points (algorithms, models, datasets)."""
    from fedsim.components import GROUPS, installed

    return [f"{kind} `{name}` ({ep.value})" for kind in GROUPS for name, ep in sorted(installed(kind).items())]


def cmd_scenarios(args: argparse.Namespace) -> int:
    import textwrap

    from fedsim.scenario import builtin_scenarios

    for name, desc in builtin_scenarios().items():  # wrapped whole to 100 columns, never cut
        print(textwrap.fill(desc, 100, initial_indent=f"{name:<20} ", subsequent_indent=" " * 21))
    extra = _installed_lines()
    if extra:
        print("\ninstalled by packages (name them in a scenario like a built-in):")
        for line in extra:
            print(f"  {line}")
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from fedsim.system import devices

    if args.name:
        prof = devices.profile_at(args.name, "profiles NAME")
        from fedsim.config import read_text
        from fedsim.inputfiles import LIMIT_PROFILE

        print(read_text(prof.path, "profiles NAME", "profile YAML file", LIMIT_PROFILE) if prof.path else prof)
        return 0
    import pandas as pd

    with pd.option_context("display.max_rows", 200, "display.width", 200, "display.max_columns", 20):
        print(devices.profile_table().to_string(index=False))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """The scenario's model on its dataset: width groups, and per width (prefix sub-models) the parameters,
    bytes, FLOPs per sample and training memory at ``train.batch_size``, measured on the extracted module."""
    import pandas as pd

    from fedsim.learn.submodel import submodel_costs, width_submodel
    from fedsim.build import build_global_model, prepare_data
    from fedsim import load_scenario

    source, overrides = args.scenario, list(args.overrides)
    if source is not None and "=" in source and not _names_file(source):
        overrides.insert(0, source)
        source = None
    scenario = load_scenario(source, overrides)
    data = prepare_data(scenario).data
    model = build_global_model(scenario, data)
    shape = tuple(data.train.input_shape)
    groups = model.width_groups()
    print(f"model '{scenario.model.name}' on {data.train.name} {shape}: {model.num_blocks()} blocks, "
          f"width groups: " + (", ".join(f"{g.name} ({g.size})" for g in groups.values()) or "none"))
    rows = []
    for w in args.widths:
        sub = width_submodel(model, w, field="--widths")
        c = submodel_costs(model, sub, shape, scenario.train.batch_size, momentum=scenario.train.momentum > 0)
        rows.append({"width": w, "kept": sub.summary(model)["kept"], "bytes": c.download_bytes,
                     "fwd_flops": c.flops.forward, "bwd_flops": c.flops.backward,
                     "train_memory_bytes": c.memory.total})
    with pd.option_context("display.width", 200):
        print(pd.DataFrame(rows).to_string(index=False))
    return 0


def _widths(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from fedsim import __version__

    parser = argparse.ArgumentParser(prog="fedsim", description="Discrete-event simulator of federated and split learning.")
    parser.add_argument("--version", action="version", version=f"fedsim {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the full traceback of an internal error")
    # --debug also after the command (`fedsim run --debug ...`); SUPPRESS: a command without it leaves the
    # value given before the command
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    p = command("run", help="run a scenario", description="Run a built-in scenario (see `fedsim scenarios`) or a YAML file.")
    p.add_argument("scenario", nargs="?", default=None, help="built-in name or path to a YAML file (default: 'default')")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. stop.max_time_s=30 train.lr=0.1; with several algorithms address one by label: algorithm.fedbuff.buffer_size=5")
    p.add_argument("--out", default=None, help="run directory, new or empty (default: output.dir/<scenario name>, or -2, -3, ... if that one is taken)")
    p.add_argument("--force", action="store_true", help="clear a non-empty run directory first")
    p.add_argument("--allow-large", action="store_true", help="run even when the work estimate is absurd")
    p.add_argument("--seeds", default=None, help="run once per seed (e.g. 0,1,2) and compare the algorithms across seeds")
    p.add_argument("--target", type=float, default=None, help="with --seeds: accuracy for the time-to-target column")
    p.add_argument("--resume", action="store_true", help="reuse the finished runs already in the folder (same resolved "
                   "scenario) and run only the rest; an incomplete run is run again")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)
    p = command("sweep", help="one run per point of a grid of fields; time-to-accuracy, bytes, energy",
                       description="Sweep fields: e.g. `fedsim sweep default channel.uplink.mbps=0.5,2,8 --target 0.9`; "
                                   "several key=v1,v2,... give their grid.")
    p.add_argument("scenario", nargs="?", default=None, help="built-in name or YAML path (default: 'default')")
    p.add_argument("overrides", nargs="*", help="one or more key=v1,v2,... (their Cartesian grid) plus any key=value overrides")
    p.add_argument("--target", type=float, default=None, help="accuracy whose time-to-reach is plotted (default: stop.target_accuracy)")
    p.add_argument("--seeds", default=None, help="run every point once per seed (e.g. 0,1,2): mean ± std per point")
    p.add_argument("--jobs", type=int, default=1, help="run points in N local processes (default 1)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run points as Ray tasks: a local Ray, or the cluster at ADDRESS (e.g. auto, ray://head:10001)")
    p.add_argument("--out", default=None, help="sweep directory, new or empty (default: runs/sweep-<scenario>, or -2, -3, ... if taken)")
    p.add_argument("--force", action="store_true", help="clear a non-empty sweep directory first")
    p.add_argument("--resume", action="store_true", help="reuse the finished runs already in the sweep directory (same "
                   "resolved scenario) and run only the rest")
    p.add_argument("--allow-large", action="store_true", help="run even when a run's work estimate is absurd")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_sweep)
    p = command("figures", help="a finished run's figures for a paper: PNG (300 dpi), vector PDF and SVG",
                description="Draw a finished run's figures with matplotlib at a paper's column width (3.5 in) or "
                            "page width (7.16 in), 7-9 pt text, into RUN/figures/ (or --out).")
    p.add_argument("run", help="a finished run's folder")
    p.add_argument("--format", nargs="+", default=["png", "pdf", "svg"], choices=["png", "pdf", "svg"],
                   help="formats to write (default: png pdf svg)")
    p.add_argument("--width", default="column", choices=["column", "page"],
                   help="column (3.5 in, the default) or page (7.16 in)")
    p.add_argument("--out", default=None, help="folder for the figures (default: RUN/figures)")
    p.set_defaults(func=cmd_figures)
    p = command("compare", help="overlay earlier runs: accuracy, bytes, energy; a comparison table",
                       description="Compare finished runs (any algorithms, seeds or scenarios): every run under "
                                   "the folders given, e.g. `fedsim compare runs/default runs/fedasync`.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (a run, a multi-algorithm run, --seeds or sweep folders)")
    p.add_argument("--out", default=None, help="comparison folder, new or empty (default: runs/compare, or -2, ... if taken)")
    p.add_argument("--target", type=float, default=None, help="accuracy for a time-to-target column")
    p.add_argument("--force", action="store_true", help="clear a non-empty comparison folder first")
    p.set_defaults(func=cmd_compare)
    p = command("show", help="print the resolved scenario without running it")
    p.add_argument("scenario", nargs="?", default=None, help="built-in name or YAML path (default: 'default')")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.set_defaults(func=cmd_show)
    p = command("reference", help="print the scenario-field reference (every field, type, default, allowed values)")
    p.set_defaults(func=cmd_reference)
    p = command("scenarios", help="list built-in scenarios")
    p.set_defaults(func=cmd_scenarios)
    p = command("profiles", help="list device profiles or show one")
    p.add_argument("name", nargs="?", default=None)
    p.set_defaults(func=cmd_profiles)
    p = command("models", help="the scenario's model: width groups and costs per width",
                       description="Build the scenario's model on its dataset and measure prefix sub-models.")
    p.add_argument("scenario", nargs="?", default=None, help="built-in name or YAML path (default: 'default')")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. model.name=resnet20 data.name=digits32")
    p.add_argument("--widths", type=_widths, default=[1.0, 0.5, 0.25], help="comma-separated widths (default 1,0.5,0.25)")
    p.set_defaults(func=cmd_models)
    from fedsim.plugins import plugin_commands

    for name, help_text, configure in plugin_commands():  # e.g. `check`, from the analysis package
        configure(command(name, help=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may also come after options (`fedsim run default --quiet train.lr=0.1`)
    stray = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = list(args.overrides) + extra
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    debug = bool(getattr(args, "debug", False))
    previous = _on_sigterm()
    try:
        with warnings.catch_warnings():
            if not debug:  # numeric warnings are noise on a user's terminal; results carry NaN/None instead
                warnings.simplefilter("ignore", RuntimeWarning)
            import numpy as np

            with np.errstate(all="ignore" if not debug else "warn"):
                return int(args.func(args) or 0)
    except FedsimError as exc:  # one line, whatever the message holds (a value with a newline, a YAML report)
        print(f"fedsim: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated as exc:
        print(f"fedsim: terminated ({exc.signame}); {_what_is_kept(args.command)}", file=sys.stderr)
        return _end_now(129 if exc.signame == "SIGHUP" else 143, argv)
    except KeyboardInterrupt:
        print(f"fedsim: interrupted; {_what_is_kept(args.command)}", file=sys.stderr)
        return _end_now(130, argv)
    except UserDecisionError as exc:  # a decision the user's method returned that a shape cannot act on
        if debug:
            traceback.print_exc()
        print(f"fedsim: error in your code: {one_line(exc)}", file=sys.stderr)
        return UserDecisionError.exit_code
    except Exception as exc:  # the last line of defence: one line, exit 3, the run folder keeps what it has
        if debug:
            traceback.print_exc()
        from fedsim.components import user_code_error

        blame = user_code_error(exc)  # raised in the user's own code: name it, exit 4
        if blame is not None:
            print(f"fedsim: error in your code: {one_line(blame)}", file=sys.stderr)
            return blame.exit_code
        if isinstance(exc, OSError) and exc.errno in _FILE_SYSTEM_REFUSALS:  # the place given, not fedsim
            where = f" {shown_path(exc.filename)}" if exc.filename is not None else ""
            print(f"fedsim: error: the file system refused{where}: {exc.strerror} (allowed: a place fedsim can "
                  "read and write, with room)", file=sys.stderr)
            return EXIT_BAD_INPUT
        text = one_line(" ".join(str(exc).split())) or "(no message)"
        print(f"fedsim: internal error: {type(exc).__name__}: {text[:300]} (run with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        _restore_sigterm(previous)


def _end_now(code: int, argv: Sequence[str] | None) -> int:
    """After an interrupt of the ``fedsim`` command itself (``argv`` None: the process's own command line),
    end the process at once, its outputs written and its streams flushed: the interpreter's teardown
    (freeing torch, pandas and matplotlib) takes seconds on a loaded machine, and Ctrl-C or SIGTERM asks to
    stop now.  Called with an ``argv`` (tests, other Python code) it returns the code."""
    if argv is None:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


#: The commands whose every write goes through :mod:`fedsim.files`, so that it knows whether they wrote.
_RECORDED_COMMANDS = ("run", "sweep", "compare")


def _what_is_kept(command: str) -> str:
    """What an interrupt leaves, truly: the outputs written so far, or, for a command that wrote nothing
    yet (stopped while reading its scenario, say), nothing."""
    from fedsim.files import wrote_anything

    if command in _RECORDED_COMMANDS and not wrote_anything():
        return "nothing was written"
    return "outputs written so far are kept"


#: Signals handled like Ctrl-C: a run writes its summary (``status: interrupted``) and the command ends.
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _on_sigterm() -> object:
    """SIGTERM and SIGHUP raise Terminated (an interrupt), so a run writes its summary like after Ctrl-C.
    SIGHUP ignored when fedsim starts stays ignored (``nohup fedsim run ...`` keeps running after a
    hang-up).  Returns the handlers they had."""
    def handler(signum: int, frame: object) -> None:
        raise Terminated(signal.Signals(signum).name)

    try:
        return [(signum, signal.signal(signum, handler)) for signum in _STOP_SIGNALS
                if signum == signal.SIGTERM or signal.getsignal(signum) != signal.SIG_IGN]
    except ValueError:  # not the main thread (e.g. called from a worker): leave signals alone
        return None


def _restore_sigterm(previous: object) -> None:
    for signum, handler in previous or []:  # type: ignore[attr-defined]
        try:
            signal.signal(signum, handler)
        except ValueError:
            pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
