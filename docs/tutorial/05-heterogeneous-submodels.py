# %% [markdown]
# # Lesson 5: heterogeneous devices and sub-models
#
# **Question.** Some devices cannot hold the model for training. Plain FedAvg must leave them out;
# HeteroFL, FjORD and FedRolex give each a narrower *sub-model* that fits. Which width does each device
# get, what does it send, and what does including the weak devices cost or buy in rounds and bytes?
#
# The built-in `heterofl` scenario gives 20 clients three memory budgets: Jetson Nanos may use 0.15 MiB
# for training, Xavier NX 0.3 MiB, AGX Orins all of theirs. `widths: auto` picks, per device class, the
# largest width (1, 1/2, 1/4, 1/8) whose training memory fits. About 15 minutes.

# %%
import contextlib
import io
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import fedsim
from fedsim.cli import main as fedsim_cli

RUNS = Path("runs/tutorial/05")
FIGURES = Path(os.environ.get("FEDSIM_TUTORIAL_FIGURES", RUNS))
FIGURES.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 120)


def show(fig, name):
    """Save a figure under FIGURES (and draw it under the cell when this runs as a notebook)."""
    fig.savefig(FIGURES / name, dpi=100, bbox_inches="tight")
    if "ipykernel" in sys.modules:
        from IPython.display import display
        display(fig)
    plt.close(fig)

# %% [markdown]
# ## What a width costs
#
# `fedsim models heterofl` builds the scenario's model (a small CNN on 8×8 digits) and measures prefix
# sub-models: the first ⌈w·n⌉ units of every width group. We capture its table to use it below.

# %%
buffer = io.StringIO()
with contextlib.redirect_stdout(buffer):
    fedsim_cli(["models", "heterofl"])
print(buffer.getvalue())
widths = pd.read_csv(io.StringIO(buffer.getvalue()), sep=r"\s+", skiprows=1)

# %% [markdown]
# Bytes and FLOPs shrink roughly with w² (a layer's weights are cut on both sides), training memory more
# slowly, since part of it (the inputs, the output layer) does not shrink. From the memory budgets,
# predict each class's width:

# %%
scenario = fedsim.load_scenario("heterofl")
budget = {g.profile: g.memory_mb for g in scenario.devices.mix}
predicted = {}
for cls, mib in budget.items():
    fits = widths if mib is None else widths[widths["train_memory_bytes"] <= mib * 2**20]
    predicted[cls] = float(fits["width"].max())
print({cls: f"{mib} MiB" if mib else "whole device" for cls, mib in budget.items()})
print("predicted width:", predicted)

# %% [markdown]
# ## Run the four methods
#
# The scenario runs FedAvg restricted to the devices that hold the whole model (`only_fitting: true`)
# beside HeteroFL, FjORD and FedRolex, on the same world for 15 s of virtual time. Systems-only again:
# the question is who trains what, and how long it takes.

# %%
res = fedsim.run("heterofl", out=RUNS / "four", force=True,
                 overrides=["train.systems_only=true", "output.figures=false"])
summary = pd.DataFrame(res.by_label).T[["versions", "updates_applied", "bytes_up", "bytes_down"]]
print(summary.to_string())

# %% [markdown]
# Every `dispatch` row of a sub-model run says what the client got (`submodel`: the kept fraction of the
# parameters); every `upload` row its bytes. Join them with the device classes:

# %%
classes = pd.read_csv(res.out / "heterofl" / "energy.csv").set_index("device")["device_class"]
tr = res.trace
up = tr[tr.kind == "upload"].assign(cls=lambda d: d["client"].astype(int).map(classes))
bytes_by_class = up.groupby(["label", "cls"])["bytes"].agg(["min", "max", "count"]).astype(int)
print(bytes_by_class.to_string())
print("clients per class:", classes.value_counts().to_dict())
kept = tr[(tr.kind == "dispatch") & (tr.label == "heterofl")].assign(
    cls=lambda d: d["client"].astype(int).map(classes),
    kept=lambda d: d["submodel"].map(lambda s: s["kept"] if isinstance(s, dict) else 1.0))
