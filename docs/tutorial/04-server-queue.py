# %% [markdown]
# # Lesson 4: the server is a queue
#
# **Question.** In asynchronous FL and in split learning every arrival is a job for the server. How busy
# does the server get, how long do jobs wait for it, and do the queueing laws you know hold on a simulated
# run?
#
# The server in fedsim is a queueing station: `server.workers` identical workers behind one FIFO queue,
# each job's service time from its FLOPs on the server's device profile (plus a fixed `overhead_s`).
# Every job's queue wait and service time are in the trace (`server` rows: `wait`, `service`, `what`),
# and `summary.json` keeps the station's statistics under `server`. About 15 minutes.

# %%
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import fedsim

RUNS = Path("runs/tutorial/04")
FIGURES = Path(os.environ.get("FEDSIM_TUTORIAL_FIGURES", RUNS))
FIGURES.mkdir(parents=True, exist_ok=True)
pd.set_option("display.width", 140)


def show(fig, name):
    """Save a figure under FIGURES (and draw it under the cell when this runs as a notebook)."""
    fig.savefig(FIGURES / name, dpi=100, bbox_inches="tight")
    if "ipykernel" in sys.modules:
        from IPython.display import display
        display(fig)
    plt.close(fig)

# %% [markdown]
# ## A load you can turn up
#
# FedAsync serves every arriving update as its own `apply` job. Put the server on a Raspberry Pi 4
# (`server.profile=raspberry-pi-4`) and raise the number of clients in flight (`algorithm.concurrency`):
# more clients in flight, more arrivals per second at the same server. (Watch `mean_service_s` in the
# table: applying an update of this small MLP is so little work that even a Pi does it in microseconds,
# so a job's service time is almost all the server's fixed per-job cost, `server.overhead_s`.) The
# scenario's digits are split over 40 clients (`data.num_clients=40`) so that up to 40 can be in flight.
# Systems-only runs, 1 s of virtual time each.
#
# Little's law says that over a window, the time-average number waiting L_q equals the arrival rate λ
# times the mean wait W_q. The summary measures L_q with a time-weighted accumulator inside the station,
# and W_q from each job's own wait; λ is jobs / window. They are recorded separately, so the law is a
# real check on the simulator's bookkeeping. Utilisation is the busy fraction of the worker, and should
# equal λ · E[S] (the offered load) for one worker.

# %%
def station(run):
    """The server's statistics from summary.json, with the two products Little's law compares."""
    s = run.summary["server"]
    lam = s["requests"] / s["span"]
    return {"requests": s["requests"], "lambda_per_s": lam, "mean_service_s": s["mean_service"],
            "utilisation": s["utilisation"], "lambda_x_service": lam * s["mean_service"] / s["workers"],
            "mean_wait_s": s["mean_wait"], "L_q": s["mean_queue_length"], "lambda_x_W_q": lam * s["mean_wait"],
            "max_queue": s["max_queue_length"], "max_wait_s": s["max_wait"], "span_s": s["span"]}


LOAD = ["train.systems_only=true", "stop.max_time_s=1", "server.profile=raspberry-pi-4", "data.num_clients=40"]
NO_REPORT = ["output.figures=false"]  # figures and report.html take seconds: only the busiest run writes them
runs = {c: fedsim.run("fedasync", out=RUNS / f"c{c}", force=True,
                      overrides=LOAD + [f"algorithm.concurrency={c}"] + (NO_REPORT if c < 40 else []))
        for c in (5, 10, 20, 30, 40)}
table = pd.DataFrame({c: station(r) for c, r in runs.items()}).T.rename_axis("concurrency")
print(table.drop(columns=["max_wait_s", "span_s"]).round(4).to_string())

