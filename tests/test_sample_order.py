"""The local sample order hook (``Assignment.order``, ``fedsim.learn.sgd.SampleOrder``) and the exact peers'
workload it was added for (benchmarks/peers/): a researcher reproducing another framework's run decides
which client visits which of its samples when, and gets that framework's weights bit for bit."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedsim.algorithms import Assignment
from fedsim.errors import ConfigError
from fedsim.learn.sgd import SGDConfig, batch_schedule, local_sgd

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "benchmarks" / "peers"


def test_batch_schedule_follows_the_order_pass_by_pass():
    calls = []

    def order(n, epoch, generator):
        calls.append((n, epoch))
        return np.roll(np.arange(n), epoch + 1)  # a different permutation each pass

    got = batch_schedule(5, 5, 2, torch.Generator().manual_seed(0), order)
    assert [b.tolist() for b in got] == [[4, 0], [1, 2], [3], [3, 4], [0, 1]]
    assert calls == [(5, 0), (5, 1)]


def test_local_sgd_with_an_order_is_torch_sgd_on_those_batches_bit_for_bit():
    torch.manual_seed(1)
    x, y = torch.randn(40, 6), torch.randint(0, 3, (40,))
    idx = np.array([3, 7, 11, 12, 20, 21, 22, 30, 31, 39])
    orders = [np.random.default_rng(7).permutation(10), np.random.default_rng(8).permutation(10)]
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    ref = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    ref.load_state_dict(model.state_dict())
    cfg = SGDConfig(lr=0.1, batch_size=4, local_epochs=2)
    stats = local_sgd(model, x, y, idx, cfg, torch.Generator().manual_seed(0),
                      order=lambda n, epoch, generator: orders[epoch])
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    steps = 0
    for perm in orders:
        rows = torch.as_tensor(idx[perm])
        for s in range(0, 10, 4):
            opt.zero_grad()
            nn.functional.cross_entropy(ref(x[rows[s:s + 4]]), y[rows[s:s + 4]]).backward()
            opt.step()
            steps += 1
    assert stats.steps == steps == 6
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad", [lambda n, e, g: np.arange(n - 1), lambda n, e, g: np.zeros(n, dtype=int),
                                 lambda n, e, g: np.arange(1, n + 1), lambda n, e, g: "abc"])
def test_an_order_that_is_not_a_permutation_is_one_clear_error(bad):
    with pytest.raises(ConfigError, match="Assignment.order: .*(permutation of 0..4|not positions)"):
        batch_schedule(5, 3, 2, torch.Generator(), bad)


def test_an_assignment_takes_a_trainer_or_an_order_not_both():
    with pytest.raises(ValueError, match="a trainer or a sample order"):
        Assignment(trainer=lambda *a: None, order=lambda n, e, g: np.arange(n))


def test_the_peers_workload_ends_at_the_plain_loops_weights_bit_for_bit(tmp_path, monkeypatch):
    """benchmarks/peers/workload.yaml (a loader, a model factory, client selection, the sample order and the
    workload's server sum, all public extension points) gives the plain PyTorch loop's final weights exactly,
    and so its final accuracy float."""
    monkeypatch.syspath_prepend(str(PEERS))
    for mod in ("common", "pure_loop", "fedsim_workload"):
        sys.modules.pop(mod, None)
    import fedsim
    import pure_loop

    loop_model, accs, steps, _ = pure_loop.run()
    assert steps == 402 and accs[30] == 0.4511784613132477
    res = fedsim.run(str(PEERS / "workload.yaml"), out=str(tmp_path / "run"), output__figures=False)
    assert res.summary["status"] == "ok"
    import fedsim_workload

    state = torch.load(tmp_path / "run" / "final_model.pt")
    ours = [v for k, v in sorted(state.items())]
    theirs = [v for k, v in sorted(loop_model.state_dict().items())]
    assert len(ours) == len(theirs) == 4
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert fedsim_workload.final_accuracy(state) == 0.4511784613132477
    m = res.metrics
    assert m["accuracy"].iloc[-1] == 134 / 297  # fedsim's own metric: correct / n in float64


def test_the_peers_workload_run_loads_neither_the_compiler_stack_nor_unused_algorithms(tmp_path):
    """Start-up cost a user meets with their own model factory and algorithm: building a factory's model never
    runs it on meta tensors (that imports torch's compiler stack, about a second), and a ``module:Class``
    algorithm does not import every built-in algorithm module."""
    code = ("import sys\n"
            "import fedsim\n"
            f"res = fedsim.run({str(PEERS / 'workload.yaml')!r}, out={str(tmp_path / 'run')!r}, output__figures=False)\n"
            "assert res.summary['status'] == 'ok', res.summary\n"
            "print(sorted(m for m in ('torch._dynamo', 'fedsim.algorithms.gas', 'fedsim.algorithms.semisfl',\n"
            "                         'fedsim.algorithms.fedraa') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=PEERS, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_device_profile_file_is_parsed_once_until_it_changes(tmp_path):
    from fedsim.system import devices

    src = ROOT / "device_profiles" / "jetson-nano.yaml"
    path = tmp_path / "board.yaml"
    path.write_text(src.read_text())
    first = devices.load_profile(path)
    assert devices.load_profile(path) is first  # the same immutable profile, not parsed again
    text = src.read_text().replace("name: ", "name: board-", 1)
    path.write_text(text + "\n")  # a different size: read again
    again = devices.load_profile(path)
    assert again is not first and again.name.startswith("board-")
