"""analysis as a fedsim plugin (entry point ``fedsim.plugins: analysis``): live theory probes during a run
(``eval.probe_every``) and the ``fedsim check`` command."""
from __future__ import annotations

import argparse
from typing import Any


def _live_probes(ctx: Any) -> Any:
    """The live-probe hook when the scenario asks for it (``eval.probe_every``)."""
    every = ctx.scenario.eval.probe_every
    if every is None:
        return None
    from analysis.probes import LiveProbes

    return LiveProbes(ctx, every=every)


def _check(args: argparse.Namespace) -> int:
    """Check a run, or every run under a folder, and print one grouped table (see analysis.present)."""
    from analysis.present import check_folder

    settings = None
    if getattr(args, "exact_probes", False):
        from analysis.probes import EXACT_PROBES

        settings = EXACT_PROBES
    jobs = getattr(args, "jobs", None)
    if jobs is not None:
        from fedsim.sim.executor import check_jobs_count

        check_jobs_count(jobs)
    text, _ = check_folder(args.run_dir, probe_settings=settings, jobs=jobs)
    print(text, end="")
    return 0


def _configure_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run folder, or a folder of runs (algorithms, seed-*/, sweep points)")
    parser.add_argument("--exact-probes", action="store_true",
                        help="probe checkpoints with the top Hessian eigenvalue to 1e-6 of its value (Lanczos "
                             "residual bound) instead of the default 1e-2; slower, same quantities")
    parser.add_argument("--jobs", type=int, default=None,
                        help="probe checkpoints in N processes, each on one thread (default: one per core, at "
                             "most one per 2 checkpoints, rounded up); the numbers are the same for any N")
    parser.set_defaults(func=_check)


version_hooks = [_live_probes]
commands = [("check", "theory quantities of a finished run, held against the bounds", _configure_check)]
