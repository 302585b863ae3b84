"""Every task in the trace carries one id, from its ``dispatch`` to its ``apply`` or ``drop``.

The version keeper opens a task at each dispatch (ids 0, 1, 2, ... in dispatch order) and the world stamps
the id on the task's download, compute and upload records; the apply or drop names the task it ends.  So a
reader follows a task by its id, with no pairing of records by client and time.  Checked on built-in
scenarios of every loop shape (synchronous rounds with deadline drops, the vector engine, asynchronous slots
with staleness and availability drops, semi-asynchronous rounds, split learning in rounds and in slots), and
the checker itself is shown to catch each kind of broken chain."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from fedsim import scenario_from_mapping
from fedsim.runner import run_scenario
from fedsim.scenario import load_raw

#: the records that belong to one task
TASK_KINDS = {"dispatch", "download", "compute", "upload", "apply", "drop"}
ENDS = {"apply", "drop"}

CASES = {
    # synchronous rounds; a 0.4 s deadline drops the slow-link clients every round
    "sync-deadline": ("default", {"algorithm": {"name": "fedavg", "clients_per_round": 10, "deadline_s": 0.4},
                                  "stop": {"max_time_s": 3.0}}),
    # the same rounds computed as arrays (the vector engine writes the records in bulk)
    "sync-vector": ("default", {"algorithm": {"name": "fedavg", "clients_per_round": 10, "engine": "vector"},
                                "stop": {"max_time_s": 3.0}}),
    # asynchronous slots, stale updates refused (mean staleness is about concurrency - 1 = 9)
    "async-stale": ("fedasync", {"algorithm": {"name": "fedasync", "concurrency": 10, "max_staleness": 6},
                                 "stop": {"max_time_s": 0.5}}),
    # asynchronous slots whose updates wait in a buffer while their client is dispatched again
    "async-fedbuff": ("fedasync", {"algorithm": {"name": "fedbuff", "concurrency": 10}, "stop": {"max_time_s": 0.5}}),
    # asynchronous, clients going offline mid-task
    "async-offline": ("fedasync", {"stop": {"max_time_s": 2.0},
                                   "availability": {"model": "exponential", "mean_on_s": 0.5, "mean_off_s": 0.2}}),
    # semi-asynchronous rounds (Co-S²P: a quorum, the rest carried over)
    "semi-async": ("cos2p", {"stop": {"max_versions": 3}, "model": {"depth": 4}}),
    # split learning in rounds, and in slots with clients going offline
    "split-rounds": ("minibatch-sfl", {"stop": {"max_versions": 4}}),
    "split-slots": ("gas", {"stop": {"max_versions": 6}}),
    "split-slots-offline": ("async-sfl", {"stop": {"max_time_s": 2.0},
                                          "availability": {"model": "exponential", "mean_on_s": 1.0,
                                                           "mean_off_s": 0.5}}),
}


def chain_problems(records: list[dict]) -> list[str]:
    """What is wrong with the trace's task chains (empty: every task is one dispatch ... apply-or-drop chain).

    Each record of a task kind carries ``task``; each id has exactly one dispatch, which comes first; all its
    records name the same client; it ends in at most one apply or drop, after which it has no record; and
    every apply or drop has its dispatch."""
    problems: list[str] = []
    by_task: dict[object, list[dict]] = defaultdict(list)
    for r in records:
        if r["kind"] not in TASK_KINDS:
            continue
        if r.get("task") is None:
            problems.append(f"a {r['kind']} record at t={r['t']} has no task id")
            continue
        by_task[r["task"]].append(r)
    for task, recs in by_task.items():
        kinds = [r["kind"] for r in recs]
        if kinds.count("dispatch") != 1:
            problems.append(f"task {task}: {kinds.count('dispatch')} dispatch records")
        elif kinds[0] != "dispatch":
            problems.append(f"task {task}: a {kinds[0]} record before its dispatch")
        if len({r["client"] for r in recs}) != 1:
            problems.append(f"task {task}: records of clients {sorted({r['client'] for r in recs})}")
        ends = [i for i, k in enumerate(kinds) if k in ENDS]
        if len(ends) > 1:
            problems.append(f"task {task}: {len(ends)} applies or drops")
        elif ends and ends[0] != len(kinds) - 1:
            problems.append(f"task {task}: a {kinds[ends[0] + 1]} record after its {kinds[ends[0]]}")
    return problems


def run_case(case: str, out: Path) -> list[dict]:
    name, over = CASES[case]
    raw = load_raw(name)
    raw.update(output={"figures": False})
    raw.setdefault("train", {})
    raw["train"] = {**raw["train"], "systems_only": True}
    for key, value in over.items():  # a section's keys are merged; the algorithm is replaced
        merge = key != "algorithm" and isinstance(raw.get(key), dict)
        raw[key] = {**raw[key], **value} if merge else value
    run_scenario(scenario_from_mapping(raw), out, progress=False)
    return [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_task_is_one_chain_from_dispatch_to_apply_or_drop(tmp_path: Path, case: str) -> None:
    records = run_case(case, tmp_path)
    assert chain_problems(records) == []
    dispatches = [r for r in records if r["kind"] == "dispatch"]
    ends = [r for r in records if r["kind"] in ENDS]
    assert ends, "the case ends some tasks"
    # ids are given in dispatch order, from 0, one per dispatch
    assert [r["task"] for r in dispatches] == list(range(len(dispatches)))
    # every apply or drop has exactly one dispatch with its id, of the same client
    by_id = {r["task"]: r for r in dispatches}
    for r in ends:
        assert by_id[r["task"]]["client"] == r["client"], r
    # a task with neither was under way, or its update waiting at the server, when the run stopped; in rounds
    # that is only the round cut by the run's end: each such task is its client's last
    if case.startswith(("sync", "split-rounds")):
        last = {r["client"]: r["task"] for r in dispatches}
        for t in set(by_id) - {r["task"] for r in ends}:
            assert last[by_id[t]["client"]] == t, t


def test_the_cases_cover_drops_of_every_cause(tmp_path: Path) -> None:
    reasons = set()
    for case in ("sync-deadline", "async-stale", "async-offline"):
        reasons |= {r["reason"].split()[0] for r in run_case(case, tmp_path / case) if r["kind"] == "drop"}
    assert {"deadline", "staleness", "offline"} <= reasons, reasons


def test_a_buffered_update_keeps_the_task_it_came_from(tmp_path: Path) -> None:
    """FedBuff re-dispatches a client as soon as its upload arrives, so its buffered update is applied while
    the client runs its next task: the apply names the earlier task (the one whose upload it was)."""
    records = run_case("async-fedbuff", tmp_path)
    last_upload: dict[int, int] = {}
    later = 0
    for r in records:
        if r["kind"] == "upload":
            last_upload[r["client"]] = r["task"]
        elif r["kind"] == "apply":
            assert r["task"] == last_upload[r["client"]], r
        if r["kind"] == "apply" and any(d["kind"] == "dispatch" and d["client"] == r["client"] and d["task"] > r["task"]
                                        and d["t"] <= r["t"] for d in records):
            later += 1
    assert later > 0, "some client was dispatched again before its buffered update was applied"


def _chain(task: int, client: int, kinds: tuple[str, ...]) -> list[dict]:
    return [{"t": float(i), "kind": k, "client": client, "task": task} for i, k in enumerate(kinds)]


def test_the_checker_catches_each_broken_chain() -> None:
    good = _chain(0, 1, ("dispatch", "download", "compute", "upload", "apply")) + _chain(1, 2, ("dispatch", "drop"))
    assert chain_problems(good) == []
    orphan = good + [{"t": 9.0, "kind": "apply", "client": 3, "task": 7}]
    assert chain_problems(orphan) == ["task 7: 0 dispatch records"]
    twice = good + [{"t": 9.0, "kind": "dispatch", "client": 1, "task": 0}]
    assert "task 0: 2 dispatch records" in chain_problems(twice)
    stranger = good + [{"t": 9.0, "kind": "upload", "client": 5, "task": 1}]
    assert "task 1: records of clients [2, 5]" in chain_problems(stranger)
    assert "task 1: a upload record after its drop" in chain_problems(stranger)
    both = good + [{"t": 9.0, "kind": "drop", "client": 1, "task": 0}]
    assert chain_problems(both) == ["task 0: 2 applies or drops"]
    unnamed = good + [{"t": 9.0, "kind": "compute", "client": 1}]
    assert chain_problems(unnamed) == ["a compute record at t=9.0 has no task id"]


def server_problems(records: list[dict]) -> list[str]:
    """What is wrong with the ``server`` records' task ids (empty: each request for a client names a task of
    that client with an upload or apply, and the server's own work, for no client, names none)."""
    of_task: dict[object, set] = defaultdict(set)  # task -> clients of its uploads and applies
    for r in records:
        if r["kind"] in ("upload", "apply") and r.get("task") is not None:
            of_task[r["task"]].add(r["client"])
    problems = []
    for r in records:
        if r["kind"] != "server":
            continue
        if "task" not in r:
            problems.append(f"a server record at t={r['t']} has no task field")
        elif r["client"] is None:
            if r["task"] is not None:
                problems.append(f"the server's own {r['what']} at t={r['t']} names task {r['task']}")
        elif r["task"] is None:
            problems.append(f"a {r['what']} request of client {r['client']} at t={r['t']} has no task id")
        elif r["client"] not in of_task.get(r["task"], set()):
            problems.append(f"a {r['what']} request of client {r['client']} at t={r['t']} names task {r['task']}, "
                            "which has no upload or apply of that client")
    return problems


