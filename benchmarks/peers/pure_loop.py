"""FedAvg on the peers' workload (README.md here) as a plain sequential PyTorch loop, no FL framework.

This is the floor: exactly the same SGD steps, one process, no messaging.
Usage: python pure_loop.py [--threads K] [--save FILE]
(default 1 torch thread; FL_WORKLOAD=scaled for the large size; --save writes the final state dict)
"""
import time

T0 = time.perf_counter()  # before the heavy imports, so "startup" includes them

import argparse  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402

import common as c  # noqa: E402


def run() -> tuple[torch.nn.Module, dict[int, float], int, list[float]]:
    """The whole loop: (final global model, accuracy by evaluated round, SGD steps, round timestamps)."""
    c.partition()  # load data + partition up front (counted as startup)
    global_model = c.make_model()
    client_model = c.make_model()
    accs, steps, t_rounds = {}, 0, [time.perf_counter()]
    for rnd in range(1, c.ROUNDS + 1):
        new = {k: torch.zeros_like(v) for k, v in global_model.state_dict().items()}
        updates = []
        for cid in c.sample_clients(rnd):
            client_model.load_state_dict(global_model.state_dict())
            n, s = c.local_train(client_model, cid, rnd)
            steps += s
            updates.append((n, {k: v.clone() for k, v in client_model.state_dict().items()}))
        total = sum(n for n, _ in updates)
        if total > 0:  # weighted by sample count, as Flower's FedAvg does
            for n, sd in updates:
                for k in new:
                    new[k] += sd[k] * (n / total)
            global_model.load_state_dict(new)
        if rnd % c.EVAL_EVERY == 0:
            accs[rnd] = c.accuracy(global_model)
            print(f"round {rnd:2d}  test acc {accs[rnd]:.4f}", flush=True)
        t_rounds.append(time.perf_counter())
    return global_model, accs, steps, t_rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, accs, steps, t_rounds = run()
    if args.save:
        torch.save(model.state_dict(), args.save)
    per_round = [b - a for a, b in zip(t_rounds, t_rounds[1:])]
    c.report(
        "pure_loop",
        final_acc=accs[c.ROUNDS],
        acc_by_round=accs,
        sgd_steps=steps,
        startup_s=t_rounds[0] - T0,
        rounds_s=t_rounds[-1] - t_rounds[0],
        round1_s=per_round[0],
        median_round_2on_s=statistics.median(per_round[1:]),
        round_s=[round(t, 4) for t in per_round],
        in_script_s=time.perf_counter() - T0,
        self_peak_rss_mb=c.peak_rss_mb(),
        torch_threads=torch.get_num_threads(),
    )


if __name__ == "__main__":
    main()
