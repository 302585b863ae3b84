# %% [markdown]
# # Lesson 6: split learning, and what moves over the link
#
# **Question.** In split learning a client trains only the bottom of the network (up to the *cut*) and
# the server trains the rest, so a client never sends the whole model. It sends activations instead, one
# batch per local step, and receives their gradients. Does that move fewer bytes than FL, and when not?
#
# You will run MiniBatch-SFL (the built-in `minibatch-sfl` scenario: an MLP with two hidden layers of 64
# on digits, cut after the first block, 3 clients per round) beside FedAvg on the same world, count the
# bytes of each kind, and find the number of local steps where SFL's traffic overtakes FL's. About 15
# minutes.

# %%
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import fedsim

RUNS = Path("runs/tutorial/06")
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


def run_pair(local_steps, extra=(), report=False, name=None):
    """MiniBatch-SFL and FedAvg (3 clients per round each) for 5 rounds, systems-only, into RUNS / ``name``
    (default ``k{local_steps}``); with ``report``, each also writes its figures and report.html (seconds more)."""
    return fedsim.run("minibatch-sfl", out=RUNS / (name or f"k{local_steps}"), force=True, overrides=[
        "algorithm=minibatch-sfl,fedavg", "algorithm.fedavg.clients_per_round=3", "train.systems_only=true",
        *([] if report else ["output.figures=false"]), "stop.max_versions=5", f"train.local_steps={local_steps}",
        *extra])

# %% [markdown]
# ## What moves
#
# Upload rows of a split-learning run say what they carried (`what`: `activations` or `model`). Download
# rows carry no `what`; the client part of the model comes down once per round and has the same size as
# the one going up, so everything else coming down is gradients.

# %%
res = run_pair(5, report=True)
tr = res.trace[res.trace.label == "minibatch-sfl"]
up, down = tr[tr.kind == "upload"], tr[tr.kind == "download"]
part_bytes = int(up[up["what"] == "model"]["bytes"].iloc[0])
down = down.assign(what=down["bytes"].map(lambda b: "model" if b == part_bytes else "gradients"))
moved = pd.concat([up.assign(direction="up"), down.assign(direction="down")])
print(moved.groupby(["direction", "what"])["bytes"].agg(["count", "min", "max", "sum"]).astype(int).to_string())
print("whole model:", res.by_label["fedavg"]["model_params"] * 4, "bytes; client part:", part_bytes, "bytes")

# %% [markdown]
# Per round each of the 3 clients sends one activation batch per local step (16 samples × 64 floats,
# plus the labels: the server computes the loss) and gets the same batch's gradients back; at the end it
# sends its client part up to be averaged and receives the average. FedAvg sends the whole model each way
# once per round, whatever the number of local steps.
#
# ## The crossover
#
# So per client and round, SFL moves K·(a + g) + 2c bytes and FL 2M, where K is the number of local steps,
# a and g an activation and a gradient batch, c the client part and M the whole model. They are equal at
# K* = 2(M − c) / (a + g). Predict it, then sweep K:

# %%
M = res.by_label["fedavg"]["model_params"] * 4
a = int(up[up["what"] == "activations"]["bytes"].max())
g = int(down[down["what"] == "gradients"]["bytes"].max())
k_star = 2 * (M - part_bytes) / (a + g)
print(f"a = {a} B, g = {g} B, c = {part_bytes} B, M = {M} B  ->  predicted K* = {k_star:.2f}")

rows = []
for k in (1, 2, 4, 5, 8, 16):
    r = res if k == 5 else run_pair(k)
    for s in r.summaries:
        rows.append({"local_steps": k, "algorithm": s["label"],
                     "bytes_per_round": (s["bytes_up"] + s["bytes_down"]) / s["versions"]})
traffic = pd.DataFrame(rows).pivot(index="local_steps", columns="algorithm", values="bytes_per_round")
traffic["sfl_over_fl"] = traffic["minibatch-sfl"] / traffic["fedavg"]
print(traffic.round(2).to_string())

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(traffic.index, traffic["minibatch-sfl"] / 1e3, "o-", label="MiniBatch-SFL")
ax.plot(traffic.index, traffic["fedavg"] / 1e3, "s-", label="FedAvg")
ax.axvline(k_star, color="k", ls="--", lw=1)
ax.text(k_star + 0.2, traffic["minibatch-sfl"].max() / 1e3 * 0.8, f"predicted K* = {k_star:.1f}", fontsize=8)
ax.set_xlabel("local steps per round (K)")
ax.set_ylabel("kB per round, up + down (3 clients)")
ax.legend()
ax.set_title("Split learning moves less only for short rounds")
show(fig, "06-sfl-crossover.png")

