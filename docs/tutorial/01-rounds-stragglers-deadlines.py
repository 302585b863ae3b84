# %% [markdown]
# # Lesson 1: a round, a straggler and a deadline
#
# **Question.** A synchronous FedAvg round lasts until the last of its clients has uploaded. Who is that
# client, what makes it slow, and what do you buy and lose by closing the round at a deadline instead?
#
# You will run FedAvg twice on the same simulated world (20 clients on three Jetson classes, uplinks
# of 0.5 to 5 Mbit/s, the built-in `default` scenario), once waiting for everyone and once with
# `deadline_s`, and read the answer off the event trace. About 15 minutes.
#
# The runs use `train.systems_only: true`: every download, computation and upload takes the time its real
# size and FLOPs give it on the simulated hardware, but no SGD step is taken, so each run takes about a
# second of wall time. Timing is the whole question here; lesson 2 trains.

# %%
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import Patch

import fedsim
from fedsim.errors import ConfigError

RUNS = Path("runs/tutorial/01")                                  # this lesson's run folders
FIGURES = Path(os.environ.get("FEDSIM_TUTORIAL_FIGURES", RUNS))  # where its figures go
FIGURES.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 120)


def show(fig, name):
    """Save a figure under FIGURES (and draw it under the cell when this runs as a notebook)."""
    fig.savefig(FIGURES / name, dpi=100, bbox_inches="tight")
    if "ipykernel" in sys.modules:
        from IPython.display import display
        display(fig)
    plt.close(fig)


COMMON = ["algorithm=fedavg", "train.systems_only=true", "stop.max_time_s=10"]
NO_REPORT = ["output.figures=false"]  # figures and report.html take seconds: only run 2 below writes them

# %% [markdown]
# ## Run 1: wait for everyone
#
# `fedsim.run` takes a built-in scenario name and `key=value` overrides, exactly as `fedsim run` does on
# the command line. `algorithm=fedavg` keeps only FedAvg (the scenario also runs FedBuff); FedAvg samples
# 10 of the 20 clients per round.

# %%
wait = fedsim.run("default", out=RUNS / "wait", force=True, overrides=COMMON + NO_REPORT)
print({k: wait.summary[k] for k in ("versions", "dropped", "virtual_time_s")})

# %% [markdown]
# The trace (`res.trace`, the run's `trace.jsonl` as a DataFrame) has one row per event. A client's task in
# a round is a `dispatch`, then a `download`, a `compute` and an `upload` (each with `start` and `end`),
# then the `apply` of its update or a `drop`; every record of one task carries the same `task` id, so the
# task's rows are found by that id alone. `round` rows say when each round started and ended, and
# `energy.csv` names each client's device class.

# %%
trace = wait.trace
classes = pd.read_csv(wait.out / "energy.csv").set_index("device")["device_class"]
rounds = trace[trace.kind == "round"][["round", "start", "end"]].reset_index(drop=True)
done = trace[trace["ended"].isna()] if "ended" in trace else trace  # leave out work the run's end cut short
phase = {kind: done[done.kind == kind].set_index("task") for kind in ("dispatch", "download", "compute", "upload")}
ids = phase["upload"].index  # the tasks whose upload arrived, one row each
tasks = pd.DataFrame({"client": phase["dispatch"].loc[ids, "client"].astype(int),
                      "round": phase["dispatch"].loc[ids, "round"].astype(int),
                      "start": phase["download"].loc[ids, "start"], "end": phase["upload"].loc[ids, "end"]})
for kind in ("download", "compute", "upload"):
    tasks[f"{kind}_s"] = phase[kind].loc[ids, "end"] - phase[kind].loc[ids, "start"]
tasks["uplink_mbps"] = phase["upload"].loc[ids, "rate_bps"] / 1e6
tasks["task_s"] = tasks["end"] - tasks["start"]
tasks["class"] = tasks["client"].map(classes)
tasks = tasks[tasks["round"].isin(rounds["round"])]  # the round the run's end cut has no `round` row
print(tasks[["download_s", "compute_s", "upload_s"]].mean().round(4).to_string())

# %% [markdown]
# Compute takes milliseconds: the `cnn` is small and a Jetson is fast. The model is 54,824 bytes, and
# sending it over an uplink of 0.5 to 5 Mbit/s takes a tenth of a second to nearly a second. So in this
# world the straggler is whoever has the slowest *link*, whatever its processor. Each round's straggler is
# the client whose upload ended last:

# %%
last = tasks.loc[tasks.groupby("round")["end"].idxmax()]
table = last[["round", "client", "class", "uplink_mbps", "task_s"]].round(3)
table["round_s"] = (rounds["end"] - rounds["start"]).round(3).values
print(table.to_string(index=False))

