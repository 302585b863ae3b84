"""FedAvg on the peers' workload (README.md here) with Flower 1.41's Simulation Engine (Ray backend).

flwr.simulation.run_simulation(ServerApp, ClientApp, num_supernodes=100) with the
message-API FedAvg (flwr.serverapp.strategy.FedAvg), client resources num_cpus=1.

Two deliberate deviations from a stock Flower app, so that it runs *the same* workload as
pure_loop.py (both documented in README.md here):
  * Client sampling: stock FedAvg draws node ids with Python's `random.sample`; here
    `configure_train` is overridden to pick the partitions that common.sample_clients(rnd)
    picks. Node ids are random, so the node-id -> partition-id map is captured by wrapping
    Flower's internal `vce_api._register_nodes` (zero run-time cost; no extra messages).
  * Training metrics are summed, not averaged, so the total SGD-step count is exact.
Federated evaluation is off (fraction_evaluate=0); the server evaluates the global model
on the test set after rounds 10, 20, 30 via `evaluate_fn`, which also timestamps rounds.
"""
import os
import time

T0 = time.perf_counter()  # before the heavy imports, so "startup" includes them
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network here: skip the POST
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Local-only Ray: node IP 127.0.0.1 and every Ray server bound to loopback (checked with
# `ss -ltnp`). Without it Ray 2.55 binds its gRPC servers to all interfaces and uses the
# eth0 address; passing init_args _node_ip_address="127.0.0.1" does not help, ray.init
# maps 127.0.0.1 back to that address (services.resolve_ip_for_localhost).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import statistics  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402
from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.server.superlink.fleet.vce import vce_api  # noqa: E402
from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.serverapp.strategy.strategy_utils import sample_nodes  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

import common as c  # noqa: E402

OUT: dict = {"t_round_end": {}, "acc": {}}

# ---- node-id -> partition-id map, captured when the engine registers its SuperNodes ----
NODE_OF: dict[int, int] = {}  # partition-id -> node-id
REGISTERED = threading.Event()
_original_register = vce_api._register_nodes


def _register_and_record(num_nodes, state_factory):
    mapping = _original_register(num_nodes=num_nodes, state_factory=state_factory)
    NODE_OF.update({pid: nid for nid, pid in mapping.items()})
    REGISTERED.set()
    return mapping


vce_api._register_nodes = _register_and_record


def _timed_init_ray(self, cfg):  # only to report how much of round 1 is ray.init()
    t = time.perf_counter()
    _original_init_ray(self, cfg)
    OUT["ray_init_s"] = time.perf_counter() - t


_original_init_ray = RayBackend.init_ray
RayBackend.init_ray = _timed_init_ray

# ---- ClientApp: one local epoch on its partition, exactly common.local_train ----
client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    rnd = int(msg.content["config"]["server-round"])
    model = c.make_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    n, steps = c.local_train(model, pid, rnd)
    metrics = MetricRecord({"num-examples": n, "sgd-steps": steps, "torch-threads": torch.get_num_threads()})
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)


# ---- ServerApp ----
class MatchedFedAvg(FedAvg):
    """Stock FedAvg, except the round's clients come from common.sample_clients(rnd)."""

    def configure_train(self, server_round, arrays, config, grid):
        pids = c.sample_clients(server_round)
        sample_nodes(grid, self.min_available_nodes, len(pids))  # stock wait-for-nodes
        REGISTERED.wait()
        assert len(pids) == int(self.fraction_train * len(list(grid.get_node_ids())))
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(record, [NODE_OF[p] for p in pids], MessageType.TRAIN)


def sum_metrics(records: list[RecordDict], _weight_key: str) -> MetricRecord:
    total: dict[str, int] = {}
    for rec in records:
        for mr in rec.metric_records.values():
            for k, v in mr.items():
                total[k] = total.get(k, 0) + v
    return MetricRecord(total)


def central_eval(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
    """Called by Strategy.start before round 1 (rnd=0) and after every round."""
    OUT["t_round_end"][rnd] = time.perf_counter()
    if rnd == 0 or rnd % c.EVAL_EVERY:
        return None
    model = c.make_model()
    model.load_state_dict(arrays.to_torch_state_dict())
    OUT["acc"][rnd] = c.accuracy(model)
    return MetricRecord({"accuracy": OUT["acc"][rnd]})


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = MatchedFedAvg(
        fraction_train=c.CLIENTS_PER_ROUND / c.N_CLIENTS,  # 0.1
        fraction_evaluate=0.0,
        min_available_nodes=c.N_CLIENTS,
        train_metrics_aggr_fn=sum_metrics,
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(c.make_model().state_dict()),
        num_rounds=c.ROUNDS,
        evaluate_fn=central_eval,
    )
    m = result.train_metrics_clientapp
    OUT["sgd_steps"] = sum(int(r["sgd-steps"]) for r in m.values())
    # "torch-threads" is summed over the round's 10 clients: 10 means every client used 1
    OUT["client_torch_threads_sum"] = sorted({int(r["torch-threads"]) for r in m.values()})


if __name__ == "__main__":
    torch.set_num_threads(1)  # server-side evaluation; clients get Ray's OMP_NUM_THREADS=1
    c.load_data()  # test set for central_eval, loaded up front as pure_loop.py does
    t_call = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=c.N_CLIENTS,
        # no address in init_args: ray.init() starts a private single-node cluster here
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    t_done = time.perf_counter()
    te = OUT["t_round_end"]
    per_round = [te[r] - te[r - 1] for r in range(1, c.ROUNDS + 1)]
    c.report(
        "flower_sim",
        final_acc=OUT["acc"][c.ROUNDS],
        acc_by_round=OUT["acc"],
        sgd_steps=OUT["sgd_steps"],
        startup_s=te[0] - T0,  # imports + data + engine setup until round 1 is configured
        imports_s=t_call - T0,  # imports + loading the test set
        rounds_s=te[c.ROUNDS] - te[0],
        round1_s=per_round[0],  # includes Ray init + actor start (done lazily, in parallel)
        ray_init_s=OUT["ray_init_s"],
        median_round_2on_s=statistics.median(per_round[1:]),
        round_s=[round(t, 4) for t in per_round],
        shutdown_s=t_done - te[c.ROUNDS],
        in_script_s=time.perf_counter() - T0,
        self_peak_rss_mb=c.peak_rss_mb(),
        client_torch_threads_sum=OUT["client_torch_threads_sum"],
    )
