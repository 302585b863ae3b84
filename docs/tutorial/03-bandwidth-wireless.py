# %% [markdown]
# # Lesson 3: bandwidth and the wireless channel
#
# **Question.** How fast is a client's link, what sets it, and at what bandwidth does sending the model
# stop being the bottleneck and local training take over?
#
# Part A places clients at known distances from a base station and checks the simulated upload rates
# against the path-loss and Shannon formulas, with and without fading. Part B sweeps the uplink rate for a
# ResNet-20 and finds where communication and computation cross. All runs are systems-only (exact timing
# from real sizes and FLOPs, no SGD steps). About 15 minutes.

# %%
import math
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import fedsim

RUNS = Path("runs/tutorial/03")
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
# ## Part A: path loss, Shannon and fading
#
# Eight clients stand on a line at 50 to 600 m from the base station (`channel.positions.kind: fixed`).
# Their uplink follows 3GPP TR 36.814's macro-cell path loss, PL = 128.1 + 37.6·log10(d / 1 km) dB, and
# the Shannon rate over the link's band B: rate = B·log2(1 + SNR), with SNR = P·10^(−PL/10) / (N0·B). The
# defaults are B = 10 MHz, P = 0.2 W and N0 = 3.981e-21 W/Hz (−174 dBm/Hz). Every upload in the trace
# carries the rate it got (`rate_bps`).

# %%
DIST = [50, 100, 150, 200, 300, 400, 500, 600]
WORLD = ["algorithm=fedavg", "train.systems_only=true", "stop.max_time_s=10",
         "data.num_clients=8", "algorithm.clients_per_round=8",
         "channel.positions.kind=fixed", f"channel.positions.points={[[d, 0.0] for d in DIST]}"]


def upload_rates(fading):
    run = fedsim.run("default", out=RUNS / f"cell-{fading}", force=True,
                     overrides=WORLD + [f"channel.uplink={{model: tr36814, fading: {fading}}}",
                                        *([] if fading == "rayleigh" else ["output.figures=false"])])
    up = run.trace[run.trace.kind == "upload"]
    return up.assign(client=up["client"].astype(int), distance_m=up["client"].astype(int).map(dict(enumerate(DIST))))


def shannon_bps(d_m, bandwidth=10e6, power=0.2, n0=3.981e-21):
    path_loss_db = 128.1 + 37.6 * math.log10(d_m / 1000)
    snr = power * 10 ** (-path_loss_db / 10) / (n0 * bandwidth)
    return bandwidth * math.log2(1 + snr)


still = upload_rates("none")
faded = upload_rates("rayleigh")
table = pd.DataFrame({
    "distance_m": DIST,
    "formula_mbps": [shannon_bps(d) / 1e6 for d in DIST],
    "no_fading_mbps": still.groupby("distance_m")["rate_bps"].mean().values / 1e6,
    "rayleigh_mean_mbps": faded.groupby("distance_m")["rate_bps"].mean().values / 1e6,
    "rayleigh_min_mbps": faded.groupby("distance_m")["rate_bps"].min().values / 1e6,
})
print(table.round(2).to_string(index=False))

# %% [markdown]
# Without fading every upload of a client gets the same rate, and it is the formula's. Rayleigh block
# fading draws a new channel gain per transmission: the mean rate drops below the unfaded one (log is
# concave, so averaging over fades costs rate: Jensen's inequality), and far clients now and then get a
# deep fade with a tiny fraction of their usual rate. That one unlucky transmission is a straggler
# that no device upgrade fixes.

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.scatter(faded["distance_m"], faded["rate_bps"] / 1e6, s=6, alpha=0.3, label="Rayleigh fading, each upload")
ax.plot(DIST, table["no_fading_mbps"], "o-", color="k", label="no fading (simulated)")
ax.plot(DIST, table["formula_mbps"], "x", color="#e15759", ms=10, label="path loss + Shannon formula")
ax.set_yscale("log")
ax.set_xlabel("distance to the base station (m)")
ax.set_ylabel("uplink rate (Mbit/s)")
ax.legend(fontsize=8)
ax.set_title("TR 36.814 macro cell, 10 MHz, 0.2 W")
show(fig, "03-rate-vs-distance.png")