# %% [markdown]
# Every round waits for one of a handful of clients with slow uplinks, and they are of every device class.
# Per client, the task time barely varies (only compute has jitter, and compute is milliseconds):

# %%
per_client = tasks.groupby("client").agg(cls=("class", "first"), uplink_mbps=("uplink_mbps", "mean"),
                                        task_s=("task_s", "max")).sort_values("task_s")
fig, ax = plt.subplots(figsize=(7, 4.5))
colours = {"jetson-nano": "#e15759", "jetson-xavier-nx-8gb": "#4e79a7", "jetson-agx-orin-32gb": "#59a14f"}
ax.barh([str(c) for c in per_client.index], per_client["task_s"], color=per_client["cls"].map(colours))
ax.axvline(0.4, color="k", ls="--")
ax.text(0.405, len(per_client) - 0.6, "deadline_s = 0.4 (run 2)", fontsize=8)
ax.legend(handles=[Patch(color=c, label=n) for n, c in colours.items()], loc="lower right", fontsize=8)
ax.set_xlabel("longest task (download + compute + upload), s")
ax.set_ylabel("client")
ax.set_title("Who makes a FedAvg round long")
show(fig, "01-task-times.png")

# %% [markdown]
# ## Run 2: close each round at a deadline
#
# `algorithm.deadline_s=0.4` ends a round 0.4 s after it started; the updates that have not arrived are
# dropped (a `drop` event with `reason: deadline`), and the round's `dropped` field lists those clients.
# Before running it, predict from run 1 which clients will be dropped: every client whose task takes
# longer than 0.4 s.

# %%
DEADLINE = 0.4
predicted = set(per_client.index[per_client["task_s"] > DEADLINE])
cut = fedsim.run("default", out=RUNS / "deadline", force=True, overrides=COMMON + [f"algorithm.deadline_s={DEADLINE}"])
drops = cut.trace[cut.trace.kind == "drop"]
dropped = set(drops["client"].astype(int))
print("rounds in 10 s:", wait.summary["versions"], "without a deadline,", cut.summary["versions"], "with it")
print("updates dropped:", cut.summary["dropped"], "| reasons:", drops["reason"].value_counts().to_dict())
print("predicted to be dropped:", sorted(predicted))
print("dropped               :", sorted(dropped))

# %% [markdown]
# ## What the deadline cost
#
# A dropped client's link rate does not change between rounds, so it is dropped *every* time it is
# sampled: its data never reaches the model. `partition.csv` holds each client's samples per label; the
# share of each label that only dropped clients hold is lost to training:

# %%
part = pd.read_csv(cut.out / "partition.csv").set_index("client")
labels = [c for c in part.columns if c.startswith("label_")]
contributed = set(cut.trace[cut.trace.kind == "apply"]["client"].astype(int))
lost = part.loc[sorted(set(part.index) - contributed), labels].sum() / part[labels].sum()
print("clients that never contributed:", sorted(set(part.index) - contributed))
print("share of all training samples lost:",
      round(part.loc[sorted(set(part.index) - contributed), "samples"].sum() / part["samples"].sum(), 3))
print("share lost per label:", lost.round(2).to_dict())

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
for run, name in ((wait, "no deadline"), (cut, f"deadline_s = {DEADLINE}")):
    r = run.trace[run.trace.kind == "round"]
    ax[0].step(r["end"], r["round"], where="post", label=name)
ax[0].set_xlabel("virtual time (s)")
ax[0].set_ylabel("rounds completed")
ax[0].legend()
ax[1].bar(range(10), lost.values, color="#e15759")
ax[1].set_xticks(range(10))
ax[1].set_xlabel("label")
ax[1].set_ylabel("share never trained on")
ax[1].set_ylim(0, 1)
fig.suptitle("A deadline buys rounds and costs data")
show(fig, "01-deadline.png")

# %% [markdown]
# ## The run's report
#
# Run 2 kept its figures on, so it also wrote
# [`runs/tutorial/01/deadline/report.html`](../../runs/tutorial/01/deadline/report.html) (the link works in
# your copy of the repository once you have run the lesson; open the file in a browser). It shows this
# lesson's answers without any pandas:
#
# - *Rounds, stragglers and drops*: round by round, its straggler and the clients it dropped: the ones
#   printed under "dropped" above.
# - *Per-client time breakdown*, sorted by *most dropped*: the clients that never contributed come first;
#   sorted by *most waiting for the round*, the fast-link clients that spend their time waiting.
# - *Interactive timeline*: scroll to zoom into one round, hover a drop's × for its round, and hover the
#   upload bars for their bytes and link rate: the slow links are the ones the deadline cuts.
#
# ## Exercises
#
# 1. **Predict the drops.** From run 1 alone, which clients does `deadline_s=0.4` drop, and how often?
#    *Expected:* exactly the clients whose task in run 1 took longer than 0.4 s, every time they are
#    sampled. The lesson's run checks it:

