"""The built-in split algorithms declare today's exchange (one upload per local iteration, a gradient back,
a barrier), and the split shapes run it exactly as they did before exchanges could be declared: each built-in
split scenario, run briefly, writes the same systems records (who, what, bytes, times) as the code before
the change did.  The digests below were recorded by running these cases on that code: commit 7162acd, where
work cut short is recorded (``ended``) and an interrupted server request leaves the queue, but no exchange
is declared yet.  (On 0a94a82, before that fix, an availability drop left a ghost request queued at the
server: ``async-sfl-drops`` served 11 versions in 12 s instead of 279.)  A change to the loops' order of
events, a byte size or a service time changes them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from fedsim import scenario_from_mapping
from fedsim.runner import run_scenario
from fedsim.scenario import load_raw

ROOT = Path(__file__).resolve().parents[1]
EXT = ROOT / "docs" / "extending"
#: the records the world and the loops write (not the training measurements, which the exchange does not touch)
SYSTEM_KINDS = {"dispatch", "download", "compute", "upload", "server", "apply", "aggregate", "round", "drop",
                "offline"}
SYSTEM_KEYS = ("kind", "client", "what", "bytes", "flops", "t", "start", "end", "version", "base_version", "round")

CASES = {
    "minibatch-sfl": ("minibatch-sfl", {"stop": {"max_versions": 6}}),
    "s2fl": ("s2fl", {"stop": {"max_versions": 6}}),
    "async-sfl": ("async-sfl", {"stop": {"max_versions": 6}}),
    "async-sfl-drops": ("async-sfl", {"stop": {"max_time_s": 4.0},
                                      "availability": {"model": "exponential", "mean_on_s": 3.0, "mean_off_s": 1.0}}),
    "gas": ("gas", {"stop": {"max_versions": 6}}),
    "gas-cell-timing": ("gas-cell-timing", {"stop": {"max_versions": 5},
                                            "data": {"name": "mnist1d", "num_clients": 20, "options": {"num_samples": 2000},
                                                     "partition": {"method": "shards", "labels_per_client": 2}}}),
    "semisfl": ("semisfl", {"stop": {"max_versions": 3}}),
    "splitfed": ("minibatch-sfl", {"stop": {"max_versions": 4},
                                   "algorithm": {"name": "splitfed:SequentialSplitFed", "cut": 1,
                                                 "clients_per_round": 3}}),
}

#: (records kept, digest) per case, recorded from the loops as they were before exchanges were declared
BEFORE = {
    "minibatch-sfl": (480, "8dd78c13304b64ddccd6"),
    "s2fl": (480, "8dd78c13304b64ddccd6"),
    "async-sfl": (606, "183aefb31ced01f06db6"),
    "async-sfl-drops": (8839, "3a0f79b1888a576254c4"),
    "gas": (606, "7eee9e0eaaa3e0046c68"),
    "gas-cell-timing": (5783, "76fee7e1b152a30bd173"),
    "semisfl": (387, "32ce5cd375528b3e06df"),
    "splitfed": (320, "80cccdc7b3c2a7bcc490"),
}


def _value(v: object) -> object:
    return float(f"{v:.12g}") if isinstance(v, float) else v


def system_digest(records: list[dict]) -> tuple[int, str]:
    """The systems records reduced to the fields the exchange decides (times to 12 significant digits)."""
    kept = [[_value(r.get(k)) for k in SYSTEM_KEYS] for r in records if r["kind"] in SYSTEM_KINDS]
    return len(kept), hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:20]


def run_case(case: str, out: Path) -> list[dict]:
    name, over = CASES[case]
    raw = load_raw(name)
    raw.update(output={"figures": False}, **over)
    run_scenario(scenario_from_mapping(raw, source_dir=EXT), out, progress=False)
    return [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_builtin_split_traces_are_those_from_before_exchanges_were_declared(tmp_path, case):
    assert system_digest(run_case(case, tmp_path)) == BEFORE[case]


def test_the_digest_sees_a_changed_byte_and_a_shifted_time():
    """The check can fail: one byte more on one upload, or one upload a nanosecond later, is another digest."""
    recs = [{"kind": "upload", "client": 1, "what": "activations", "bytes": 4224, "t": 0.25, "start": 0.1,
             "end": 0.25}, {"kind": "eval", "t": 0.3, "accuracy": 0.5}]
    base = system_digest(recs)
    assert system_digest([{**recs[0], "bytes": 4225}, recs[1]]) != base
    assert system_digest([{**recs[0], "t": 0.25 + 1e-9}, recs[1]]) != base
    assert system_digest([recs[0], {**recs[1], "accuracy": 0.9}]) == base  # training numbers are not its business