# %% [markdown]
# ## Part B: when does communication dominate?
#
# Now a heavier job: ResNet-20 (1,089,896 bytes of weights) on `digits32`, 20 local steps of batch 32, on
# the default scenario's three Jetson classes. Every client gets the same fixed uplink, swept from 2 to
# 32 Mbit/s, for 10 s of virtual time each. Per task, the trace gives the compute time and the upload time.
# Count finished transfers only: an upload still on the link when the run stops is cut there (its row says
# `ended: run_end`), and its shortened time would pull the mean down.

# %%
rows = []
for mbps in (2, 4, 8, 16, 32):
    run = fedsim.run("default", out=RUNS / f"resnet-{mbps}", force=True, overrides=[
        "algorithm=fedavg", "train.systems_only=true", "output.figures=false", "stop.max_time_s=10",
        "model.name=resnet20", "data.name=digits32", f"channel.uplink.mbps={mbps}"])
    tr = run.trace
    tr = tr[tr["ended"].isna()] if "ended" in tr else tr  # drop what the run's end cut short
    up, comp = tr[tr.kind == "upload"], tr[tr.kind == "compute"]
    rows.append({"uplink_mbps": mbps, "rounds": run.summary["versions"],
                 "compute_s": (comp["end"] - comp["start"]).mean(), "upload_s": (up["end"] - up["start"]).mean(),
                 "model_bytes": int(up["bytes"].iloc[0])})
sweep = pd.DataFrame(rows)
print(sweep.round(3).to_string(index=False))

# %% [markdown]
# Upload time falls as 1/rate; compute time does not depend on the link (it moves a little between runs
# only because each run's rounds sample other clients, of other device classes). The crossover is where
# the two are equal: 8 · bytes / rate = compute time, so rate* = 8 · bytes / compute time. Take the mean
# compute time over the sweep, predict the crossover, and find it in the sweep:

# %%
compute_s = sweep["compute_s"].mean()
predicted_mbps = 8 * sweep["model_bytes"].iloc[0] / compute_s / 1e6
comm_bound = sweep[sweep["upload_s"] > sweep["compute_s"]]["uplink_mbps"]
compute_bound = sweep[sweep["upload_s"] < sweep["compute_s"]]["uplink_mbps"]
print(f"mean compute time per task: {compute_s:.3f} s")
print(f"predicted crossover: {predicted_mbps:.1f} Mbit/s")
print("upload longer than compute at", comm_bound.tolist(), "Mbit/s; shorter at", compute_bound.tolist())

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(sweep["uplink_mbps"], sweep["upload_s"], "o-", label="upload per task")
ax.loglog(sweep["uplink_mbps"], sweep["compute_s"], "s-", label="compute per task (20 steps)")
ax.axvline(predicted_mbps, color="k", ls="--", lw=1)
ax.text(predicted_mbps * 1.05, sweep["upload_s"].max() / 2, f"predicted\n{predicted_mbps:.1f} Mbit/s", fontsize=8)
ax.set_xlabel("uplink rate (Mbit/s)")
ax.set_ylabel("seconds per task")
ax.legend()
ax.set_title("ResNet-20 on Jetsons: communication- or compute-bound")
show(fig, "03-crossover.png")

# %% [markdown]
# ## The run's report
#
# The Rayleigh run kept its figures on and wrote
# [`runs/tutorial/03/cell-rayleigh/report.html`](../../runs/tutorial/03/cell-rayleigh/report.html) (in
# your copy, once you have run the lesson). Under *Figures*, *link rates* is the histogram of every
# transfer's achieved rate: the faded uploads spread over two orders of magnitude, with a thin tail of deep
# fades far below the rest, while the downloads, over fixed links, sit at one rate per client. In the
# *Interactive timeline*, hover an upload bar for its bytes and the rate it got; the far clients' bars are
# the long ones.
#
# ## Exercises
#
# 1. **Check the formula, and the crossover.** *Expected:* without fading the simulated rate equals the
#    path-loss + Shannon formula to rounding; Rayleigh fading lowers the mean rate over all uploads; the
#    predicted crossover lies between the last communication-bound and the first compute-bound rate of
#    the sweep. The runs check all three:

# %% solution
assert np.allclose(table["no_fading_mbps"], table["formula_mbps"], rtol=1e-6)
assert faded["rate_bps"].mean() < still["rate_bps"].mean()
assert max(comm_bound) < predicted_mbps < min(compute_bound)
# upload time is bytes / rate (plus the link's small latency): within 10% of 8·bytes/rate at every rate
assert np.allclose(sweep["upload_s"], 8 * sweep["model_bytes"] / (sweep["uplink_mbps"] * 1e6), rtol=0.1)

# %% [markdown]
# 2. **Double the band** (`bandwidth_hz: 2.0e7` in the uplink mapping of part A). *Expected:* less than
#    double the rate, because the noise N0·B doubles too and the SNR halves. B·log2(1 + SNR) grows
#    nearly in proportion to B at high SNR and hardly at all at low SNR, so the near clients gain the most
#    and the far ones the least.

# %% solution
wide = fedsim.run("default", out=RUNS / "cell-wide", force=True, overrides=WORLD + [
    "channel.uplink={model: tr36814, fading: none, bandwidth_hz: 2.0e7}", "output.figures=false"])
wide_up = wide.trace[wide.trace.kind == "upload"]
gain = pd.DataFrame({"distance_m": DIST,
                     "measured_gain": wide_up.groupby(wide_up["client"].astype(int))["rate_bps"].mean().values
                     / still.groupby("client")["rate_bps"].mean().values,
                     "formula_gain": [shannon_bps(d, bandwidth=20e6) / shannon_bps(d) for d in DIST]})
print(gain.round(3).to_string(index=False))
assert ((gain["measured_gain"] > 1) & (gain["measured_gain"] < 2)).all()
assert gain["measured_gain"].is_monotonic_decreasing
assert np.allclose(gain["measured_gain"], gain["formula_gain"], rtol=1e-6)

# %% [markdown]
# 3. **Crossover per device class.** The mean compute time mixes Nanos with Orins. Group `comp` by the
#    device class (`energy.csv`, as in lesson 1) and predict one crossover per class. *Expected:* the Nano,
#    the slowest device, has the lowest crossover rate: it is compute-bound sooner.

# %% solution
def compute_by_class(run):
    cls = pd.read_csv(run.out / "energy.csv").set_index("device")["device_class"]
    c = run.trace[run.trace.kind == "compute"]
    return (c["end"] - c["start"]).groupby(c["client"].astype(int).map(cls)).mean()


per_class = pd.DataFrame({"compute_s": compute_by_class(run)})  # `run`: the sweep's last run
per_class["crossover_mbps"] = 8 * sweep["model_bytes"].iloc[0] / per_class["compute_s"] / 1e6
print(per_class.round(3).to_string())
assert per_class["crossover_mbps"].idxmin() == "jetson-nano"

# %% [markdown]
# 4. **Halve the local work** (`train.local_steps=10`). *Expected:* compute halves, and the crossover rate
#    doubles: fewer steps per round make the same link the bottleneck sooner.

# %% solution
half = fedsim.run("default", out=RUNS / "resnet-8-k10", force=True, overrides=[
    "algorithm=fedavg", "train.systems_only=true", "output.figures=false", "stop.max_time_s=10",
    "model.name=resnet20", "data.name=digits32", "channel.uplink.mbps=8", "train.local_steps=10"])
per_class["compute_s_k10"] = compute_by_class(half)
per_class["crossover_mbps_k10"] = 8 * sweep["model_bytes"].iloc[0] / per_class["compute_s_k10"] / 1e6
print(per_class[["compute_s", "compute_s_k10", "crossover_mbps", "crossover_mbps_k10"]].round(3).to_string())
# per class the means mix different clients (each run samples its own); client by client the time halves
by_client = lambda r: (lambda c: (c["end"] - c["start"]).groupby(c["client"]).mean())(r.trace[r.trace.kind == "compute"])
ratio = (by_client(half) / by_client(run)).dropna()
print(f"compute time with 10 steps / with 20, client by client: median {ratio.median():.3f}")
assert abs(ratio.median() - 0.5) < 0.05