# %% solution
assert dropped == predicted, (dropped, predicted)
assert cut.summary["versions"] > wait.summary["versions"]
assert all(r == "deadline" for r in drops["reason"])

# %% [markdown]
# 2. **A deadline nobody can meet.** What does fedsim do with `deadline_s=0.01`, shorter than the fastest
#    client's task? *Expected:* it refuses the scenario before running anything, with one line naming the
#    field (exit code 2 on the command line; `ConfigError` in Python):

# %% solution
try:
    fedsim.run("default", out=RUNS / "impossible", force=True, overrides=COMMON + NO_REPORT + ["algorithm.deadline_s=0.01"])
    raise AssertionError("a deadline shorter than every task should be refused")
except ConfigError as err:
    print(err)
    assert "algorithm.deadline_s" in str(err) and "\n" not in str(err)  # one line, naming the field

# %% [markdown]
# 3. **Raise the deadline to 0.6 s and then 0.9 s.** *Expected:* fewer clients dropped each time, and at a
#    deadline above the slowest task in the bar chart nobody is dropped and the run has as many rounds
#    as run 1. Use the bar chart to predict the drops before running.

# %% [markdown] solution
# Predict from `per_client` (each client's longest task in run 1), run each deadline, and add one just above
# the slowest task:

# %% solution
slowest = per_client["task_s"].max()
for d in (0.6, 0.9, round(slowest + 0.05, 2)):
    r = fedsim.run("default", out=RUNS / f"deadline-{d}", force=True,
                   overrides=COMMON + NO_REPORT + [f"algorithm.deadline_s={d}"])
    got = set(r.trace[r.trace.kind == "drop"]["client"].astype(int))
    expect = set(per_client.index[per_client["task_s"] > d])
    print(f"deadline {d} s: dropped {sorted(got)} (predicted {sorted(expect)}), rounds {r.summary['versions']}")
    assert got == expect
    if d > slowest:
        assert not got and r.summary["versions"] == wait.summary["versions"]

# %% [markdown]
# 4. **Give everyone the same uplink** (`channel.uplink.mbps=2`). *Expected:* the task times in the bar
#    chart collapse to nearly one value (the download rates still differ), and the straggler is now
#    decided by the downlink and the few milliseconds of compute jitter.

# %% [markdown] solution
# A task's length is its upload's end minus its download's start; with the task ids that is one `groupby`:

# %% solution
def task_lengths(run):
    tr = run.trace[run.trace["ended"].isna()] if "ended" in run.trace else run.trace
    length = (tr[tr.kind == "upload"].groupby("task")["end"].max()
              - tr[tr.kind == "download"].groupby("task")["start"].min()).dropna()
    return length


same = fedsim.run("default", out=RUNS / "same-uplink", force=True,
                  overrides=COMMON + NO_REPORT + ["channel.uplink.mbps=2"])
before, after = task_lengths(wait), task_lengths(same)
print(f"task length, uplinks 0.5-5 Mbit/s: {before.min():.3f} to {before.max():.3f} s")
print(f"task length, every uplink 2 Mbit/s: {after.min():.3f} to {after.max():.3f} s")
assert after.max() - after.min() < 0.25 * (before.max() - before.min())

# %% [markdown]
# 5. **Train for real** (drop `train.systems_only=true`, keep 10 s): compare `final_accuracy` in the two
#    runs' summaries. Whether the extra rounds beat the lost labels depends on which labels the dropped
#    clients hold; that is the trade-off, and the per-label bar chart is where to start explaining it.

# %% [markdown] solution
# Two training runs take a minute or two, so this page does not run them; the code is
#
# ```python
# TRAIN = ["algorithm=fedavg", "stop.max_time_s=10", "output.figures=false"]
# full = fedsim.run("default", out=RUNS / "train-wait", force=True, overrides=TRAIN)
# short = fedsim.run("default", out=RUNS / "train-deadline", force=True, overrides=TRAIN + ["algorithm.deadline_s=0.4"])
# print(full.summary["final_accuracy"], short.summary["final_accuracy"])
# ```
#
# Read the answer against `lost` above: the deadline run never trains on the samples the dropped clients
# hold, so a label with a large lost share is learned from few examples (none at a share of 1) however many
# rounds it runs, while the run that waits trains on every sample, in fewer rounds. Per-label accuracy is
# not in the summary; score each run's `final_model.pt` on the test set label by label to see it.