print(kept.groupby("cls")["kept"].unique().to_string())

# %% [markdown]
# An upload still on the link when the run stops at 15 s is cut there: its row says `ended: run_end` and
# its `bytes` are those sent by then, which is why some `min` values sit below the model's size
# ({{int((up["ended"] == "run_end").sum())}} such uploads here).
#
# FedAvg never uploads from a Nano or a Xavier: they cannot train the whole model, so only the Orins take
# part, and with fewer Orins than `clients_per_round` (10) every round takes all of them. The sub-model methods take
# everyone; the weak clients send a fraction of the bytes, so their uploads are short, rounds end sooner,
# and more rounds fit in the same 15 s.

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
order = ["jetson-nano", "jetson-xavier-nx-8gb", "jetson-agx-orin-32gb"]
per = up.groupby(["label", "cls"]).size().unstack(fill_value=0).reindex(columns=order, fill_value=0)
per.loc[["fedavg", "heterofl", "fjord", "fedrolex"]].plot.bar(stacked=True, ax=ax[0], rot=0)
ax[0].set_ylabel("updates uploaded in 15 s")
ax[0].legend(fontsize=8)
for label in ("fedavg", "heterofl"):
    rnd = tr[(tr.kind == "round") & (tr.label == label)]
    ax[1].step(rnd["end"], rnd["round"], where="post", label=label)
ax[1].set_xlabel("virtual time (s)")
ax[1].set_ylabel("rounds completed")
ax[1].legend()
fig.suptitle("Sub-models let weak devices in")
show(fig, "05-submodels.png")

# %% [markdown]
# ## A report to look at
#
# The runs above skipped their figures and reports (four reports take several seconds). Run HeteroFL
# alone with them on: on the same world it is the same run as HeteroFL's above, now with a report.

# %%
alone = fedsim.run("heterofl", out=RUNS / "heterofl", force=True,
                   overrides=["algorithm=heterofl", "train.systems_only=true"])
print({k: alone.summary[k] for k in ("versions", "updates_applied", "bytes_up")})
assert all(alone.summary[k] == res.by_label["heterofl"][k] for k in ("versions", "updates_applied", "bytes_up"))

# %% [markdown]
# Open [`runs/tutorial/05/heterofl/report.html`](../../runs/tutorial/05/heterofl/report.html) (in your copy,
# once you have run the lesson). In its *Per-client time breakdown* every device class works, where FedAvg
# left the Nanos and Xaviers idle; *Traffic and server work by purpose* gives the bytes up and down of the
# table's `heterofl` row; in the *Interactive timeline*, hover a Nano's upload for its bytes, a fraction
# of an Orin's (the `min` and `max` per class above).
#
# ## Exercises
#
# 1. **Predict the widths, and who FedAvg leaves out.** *Expected:* each class trains the width predicted
#    from its memory budget (its dispatches carry that width's kept fraction); FedAvg with `only_fitting`
#    uploads only from the Orins; the sub-model methods complete more rounds than FedAvg in the same time
#    and move fewer bytes up. Checked:

# %% solution
for cls, w in predicted.items():
    expect = float(widths.loc[widths["width"] == w, "kept"].iloc[0])
    assert set(kept[kept["cls"] == cls]["kept"]) == {expect}, (cls, w)
assert set(up[up.label == "fedavg"]["cls"]) == {"jetson-agx-orin-32gb"}
for label in ("heterofl", "fjord", "fedrolex"):
    assert summary.loc[label, "versions"] > summary.loc["fedavg", "versions"]
    assert summary.loc[label, "bytes_up"] < summary.loc["fedavg", "bytes_up"]

# %% [markdown]
# 2. **Shrink the Nano's budget** to 0.05 MiB (`devices.mix` is a list: copy the scenario with
#    `fedsim show heterofl > mine.yaml` and edit it). *Expected:* no allowed width fits the Nano, not even
#    1/8, and the run is refused before it starts with one line naming the device, the model and both
#    memory figures.