# %% [markdown]
# Read the table column against column: `L_q` against `lambda_x_W_q` (Little's law) and `utilisation`
# against `lambda_x_service`. As concurrency rises, the arrival rate and the utilisation rise and the wait
# grows faster than linearly: the closer the worker is to busy all the time, the more often a job finds
# another ahead of it. Between 30 and 40 clients in flight the arrival rate hardly grows: it cannot pass
# the service rate 1 / E[S] ({{1 / table.loc[40, "mean_service_s"]:.0f}} jobs per second here), so the extra clients only lengthen the
# queue. The server has become the bottleneck.
#
# The trace lets you check the station itself. A job arrived at `start − wait`; the number waiting at
# time t is the number of jobs that arrived by t and had not started. Rebuild it from the trace of the
# busiest run and draw it:

# %%
busiest = runs[40]
jobs = busiest.trace[busiest.trace.kind == "server"]
arrive, begin = (jobs["start"] - jobs["wait"]).to_numpy(), jobs["start"].to_numpy()
grid = np.linspace(0, busiest.summary["virtual_time_s"], 4001)
waiting = (arrive[None, :] <= grid[:, None]).sum(1) - (begin[None, :] <= grid[:, None]).sum(1)
rebuilt_L_q = jobs["wait"].sum() / busiest.summary["server"]["span"]   # the area under the curve / window
print("job types:", jobs["what"].value_counts().to_dict())
print(f"L_q from the trace: {rebuilt_L_q:.4f}   from the station's accumulator: {table.loc[40, 'L_q']:.4f}")

# %%
fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
ax[0].plot(table.index, table["utilisation"], "o-", label="utilisation")
ax[0].plot(table.index, table["mean_wait_s"] / table["mean_service_s"], "s-", label="mean wait / mean service")
ax[0].set_xlabel("clients in flight (concurrency)")
ax[0].legend()
ax[0].set_title("Raspberry Pi 4 server")
ax[1].step(grid, waiting, where="post", lw=0.8)
ax[1].axhline(rebuilt_L_q, color="k", ls="--", label=f"time average L_q = {rebuilt_L_q:.2f}")
ax[1].set_xlabel("virtual time (s)")
ax[1].set_ylabel("jobs waiting")
ax[1].legend(fontsize=8)
ax[1].set_title("queue at concurrency 40")
show(fig, "04-server-queue.png")

# %% [markdown]
# The busiest run wrote its report, [`runs/tutorial/04/c40/report.html`](../../runs/tutorial/04/c40/report.html)
# (in your copy, once you have run the lesson). *The server* gives the utilisation, mean wait and queue
# length of the table's last row; *Figures → server queue* draws the queue over time, the curve on the
# right above; in the *Per-client time breakdown*, the grey *queue wait at the server* segments are each
# client's share of the W_q that Little's law multiplies.
#
# ## A split-learning server: GAS
#
# In split learning the server does far more than average models: it runs the top of the network for
# every client minibatch. The built-in `gas` scenario (asynchronous split FL, 3 clients in flight) has
# three job types: `sfl-gradient` (a client's activations in, the gradient back), `sfl-step` (a server SGD
# step) and `aggregate`. Run 60 versions of it:

# %%
gas = fedsim.run("gas", out=RUNS / "gas", force=True,
                 overrides=["train.systems_only=true", "output.figures=false", "stop.max_versions=60"])
gas_jobs = gas.trace[gas.trace.kind == "server"]
print("job types:", gas_jobs["what"].value_counts().to_dict())
print(pd.Series(station(gas)).drop(["max_wait_s", "span_s"]).round(4).to_string())

# %% [markdown]
# With three clients in flight the split server is busy nearly all the time: here the server, not the
# link or the devices, sets the pace, and any extra client only adds to its queue.
#
# ## Exercises
#
# 1. **Little's law and the offered load hold on every run.** *Expected:* L_q = λ·W_q and utilisation =
#    λ·E[S], up to the jobs still queued or in service when the window closes: those add area (waiting or
#    busy time) but no finished job. At most `max_queue` jobs wait at the end, none longer than `max_wait`;
#    a worker serves at most one job, none longer than the longest service in the trace. The queue
#    rebuilt from the trace matches the station's own accumulator exactly: the trace's `server` rows
#    include the jobs still queued or in service when the window closed (marked `ended: run_end`, their
#    wait counted to the close), which is why they outnumber the summary's finished `requests`. Checked:

