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
    import pandas as pd

    from analysis.report import check_run

    table = check_run(args.run_dir)
    with pd.option_context("display.max_rows", 500, "display.width", 200, "display.max_colwidth", 60):
        print(table.to_string(index=False))
    return 0


def _configure_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir")
    parser.set_defaults(func=_check)


version_hooks = [_live_probes]
commands = [("check", "theory quantities of a finished run, held against the bounds", _configure_check)]