@pytest.mark.parametrize("case", ["async-stale", "split-slots", "sync-deadline"])
def test_every_server_record_names_the_task_it_serves(tmp_path: Path, case: str) -> None:
    """A request the server serves for a client names that client's task (one with an upload or apply of the
    same client); an aggregation, for nobody, names none."""
    records = run_case(case, tmp_path)
    server = [r for r in records if r["kind"] == "server"]
    assert server, "the case uses the server"
    assert server_problems(records) == []
    if case != "sync-deadline":  # (synchronous rounds serve only aggregations)
        assert any(r["client"] is not None for r in server), "the case serves requests for clients"


def test_a_served_update_names_its_own_task_not_the_clients_next(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """FedBuff refills a slot as soon as an upload arrives; made to serve each update (an ``apply`` request, as
    FedAsync does), the request is often served while its client already runs its next task: it names the
    task whose update it is (the upload's, fixed when the request arrives), never the client's newer one."""
    from fedsim.algorithms.fedbuff import FedBuff
    monkeypatch.setattr(FedBuff, "serve_each", True)
    records = run_case("async-fedbuff", tmp_path)
    assert server_problems(records) == []
    served = [r for r in records if r["kind"] == "server" and r["what"] == "apply"]
    assert served
    newer = 0
    for r in served:
        later = [d["task"] for d in records if d["kind"] == "dispatch" and d["client"] == r["client"]
                 and d["t"] <= r["start"]]
        assert later and r["task"] <= max(later)
        newer += r["task"] < max(later)  # the client was dispatched again before its update was served
    assert newer > 0, "some update was served after its client started its next task"


@pytest.mark.fast
def test_the_server_checker_catches_wrong_task_ids() -> None:
    good = (_chain(0, 1, ("dispatch", "download", "compute", "upload", "apply"))
            + [{"t": 9.0, "kind": "server", "client": 1, "task": 0, "what": "apply"},
               {"t": 9.5, "kind": "server", "client": None, "task": None, "what": "aggregate"}])
    assert server_problems(good) == []
    wrong = good + [{"t": 10.0, "kind": "server", "client": 2, "task": 0, "what": "apply"}]
    assert server_problems(wrong) == ["a apply request of client 2 at t=10.0 names task 0, which has no upload or "
                                      "apply of that client"]
    missing = good + [{"t": 10.0, "kind": "server", "client": 1, "task": None, "what": "apply"}]
    assert server_problems(missing) == ["a apply request of client 1 at t=10.0 has no task id"]
    own = good + [{"t": 10.0, "kind": "server", "client": None, "task": 0, "what": "aggregate"}]
    assert server_problems(own) == ["the server's own aggregate at t=10.0 names task 0"]
    old = good + [{"t": 10.0, "kind": "server", "client": 1, "what": "apply"}]
    assert server_problems(old) == ["a server record at t=10.0 has no task field"]