# %% solution
for name, run in [*runs.items(), ("gas", gas)]:
    row = station(run)
    longest = run.trace[run.trace.kind == "server"]["service"].max()
    assert abs(row["L_q"] - row["lambda_x_W_q"]) <= row["max_queue"] * row["max_wait_s"] / row["span_s"] + 1e-12, name
    assert abs(row["utilisation"] - row["lambda_x_service"]) <= longest / row["span_s"] + 1e-12, name
assert abs(rebuilt_L_q - table.loc[40, "L_q"]) <= 1e-9
assert len(jobs) - (jobs["ended"] == "run_end").sum() == table.loc[40, "requests"]
assert table["utilisation"].is_monotonic_increasing and table["mean_wait_s"].is_monotonic_increasing

# %% [markdown]
# 2. **Add a worker.** At concurrency 40, what does `server.workers=2` do to the mean wait? *Expected:* it
#    falls, and more jobs are served in the same second, because the single worker was the bottleneck.
#    Checked:

# %% solution
two = station(fedsim.run("fedasync", out=RUNS / "c40-two-workers", force=True,
                         overrides=LOAD + NO_REPORT + ["algorithm.concurrency=40", "server.workers=2"]))
print({k: round(two[k], 4) for k in ("requests", "utilisation", "mean_wait_s", "L_q")})
assert two["mean_wait_s"] < table.loc[40, "mean_wait_s"] and two["requests"] > table.loc[40, "requests"]

# %% [markdown]
# 3. **Is this M/D/1?** Service times here are nearly constant, so try the M/D/1 formula
#    W_q = ρ / (2μ(1 − ρ)) with ρ the measured utilisation and μ = 1 / E[S], at each concurrency.
#    *Expected:* the formula's wait is above the measured one at every concurrency of the sweep. The
#    arrivals are not Poisson: the system is *closed*, a fixed number of clients cycle between training
#    and the server, so no more than concurrency − 1 jobs can ever be ahead of one, while M/D/1's wait
#    grows without bound as ρ → 1.

# %% solution
rho, mu = table["utilisation"], 1 / table["mean_service_s"]
md1 = pd.DataFrame({"utilisation": rho, "measured_wait_s": table["mean_wait_s"],
                    "md1_wait_s": rho / (2 * mu * (1 - rho))})
md1["md1_over_measured"] = md1["md1_wait_s"] / md1["measured_wait_s"]
print(md1.round(4).to_string())
assert (md1["md1_wait_s"] > md1["measured_wait_s"]).all()

# %% [markdown]
# 4. **Which cost is the server's?** Swap the Pi for the scenario's RTX 3090 (`server.profile=rtx-3090`),
#    then halve the per-job overhead (`server.overhead_s=0.001`). *Expected:* the faster GPU changes almost
#    nothing, since the work was already microseconds; halving the overhead halves the service time and,
#    at light load, about halves the utilisation.

# %% [markdown] solution
# At concurrency 5 (light load: the Pi's worker was busy {{table.loc[5, "utilisation"]:.0%}} of the time):

# %% solution
servers = {"raspberry-pi-4": station(runs[5])}
for name, extra in (("rtx-3090", ["server.profile=rtx-3090"]),
                    ("rtx-3090, overhead 1 ms", ["server.profile=rtx-3090", "server.overhead_s=0.001"])):
    servers[name] = station(fedsim.run("fedasync", out=RUNS / f"c5-{len(servers)}", force=True,
                                       overrides=LOAD + NO_REPORT + ["algorithm.concurrency=5", *extra]))
light = pd.DataFrame(servers).T[["requests", "mean_service_s", "utilisation", "mean_wait_s"]]
print(light.round(5).to_string())
pi, gpu, fast = (light.iloc[i] for i in range(3))
assert abs(gpu["mean_service_s"] / pi["mean_service_s"] - 1) < 0.01
assert abs(fast["mean_service_s"] / gpu["mean_service_s"] - 0.5) < 0.01
assert 0.4 < fast["utilisation"] / gpu["utilisation"] < 0.6
