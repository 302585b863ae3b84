"""fedsim's round times on the wall clock, for ``../peers.py``'s steady-round column (not a timed run).

The whole-process runs are left untouched; this separate run wraps ``VersionKeeper.apply`` (where every
round ends) with a wall-clock stamp, so fedsim's steady round is measured as the other scripts measure
theirs: the median of rounds 2..R.  It prints one ``RESULT`` line.

    python fedsim_rounds.py [workload.yaml] [OUT_DIR]
"""
import statistics
import sys
import tempfile
import time

import fedsim
from fedsim.versions import VersionKeeper

import common as c

stamps: list[float] = []
_apply = VersionKeeper.apply


def _stamped(self, *args, **kwargs):
    out = _apply(self, *args, **kwargs)
    stamps.append(time.perf_counter())
    return out


VersionKeeper.apply = _stamped

if __name__ == "__main__":
    scenario = sys.argv[1] if len(sys.argv) > 1 else "workload.yaml"
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="fedsim-rounds-")
    res = fedsim.run(scenario, out=out, force=True, output__figures=False)
    per_round = [b - a for a, b in zip(stamps, stamps[1:])]  # rounds 2..R
    c.report("fedsim_rounds", rounds=len(stamps), median_round_2on_s=statistics.median(per_round),
             status=res.summary["status"])
