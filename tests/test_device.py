"""``train.device`` and ``train.deterministic``, tested on the CPU: resolution of ``auto`` and refusals of a
missing accelerator (by patching what torch reports), byte-identical traces across the CPU spellings,
checkpoints saved as CPU tensors, and every tensor factory the training path calls naming its device."""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import fedsim
from fedsim.cli import main
from fedsim.errors import ConfigError
from fedsim.learn.accelerator import data_on, memory_available, resolve_device, run_device, set_deterministic
from fedsim.runner import run_scenario
from fedsim.scenario import TrainConfig


def _gpu(monkeypatch, cuda: bool, mps: bool = False, count: int = 1) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count if cuda else 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    _gpu(monkeypatch, cuda=True, mps=True)
    assert resolve_device("auto") == torch.device("cuda", 0)  # indexed, as tensors moved there report it
    _gpu(monkeypatch, cuda=False, mps=True)
    assert resolve_device("auto") == torch.device("mps", 0)
    _gpu(monkeypatch, cuda=False, mps=False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_named_accelerators_resolve_when_present(monkeypatch):
    _gpu(monkeypatch, cuda=True, mps=True, count=2)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("mps") == torch.device("mps", 0)
    with pytest.raises(ConfigError, match=r"train.device: got 'cuda:2' but this machine has 2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("spec, kind", [("cuda", "CUDA"), ("cuda:0", "CUDA"), ("cuda:3", "CUDA"), ("mps", "MPS")])
def test_missing_accelerator_is_refused_naming_what_is_allowed(monkeypatch, spec, kind):
    _gpu(monkeypatch, cuda=False, mps=False)
    with pytest.raises(ConfigError) as err:
        resolve_device(spec)
    assert str(err.value) == f"train.device: got '{spec}' but no {kind} device is available (allowed: auto, cpu)"


def test_ray_and_systems_only_train_on_the_cpu(monkeypatch):
    _gpu(monkeypatch, cuda=True)
    assert run_device(TrainConfig(device="auto", executor="ray")) == torch.device("cpu")
    assert run_device(TrainConfig(device="auto", systems_only=True)) == torch.device("cpu")
    assert run_device(TrainConfig(device="auto")) == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match=r"^train.device: got 'cuda' but executor 'ray'"):
        run_device(TrainConfig(device="cuda", executor="ray"))


@pytest.mark.parametrize("value", ["gpu", "cuda:-1", "cuda:x", "CUDA", "tpu", "cpu:0"])
def test_malformed_device_one_line_exit_2(capsys, tmp_path, value):
    code = main(["run", "default", f"train.device={value}", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [f"fedsim: error: train.device: got '{value}' (allowed: auto, cpu, cuda, cuda:N, mps)"]
    assert not (tmp_path / "out").exists()


def test_cuda_without_gpu_one_line_exit_2_nothing_written(monkeypatch, capsys, tmp_path):
    _gpu(monkeypatch, cuda=False, mps=False)
    out = tmp_path / "out"
    code = main(["run", "default", "train.device=cuda", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.splitlines() == ["fedsim: error: train.device: got 'cuda' but no CUDA device is available "
                                "(allowed: auto, cpu)"]
    assert not out.exists()


def _tiny(tiny, **train) -> "fedsim.Scenario":
    raw = copy.deepcopy(tiny)
    raw["train"].update(train)
    return fedsim.load_scenario(raw)


def _trace(folder: Path) -> bytes:
    return (folder / "trace.jsonl").read_bytes()


def test_cpu_default_and_deterministic_runs_give_the_same_trace(tmp_path, tiny):
    """Default (auto: the CPU where there is no accelerator), explicit cpu and deterministic algorithms:
    byte-identical traces and final models; the deterministic switch is restored after the run.  On a
    machine with an accelerator the default picks it, so there only cpu and deterministic are compared."""
    before = torch.are_deterministic_algorithms_enabled()
    runs = {"default": {}, "cpu": {"device": "cpu"}, "det": {"device": "cpu", "deterministic": True}}
    if torch.cuda.is_available() or getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        del runs["default"]
    for name, train in runs.items():
        [summary] = run_scenario(_tiny(tiny, **train), tmp_path / name, progress=False)
        assert summary["status"] == "ok" and summary["device"] == "cpu"
    assert torch.are_deterministic_algorithms_enabled() == before
    traces = {name: _trace(tmp_path / name) for name in runs}
    assert len(set(traces.values())) == 1
    a, b = (torch.load(tmp_path / n / "final_model.pt") for n in (next(iter(runs)), "det"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_and_final_model_are_cpu_tensors(tmp_path, tiny):
    raw = copy.deepcopy(tiny)
    raw["output"]["checkpoints"] = 2
    run_scenario(fedsim.load_scenario(raw), tmp_path, progress=False)
    for path in [tmp_path / "final_model.pt", *sorted((tmp_path / "checkpoints").glob("v*.pt"))]:
        state = torch.load(path, map_location=None)
        assert state and all(v.device.type == "cpu" for v in state.values()), path


def test_set_deterministic_sets_the_cublas_workspace_only_for_cuda(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on: None)
    set_deterministic(True, torch.device("cpu"))
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    set_deterministic(True, torch.device("cuda"))
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_data_on_the_same_device_is_the_same_object(tiny):
    from fedsim.build import prepare_data

    data = prepare_data(_tiny(tiny)).data
    assert data_on(data, torch.device("cpu")) is data


def test_host_memory_is_read_on_cpu():
    found = memory_available(torch.device("cpu"))
    if sys.platform.startswith("linux"):
        assert found is not None and found[0] > 0 and found[1] == "available host memory"


def test_batched_round_reports_and_checks_host_memory(monkeypatch, capsys, tmp_path):
    """A batched round's need on the host device is printed in one line, and refused in one line when the
    device has less free than that."""
    import fedsim.preflight as preflight

    raw = {"seed": 1, "data": {"num_clients": 6}, "model": {"name": "cnn"},
           "train": {"local_steps": 2, "batched": True, "device": "cpu"},
           "algorithm": {"name": "fedavg", "clients_per_round": 4}, "stop": {"max_versions": 1},
           "output": {"figures": False}}
    run_scenario(fedsim.load_scenario(raw), tmp_path / "ok", progress=True)
    notes = [ln for ln in capsys.readouterr().out.splitlines() if "train.batched" in ln]
    assert len(notes) == 1 and "a batched round of 4 clients needs about" in notes[0] and "GiB on cpu" in notes[0]
    monkeypatch.setattr(preflight, "memory_available", lambda device: (1000.0, "free on cuda:0"))
    with pytest.raises(ConfigError, match=r"^train.batched: a batched round of 4 clients needs about .* GiB free on "
                                          r"cuda:0 \(allowed: a round that fits"):
        run_scenario(fedsim.load_scenario(raw), tmp_path / "small", progress=False)
    assert not (tmp_path / "small").exists()


# ------------------------------------------------------------------------------------------------ tensors
FACTORIES = {torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.tensor, torch.as_tensor, torch.eye,
             torch.linspace, torch.rand, torch.randn, torch.randint, torch.randperm}
PACKAGE = str(Path(fedsim.__file__).parent)
ROOT = str(Path(fedsim.__file__).parent.parent)
OURS = (PACKAGE, str(Path(ROOT) / "analysis"))  # fedsim and the analysis package (live probes)
TORCH = str(Path(torch.__file__).parent)
OPTIM = str(Path(torch.__file__).parent / "optim")


class _DeviceAudit(TorchFunctionMode):
    """Records every tensor factory call made from fedsim's own code that leaves the device to torch's
    default (the CPU): on an accelerator each of them would make a tensor on the wrong device.  Random
    draws from a generator are exempt (streams are CPU generators on purpose), as is ``as_tensor`` of a
    tensor (it keeps that tensor's device), and so is a factory that torch's optimisers call for their own
    state (some PyTorch releases keep Adam's step counter on the CPU by design, whatever the parameters'
    device)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: set[str] = set()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs and "generator" not in kwargs and not (
                func is torch.as_tensor and args and isinstance(args[0], torch.Tensor)):
            frame = sys._getframe(1)
            if frame.f_code.co_filename.startswith(OPTIM):
                return func(*args, **kwargs)
            while frame is not None and frame.f_code.co_filename.startswith(TORCH):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(OURS):
                self.sites.add(f"{Path(frame.f_code.co_filename).relative_to(ROOT)}:{frame.f_lineno} {func.__name__}")
        if func in FACTORIES:
            self.calls += 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("case", ["fedavg", "batched", "static-bn-submodels", "fjord", "split", "async-split",
                                  "gas", "semisfl", "fedmatch", "cos2p", "probes"])
def test_training_path_names_the_device_of_every_tensor_it_creates(tmp_path, monkeypatch, case):
    from fedsim.versions import VersionKeeper

    raw = {"seed": 4, "data": {"name": "digits", "num_clients": 4, "partition": {"method": "iid"}},
           "model": {"name": "cnn"}, "train": {"local_steps": 2, "batch_size": 8, "device": "cpu", "clip_norm": 1.0},
           "algorithm": {"name": "fedavg", "clients_per_round": 3}, "stop": {"max_versions": 2},
           "eval": {"every_versions": 1, "max_samples": 64}, "output": {"figures": False, "checkpoints": 1}}
    if case == "batched":
        raw["train"].update(batched=True, momentum=0.9)
    elif case == "static-bn-submodels":
        raw["model"] = {"name": "resnet20", "depth": 8, "width": 0.25}
        raw["algorithm"] = {"name": "heterofl", "clients_per_round": 3}
        raw["eval"].update(bn_stats="train", bn_samples=32, per_client=True)
    elif case == "fjord":
        raw["algorithm"] = {"name": "fjord", "clients_per_round": 3}
    elif case == "split":
        raw["algorithm"] = {"name": "minibatch-sfl", "cut": 1, "clients_per_round": 3}
    elif case == "gas":  # label-conditional Gaussians, generated activations, the measured gradient gap
        raw["algorithm"] = {"name": "gas", "cut": 1, "concurrency": 3, "measure_every": 2}
        raw["stop"] = {"max_versions": 4}
    elif case in ("semisfl", "fedmatch"):  # augmentation views, feature queue, pseudo-labels
        raw["channel"] = {"preset": "semisfl-edge"}
        raw["algorithm"] = {"name": case, "clients_per_round": 3, "labeled": 50, "k_s": 2, "tau": 0.1,
                            "weak": "crop", "strong": "randaugment",
                            **({"cut": 2, "queue_size": 32, "adapt": "none"} if case == "semisfl" else {})}
    elif case == "probes":
        raw["eval"]["probe_every"] = 1
    elif case == "async-split":
        raw["algorithm"] = {"name": "async-sfl", "cut": 1, "logit_adjust": True}
    scenario = fedsim.load_scenario(raw)
    if case == "cos2p":  # width masks, early exits, segment-wise aggregation
        scenario = fedsim.load_scenario("cos2p", ["stop.max_versions=2", "stop.max_time_s=null", "output.figures=false",
                                                  "train.device=cpu"])
    audit = _DeviceAudit()
    start = VersionKeeper.evaluate

    def audited_evaluate(self, **kw):  # from the first evaluation (after set-up) to the end of the run
        if not audit.calls:
            audit.__enter__()
            audit.calls = 1
        return start(self, **kw)

    monkeypatch.setattr(VersionKeeper, "evaluate", audited_evaluate)
    try:
        summaries = run_scenario(scenario, tmp_path, progress=False)
    finally:
        if audit.calls:
            audit.__exit__(None, None, None)
    assert all(s["status"] == "ok" and s["device"] == "cpu" for s in summaries)
    assert audit.calls > 1
    assert not audit.sites, sorted(audit.sites)