# %% [markdown]
# The measured curves cross where the formula says. Some activation batches hold 15 samples rather than
# 16 (the table's minimum sizes), and the formula uses the full batch, so the measured SFL traffic sits a
# little under the formula's. With this small MLP split learning saves traffic only for short rounds; a
# large model with small activations at the cut pushes K* up, and the
# [SemiSFL page](../papers/semisfl.md) computes the same ratio for that paper's CNN, AlexNet and VGG.
#
# ## The run's report
#
# The K = 5 pair wrote its reports; open
# [`runs/tutorial/06/k5/minibatch-sfl/report.html`](../../runs/tutorial/06/k5/minibatch-sfl/report.html)
# (in your copy, once you have run the lesson). *Traffic and server work by purpose* splits the bytes into
# activations, gradients and model parts, the table above; *The server* counts its jobs: an `sfl-step` per
# local step (one server step on the three clients' activation batches together) and an `aggregate` per
# round. In the *Interactive timeline*, zoom into one round: each client alternates short activation
# uploads with the server's steps on them, K times, before its client part goes up once.
#
# ## Exercises
#
# 1. **Predict the crossover.** *Expected:* SFL moves fewer bytes than FL for every K below K*, more for
#    every K above. Checked on the sweep:

# %% solution
for k, row in traffic.iterrows():
    assert (row["sfl_over_fl"] < 1) == (k < k_star), (k, row["sfl_over_fl"], k_star)

# %% [markdown]
# 2. **Move the cut up** (`algorithm.minibatch-sfl.cut=2`, an extra argument to `run_pair`). *Expected:*
#    the activations keep their size (both hidden layers have 64 units) but the client part doubles, so
#    K* falls below 1: SFL moves more than FL even at K = 1.

# %% [markdown] solution
# Measure a, g, c and M on one run, as above, and predict K* from them:

# %% solution
def sizes(run):
    """a, g, c and M of a run pair (bytes), read from its MiniBatch-SFL trace as above."""
    t = run.trace[run.trace.label == "minibatch-sfl"]
    u, d = t[t.kind == "upload"], t[t.kind == "download"]
    c = int(u[u["what"] == "model"]["bytes"].iloc[0])
    return {"a": int(u[u["what"] == "activations"]["bytes"].max()), "g": int(d[d["bytes"] != c]["bytes"].max()),
            "c": c, "M": run.by_label["fedavg"]["model_params"] * 4}


def k_star_of(z):
    return 2 * (z["M"] - z["c"]) / (z["a"] + z["g"])


cut2 = run_pair(1, extra=["algorithm.minibatch-sfl.cut=2"], name="cut2-k1")
z1, z2 = sizes(res), sizes(cut2)
ratio2 = [(s["bytes_up"] + s["bytes_down"]) / s["versions"] for s in cut2.summaries]  # per round
print(f"cut 1: {z1}, K* = {k_star_of(z1):.2f}")
print(f"cut 2: {z2}, K* = {k_star_of(z2):.2f}")
print(f"at K = 1 with cut 2, SFL moves {ratio2[0] / ratio2[1]:.2f}x FL's bytes per round")
assert z2["a"] == z1["a"] and z2["c"] > 1.5 * z1["c"] and k_star_of(z2) < 1 and ratio2[0] > ratio2[1]

# %% [markdown]
# 3. **A wider model** (`model.hidden=[256, 64]`). *Expected:* the client part grows with the first layer
#    and so does the activation batch; work out K* from the formula before you run it, then check it.

# %% solution
import math

wide = run_pair(1, extra=["model.hidden=[256, 64]"], name="wide-k1")
zw = sizes(wide)
kw = k_star_of(zw)
print(f"hidden [256, 64]: {zw}, predicted K* = {kw:.2f}")
check = {}
for k in (max(1, math.floor(kw)), math.floor(kw) + 1):
    r = run_pair(k, extra=["model.hidden=[256, 64]"], name=f"wide-k{k}")
    per_round = {s["label"]: (s["bytes_up"] + s["bytes_down"]) / s["versions"] for s in r.summaries}
    check[k] = per_round["minibatch-sfl"] / per_round["fedavg"]
print("SFL / FL bytes per round:", {k: round(v, 3) for k, v in check.items()})
assert zw["c"] > z1["c"] and zw["a"] > z1["a"]
assert all((v < 1) == (k < kw) for k, v in check.items())