# %% [markdown] solution
# In Python the scenario's mapping can be edited directly (`load_raw` reads a built-in scenario as a dict):

# %% solution
from fedsim import scenario_from_mapping
from fedsim.errors import ConfigError
from fedsim.scenario import load_raw

raw = load_raw("heterofl")
raw["devices"]["mix"][0]["memory_mb"] = 0.05  # the Nano's entry
try:
    fedsim.run(scenario_from_mapping(raw), out=RUNS / "tiny-nano", force=True)
    raise AssertionError("a device no width fits should be refused")
except ConfigError as err:
    print(err)
    assert "jetson-nano" in str(err) and "'cnn'" in str(err) and str(err).count("MiB") == 2
assert not (RUNS / "tiny-nano" / "trace.jsonl").exists()  # refused before anything ran

# %% [markdown]
# 3. **HeteroFL against FedRolex.** Both send the same bytes (the table above), but HeteroFL's Nanos always
#    train the first quarter of each layer, FedRolex's a window that rolls one unit per round. Run
#    `fedsim run heterofl` (training, one to two minutes) and then `fedsim check runs/heterofl`: the per-entry
#    coverage row N_q^i counts how few clients updated the least-covered entry in a round.

# %% [markdown] solution
# The `aggregate` rows carry the same count per round (`coverage_min`, and `coverage_mean` over all
# entries), so this lesson's systems-only run already shows it:

# %% solution
agg = tr[tr.kind == "aggregate"]
coverage = agg.groupby("label")[["coverage_min", "coverage_mean"]].mean().dropna()
print(coverage.round(3).to_string())
applied = tr[tr.kind == "apply"].assign(cls=lambda d: d["client"].astype(int).map(classes))
orins = applied[applied.cls == "jetson-agx-orin-32gb"].groupby(["label", "round"]).size().groupby("label").mean()
print("Orins applied per round:", orins.round(3).to_dict())
assert coverage.loc["heterofl", "coverage_min"] == coverage.loc["fedrolex", "coverage_min"]
assert abs(coverage.loc["heterofl", "coverage_min"] - orins["heterofl"]) < 1e-9

# %% [markdown] solution
# Round by round the two are the same: the least-covered entries are those only the full-width Orins train,
# whether the Nanos' quarter sits at the start of each layer (HeteroFL) or has rolled elsewhere (FedRolex).
# The difference is over rounds: FedRolex's window visits every unit, so every entry gets the Nanos' data
# sooner or later, while HeteroFL's last three quarters never do. `fedsim check` on a training run puts the
# same count beside the theorem that needs it.

# %% [markdown]
# 4. **Does including the weak devices help accuracy?** *Expected:* not much at this scale: the user
#    guide's results table for this scenario has FedAvg on the Orins level with HeteroFL, because the Orins
#    alone hold enough of every label. Look at the label histogram of `partition.csv` per device class to
#    see why, then make the Orins' data skewed (a smaller `data.partition.alpha`) and try again.

# %% solution
part = pd.read_csv(res.out / "heterofl" / "partition.csv").set_index("client")
labels = [c for c in part.columns if c.startswith("label_")]
by_class = part[labels].groupby(part.index.map(classes)).sum()
share = by_class / by_class.sum()
print(share.round(2).to_string())
assert (by_class.loc["jetson-agx-orin-32gb"] > 0).all()  # the Orins hold some of every label

# %% [markdown] solution
# The Orins hold {{share.loc["jetson-agx-orin-32gb"].min():.0%}} to {{share.loc["jetson-agx-orin-32gb"].max():.0%}}
# of each label: every digit reaches FedAvg through them. The training runs of the second half take a few
# minutes, so this page does not run them: `fedsim run heterofl data.partition.alpha=0.1` gives each client
# fewer labels, and the Orins' share of some digit falls toward zero, where the weak devices' data starts
# to matter.
