"""No silent no-ops in the extension contract: every documented hook is called on every shape or refused when
the class is loaded, and every decision a user's method returns is checked before a shape acts on it.

Each test fails on the code before the fix: ``setup()`` was never called on the update-exchanging shapes (a
later AttributeError), a hook of another shape was silently ignored, and ``select()`` returning ``[0, 0, 1]``
dispatched client 0 twice and applied its update twice.
"""
from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

import fedsim
from fedsim.algorithms import FedAsync, FedAvg, MiniBatchSFL, SemiAsyncConfig, SemiAsyncRounds, SyncRounds
from fedsim.algorithms import resolve
from fedsim.algorithms.decisions import (check_assignment, check_batch_sizes, check_clients, check_clock,
                                         check_quorum, check_rule, check_staleness_limit)
from fedsim.algorithms.fedavg import fedavg_rule
from fedsim.errors import ConfigError, UserDecisionError
from fedsim.runner import run_scenario

ROOT = Path(__file__).resolve().parents[1]


def _tiny(algorithm: dict, versions: int = 2, **over) -> dict:
    base = {"data": {"name": "digits", "num_clients": 4}, "model": {"name": "mlp", "hidden": 8},
            "train": {"lr": 0.05, "batch_size": 8, "local_steps": 1}, "algorithm": algorithm,
            "stop": {"max_versions": versions}, "eval": {"every_versions": versions}, "output": {"figures": False}}
    base.update(over)
    return base


def _run(mapping: dict, out: Path) -> dict:
    summary = run_scenario(fedsim.scenario_from_mapping(mapping), out, progress=False)
    return summary[0] if isinstance(summary, list) else summary


# ------------------------------------------------------------------------------ setup() on every shape

class _SetupOnce:
    """Mixin: ``setup`` counts its calls on this object; every decision below asserts it ran exactly once."""

    def setup(self) -> None:
        super().setup()
        self.setup_calls = getattr(self, "setup_calls", 0) + 1

    def ready(self) -> None:
        assert self.setup_calls == 1, self.setup_calls  # AttributeError if setup() was never called


class SetupFedAvg(_SetupOnce, FedAvg):
    name = "setup-fedavg"

    def server_rule(self, updates, base):
        self.ready()
        return fedavg_rule(updates, base)


class SetupFedAsync(_SetupOnce, FedAsync):
    name = "setup-fedasync"

    def server_rule(self, batch, base, bases):
        self.ready()
        return super().server_rule(batch, base, bases)


class SetupSemi(_SetupOnce, SemiAsyncRounds):
    name = "setup-semi"

    def quorum(self) -> int:
        self.ready()
        return 2

    def server_rule(self, updates, base, bases):
        return fedavg_rule(updates, base)


class SetupSFL(_SetupOnce, MiniBatchSFL):
    name = "setup-sfl"
    family = "minibatch-sfl"

    def begin(self) -> None:
        self.ready()
        super().begin()


@pytest.mark.parametrize("cls, extra", [(SetupFedAvg, {"clients_per_round": 2}),
                                        (SetupFedAsync, {"concurrency": 2}),
                                        (SetupSemi, {}),
                                        (SetupSFL, {"clients_per_round": 2, "local_iterations": 1})])
def test_setup_is_called_once_on_every_shape(tmp_path, cls, extra):
    summary = _run(_tiny({"name": cls, **extra}), tmp_path)
    assert summary["status"] == "ok", summary.get("message")
    assert summary["versions"] == 2


class Refusing(FedAvg):
    name = "refusing"

    def setup(self) -> None:
        raise ConfigError("algorithm.name", "refusing on purpose")


def test_a_config_error_in_setup_on_sync_rounds_is_reported_before_the_run(tmp_path):
    with pytest.raises(ConfigError, match="refusing on purpose"):
        _run(_tiny({"name": Refusing}), tmp_path)
    assert not (tmp_path / "trace.jsonl").exists()  # the pre-flight refused it: no run started


# ------------------------------------------------------------------------------ hooks the shape never calls

def test_a_hook_of_another_shape_is_refused_naming_the_shapes_that_call_it():
    class QuorumOnRounds(FedAvg):
        name = "quorum-on-rounds"

        def quorum(self) -> int:
            return 3

    with pytest.raises(ConfigError) as err:
        resolve(QuorumOnRounds)
    line = str(err.value)
    assert "\n" not in line and "quorum()" in line and "only SemiAsyncRounds call" in line
    assert "runs on SyncRounds" in line

    class EligibleOnSemi(SemiAsyncRounds):  # every client is in flight: nothing ever asks eligible()
        name = "eligible-on-semi"

        def eligible(self, client: int) -> bool:
            return client > 0

    with pytest.raises(ConfigError, match=r"eligible\(\), which only SyncRounds, AsyncSlots, SplitRounds, "
                                          r"SplitSlots call.*runs on SemiAsyncRounds"):
        resolve(EligibleOnSemi)

    class ForwardOnSlots(FedAsync):
        name = "forward-on-slots"

        def client_forward(self, s, e):
            return 0, 0

    with pytest.raises(ConfigError, match=r"client_forward\(\), which only SplitRounds, SplitSlots call"):
        resolve(ForwardOnSlots)

    class AssignOnSplit(MiniBatchSFL):  # the split shapes run sessions, never an Assignment
        name = "assign-on-split"

        def assign(self, client, round_=None):
            raise AssertionError

    with pytest.raises(ConfigError, match=r"assign\(\).*runs on SplitRounds"):
        resolve(AssignOnSplit)


def test_hooks_the_shape_calls_helpers_and_own_loops_are_accepted():
    class Fine(FedAvg):
        name = "fine"

        def select(self, k, round_):  # SyncRounds calls it
            return [0]

        def helper(self) -> int:  # not a hook of any shape: the user's own
            return 1

    assert resolve(Fine) is Fine

    class OwnLoop(SyncRounds):  # writes its own run(): it calls what it likes
        name = "own-loop"

        def quorum(self) -> int:
            return 1

        def run(self):
            yield self.ctx.env.timeout(1)

    assert resolve(OwnLoop) is OwnLoop


# ------------------------------------------------------------------------------ decisions are checked

class _Sub(FedAvg):
    name = "checked"

    def select(self, k, round_):
        return []

    def server_rule(self, updates, base):
        return fedavg_rule(updates, base)

    def assign(self, client, round_=None):
        return None

    def quorum(self):  # only for the check's owner lookup; never resolved
        return 0


def _algo(cls: type = _Sub, n: int = 4, state=None) -> object:
    algo = object.__new__(cls)
    algo.ctx = SimpleNamespace(num_clients=n, global_state=state if state is not None else {"w": 0, "b": 0})
    return algo


@pytest.mark.parametrize("value, why", [
    ([0, 0, 1], "client 0 appears more than once"),
    ([0, 4], "client 4 is out of range (the run has 4 clients: 0..3)"),
    ([-1], "client -1 is out of range"),
    (["a"], "'a' is str, not a client id"),
    ([1.0], "1.0 is float, not a client id"),
    ([True], "True is bool, not a client id"),
    (3, "expected a list of client ids in 0..3"),
    ([0, 1, 2], "3 clients, more than the 2 a round takes"),
])
def test_a_bad_selection_is_one_line_naming_the_method_and_value(value, why):
    with pytest.raises(UserDecisionError) as err:
        check_clients(_algo(), "select", value, 2)
    line = str(err.value)
    assert line.startswith(f"{__name__}:_Sub.select returned {value!r}: ") and why in line and "\n" not in line


def test_good_decisions_pass_unchanged():
    import numpy as np

    assert check_clients(_algo(), "select", np.array([3, 0]), 2) == [3, 0]  # numpy ints, order kept
    state, w = check_rule(_algo(), "server_rule", ({"w": 1, "b": 2}, [0.5, 0]), 2)
    assert w == [0.5, 0.0]
    assert check_quorum(_algo(), "quorum", 4) == 4 and check_clock(_algo(), "clock", None) is None
    assert check_staleness_limit(_algo(), "max_staleness", 0) == 0
    assert check_batch_sizes(_algo(), "batch_sizes", [8, 1], 2) == [8, 1]


@pytest.mark.parametrize("value, why", [
    (({"w": 1, "b": 2}, [1.0, -0.5]), "weight -0.5 is not a finite number >= 0"),
    (({"w": 1, "b": 2}, [1.0, math.nan]), "weight nan is not a finite number >= 0"),
    (({"w": 1, "b": 2}, [1.0, math.inf]), "weight inf is not a finite number >= 0"),
    (({"w": 1, "b": 2}, [1.0]), "1 weights for 2 updates"),
    (({"w": 1, "b": 2}, [1.0, "x"]), "weight 'x' is not a number"),
    (({"w": 1}, [1.0, 1.0]), "missing ['b']"),
    (([1, 2], [1.0, 1.0]), "not a mapping of tensors"),
    ({"w": 1, "b": 2}, "expected a pair (new_state, weights)"),
])
def test_a_bad_rule_result_is_refused(value, why):
    with pytest.raises(UserDecisionError, match=r"_Sub\.server_rule returned") as err:
        check_rule(_algo(), "server_rule", value, 2)
    assert why in str(err.value)


def test_bad_assignment_quorum_clock_and_limits_are_refused():
    with pytest.raises(UserDecisionError, match=r"_Sub\.assign returned None: NoneType, not a fedsim"):
        check_assignment(_algo(), "assign", None)
    for q in (0, 5, 2.0, None):
        with pytest.raises(UserDecisionError, match=r"_Sub\.quorum returned .*expected an int in 1\.\.4"):
            check_quorum(_algo(), "quorum", q)
    for c in (-1.0, math.nan, math.inf, "1"):
        with pytest.raises(UserDecisionError, match=r"expected None or finite seconds >= 0"):
            check_clock(_algo(), "clock", c)
    for s in (-1, 1.5):
        with pytest.raises(UserDecisionError, match=r"expected None or an int >= 0"):
            check_staleness_limit(_algo(), "max_staleness", s)
    for b in ([8], [8, 0], [8, 2.5]):
        with pytest.raises(UserDecisionError, match=r"expected 2 batch sizes"):
            check_batch_sizes(_algo(), "batch_sizes", b, 2)


def test_a_bad_value_from_a_builtin_method_is_an_internal_error_not_the_users():
    class Plain(FedAvg):  # select is fedsim's own here
        name = "plain"

    with pytest.raises(RuntimeError, match=r"fedsim\.algorithms\.loops\.sync_rounds:SyncRounds\.select returned") as err:
        check_clients(_algo(Plain), "select", [1, 1], 2)
    assert not isinstance(err.value, UserDecisionError)


class Duplicates(FedAvg):
    name = "duplicates"

    def select(self, k, round_):
        return [0, 0, 1]


class Lopsided(FedAvg):
    name = "lopsided"

    def server_rule(self, updates, base):
        new, weights = fedavg_rule(updates, base)
        return new, weights[:-1]


@dataclass
class _SemiCfg(SemiAsyncConfig):
    q: int = 9


class BigQuorum(SemiAsyncRounds):
    name = "big-quorum"
    Config = _SemiCfg

    def quorum(self) -> int:
        return self.cfg.q

    def server_rule(self, updates, base, bases):
        return fedavg_rule(updates, base)


@pytest.mark.parametrize("alg, match", [
    ({"name": Duplicates, "clients_per_round": 3}, r"Duplicates\.select returned \[0, 0, 1\]: client 0 appears"),
    ({"name": Lopsided, "clients_per_round": 2}, r"Lopsided\.server_rule returned \[.*\]: 1 weights for 2 updates"),
    ({"name": BigQuorum}, r"BigQuorum\.quorum returned 9: expected an int in 1\.\.4"),
])
def test_a_run_stops_at_the_first_bad_decision(tmp_path, alg, match):
    with pytest.raises(UserDecisionError, match=match):
        _run(_tiny(alg), tmp_path)


SELECTS = '''
from fedsim.algorithms import FedAvg

class Twice(FedAvg):
    name = "twice"

    def select(self, k, round_):
        return [0, 0, 1]

class Outside(FedAvg):
    name = "outside"

    def select(self, k, round_):
        return [0, 99]
'''


@pytest.mark.parametrize("cls, tail", [("Twice", "returned [0, 0, 1]: client 0 appears more than once"),
                                       ("Outside", "returned [0, 99]: client 99 is out of range")])
def test_the_cli_reports_a_bad_selection_in_one_line_with_exit_4(tmp_path, cls, tail):
    (tmp_path / "my_algos.py").write_text(SELECTS)
    (tmp_path / "s.yaml").write_text(textwrap.dedent(f'''
        data: {{name: digits, num_clients: 4}}
        model: {{name: mlp, hidden: 8}}
        train: {{local_steps: 1}}
        algorithm: {{name: "my_algos:{cls}", clients_per_round: 3}}
        stop: {{max_versions: 2}}
        output: {{figures: false}}
    '''))
    out = subprocess.run([sys.executable, "-m", "fedsim", "run", "s.yaml", "--out", "o", "--quiet"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = [x for x in out.stderr.strip().splitlines() if x.startswith("fedsim:")]
    assert out.returncode == 4, out.stderr
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0] == f"fedsim: error in your code: my_algos:{cls}.select {tail} (a selection names distinct " \
                       "clients)" or lines[0].startswith(f"fedsim: error in your code: my_algos:{cls}.select {tail}")


# ------------------------------------------------------------------------------ a run folder repeats from anywhere

MINE = '''
from fedsim.algorithms import FedAvg

class Mine(FedAvg):
    name = "mine"
'''


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedsim", *args, "--quiet"], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_a_run_folder_with_a_user_module_reruns_from_another_folder_and_says_when_it_changed(tmp_path):
    import hashlib

    import yaml

    study, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    study.mkdir()
    elsewhere.mkdir()
    module = study / "my_algos.py"
    module.write_text(MINE)
    (study / "s.yaml").write_text(textwrap.dedent('''
        data: {name: digits, num_clients: 4}
        model: {name: mlp, hidden: 8}
        train: {local_steps: 1}
        algorithm: {name: "my_algos:Mine", clients_per_round: 2}
        stop: {max_versions: 2}
        output: {figures: false}
    '''))
    first = _cli("run", "s.yaml", "--out", "runs/x", cwd=study)
    assert first.returncode == 0, first.stderr
    saved = study / "runs" / "x" / "scenario.yaml"
    recorded = yaml.safe_load(saved.read_text())["modules"]
    assert recorded == {"my_algos": {"path": str(module.resolve()),
                                     "sha256": hashlib.sha256(MINE.encode()).hexdigest()}}

    again = _cli("run", str(saved), "--out", "again", cwd=elsewhere)  # another working directory
    assert again.returncode == 0, again.stderr
    assert "warning" not in again.stderr
    assert (elsewhere / "again" / "final_model.pt").read_bytes() == (study / "runs" / "x" / "final_model.pt").read_bytes()

    # the broken case: without the record, the saved scenario names the module relatively and is not found
    bare = yaml.safe_load(saved.read_text())
    del bare["modules"]
    (elsewhere / "bare.yaml").write_text(yaml.safe_dump(bare))
    lost = _cli("run", "bare.yaml", "--out", "lost", cwd=elsewhere)
    assert lost.returncode == 2 and "module 'my_algos' of 'my_algos:Mine' not found" in lost.stderr, lost.stderr

    module.write_text(MINE + "\n# edited since\n")
    changed = _cli("run", str(saved), "--out", "changed", cwd=elsewhere)
    assert changed.returncode == 0, changed.stderr
    warnings = [x for x in changed.stderr.splitlines() if x.startswith("fedsim: warning: modules.my_algos")]
    assert len(warnings) == 1 and "has changed since this run was saved" in warnings[0], changed.stderr
    assert hashlib.sha256(module.read_bytes()).hexdigest()[:12] in warnings[0]


# ------------------------------------------------------------------------------ a Config of one's own

def test_the_docs_hinge_fedasync_lists_only_its_own_settings(tmp_path):
    """`fedsim show` of the docs' hinge variant lists its own fields and none of FedAsync's staleness*."""
    import yaml

    (tmp_path / "h.yaml").write_text(textwrap.dedent(f'''
        data: {{name: digits, num_clients: 4}}
        model: {{name: mlp, hidden: 8}}
        algorithm: {{name: "fedasync_hinge:HingeFedAsync", concurrency: 2}}
        stop: {{max_versions: 2}}
    '''))
    out = subprocess.run([sys.executable, "-m", "fedsim", "show", "h.yaml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**__import__("os").environ,
                                                      "PYTHONPATH": str(ROOT / "docs" / "extending")})
    assert out.returncode == 0, out.stderr
    shown = yaml.safe_load(out.stdout[out.stdout.index("algorithm:"):].split("\ndata:")[0])["algorithm"]
    assert list(shown) == ["name", "label", "retry_s", "concurrency", "alpha", "max_staleness", "hinge_a", "hinge_b"]
    assert not any(k.startswith("staleness") for k in shown)
    # the built-in it extends does list them: the difference is the subclass's own Config
    from fedsim.algorithms import FedAsync
    assert {"staleness", "staleness_a", "staleness_b"} <= set(FedAsync.Config.__dataclass_fields__)


def test_a_config_that_leaves_out_a_field_an_inherited_method_reads_is_refused_at_load():
    from fedsim.algorithms import SlotsConfig
    from fedsim.config import num

    class NoLimit(FedAsync):  # keeps FedAsync.max_staleness and FedAsync.server_rule, which read these fields
        name = "no-limit"

        @dataclass
        class Config(SlotsConfig):
            alpha: float = num(0.6, gt=0, le=1)

    with pytest.raises(ConfigError) as err:
        resolve(NoLimit)
    assert "NoLimit.Config has no field 'max_staleness', which FedAsync.max_staleness reads" in str(err.value)

    class Limited(NoLimit):
        name = "limited"

        @dataclass
        class Config(SlotsConfig):
            alpha: float = num(0.6, gt=0, le=1)
            max_staleness: int | None = None

    with pytest.raises(ConfigError, match=r"has no field 'staleness', which FedAsync.server_rule reads"):
        resolve(Limited)

    class OwnRule(Limited):  # overriding the rule that read them: accepted
        name = "own-rule"

        def server_rule(self, batch, base, bases):
            return base, [self.cfg.alpha]

    assert resolve(OwnRule) is OwnRule


# ------------------------------------------------------------------------------ a channel model of one's own

def test_a_user_path_loss_model_gives_the_hand_computed_loss_snr_and_rate():
    import importlib

    sys.path.insert(0, str(ROOT / "docs" / "extending"))
    try:
        two_slope = importlib.import_module("two_slope")
    finally:
        sys.path.remove(str(ROOT / "docs" / "extending"))
    from fedsim.system.channel import CHANNEL_MODELS, ChannelConfig, channel_model, shannon_rate

    cfg = ChannelConfig(model="two_slope:two_slope", frequency_hz=2e9, bandwidth_hz=1e6, tx_power_w=0.1)
    assert channel_model("two_slope:two_slope") is two_slope.two_slope and "free_space" in CHANNEL_MODELS
    fs100 = 20 * math.log10(100) + 20 * math.log10(2e9) + 20 * math.log10(4 * math.pi / 299_792_458)
    assert cfg.path_loss_db(100.0) == pytest.approx(fs100, abs=1e-9)  # 78.47 dB: free space up to the breakpoint
    assert cfg.path_loss_db(200.0) == pytest.approx(fs100 + 40 * math.log10(2), abs=1e-9)  # + 12.04 dB beyond
    snr = 0.1 * 10 ** (-(fs100 + 40 * math.log10(2)) / 10) / (3.981e-21 * 1e6)
    assert cfg.mean_snr(200.0) == pytest.approx(snr, rel=1e-12)
    assert shannon_rate(1e6, cfg.mean_snr(200.0)) == pytest.approx(1e6 * math.log2(1 + snr), rel=1e-12)


def _channel_run(tmp_path: Path, uplink: str, r_max: float) -> list[tuple]:
    import json

    mapping = _tiny({"name": "fedavg", "clients_per_round": 2}, channel={
        "uplink": {"model": uplink, "bandwidth_hz": 1.0e6, "tx_power_w": 0.1}, "downlink": {"model": "free_space"},
        "positions": {"kind": "auto", "r_min_m": 10.0, "r_max_m": r_max}})
    run_scenario(fedsim.scenario_from_mapping(mapping, source_dir=ROOT / "docs" / "extending"), tmp_path,
                 progress=False)
    trace = [json.loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines()]
    return [(r["t"], r["client"], r["airtime"], r["rate_bps"]) for r in trace if r["kind"] == "upload"]


def test_a_user_channel_model_from_its_own_file_runs_by_module_attribute(tmp_path):
    """Inside the breakpoint the two-slope model is free space: the same uploads to the last bit; with clients
    beyond it (up to 500 m) the steeper slope makes them slower."""
    near_user = _channel_run(tmp_path / "a", "two_slope:two_slope", 90.0)
    near_fs = _channel_run(tmp_path / "b", "free_space", 90.0)
    assert near_user == near_fs and len(near_user) == 4
    far_user = _channel_run(tmp_path / "c", "two_slope:two_slope", 500.0)
    far_fs = _channel_run(tmp_path / "d", "free_space", 500.0)
    assert sum(r[2] for r in far_user) > sum(r[2] for r in far_fs)
    first_user, first_fs = ({r[1]: r[3] for r in reversed(run)} for run in (far_user, far_fs))
    assert all(first_user[c] <= first_fs[c] for c in first_user)  # each client's rate: never faster
    assert any(first_user[c] < first_fs[c] for c in first_user)  # and slower beyond the breakpoint


def test_a_bad_channel_reference_or_value_is_one_line():
    from fedsim.system.channel import ChannelConfig

    with pytest.raises(ConfigError, match=r"channel.uplink.model: module 'no_such_channel' of 'no_such_channel:f' "
                                          r"not found"):
        fedsim.scenario_from_mapping(_tiny({"name": "fedavg"}, channel={"uplink": {"model": "no_such_channel:f"}}))
    with pytest.raises(ConfigError, match=r"channel.uplink.model: got 'nonsense' \(allowed: free_space, log_distance, tr36814, "
                                          r"tr38901_umi, tr38901_uma, fixed, uniform_rate, ideal; or module:attribute"):
        fedsim.scenario_from_mapping(_tiny({"name": "fedavg"}, channel={"uplink": {"model": "nonsense"}}))
    cfg = ChannelConfig(model=f"{__name__}:_nan_loss")
    with pytest.raises(UserDecisionError, match=r"_nan_loss returned nan for distance 50.0: expected a finite"):
        cfg.path_loss_db(50.0)
    with pytest.raises(ConfigError, match=r"channel.uplink.exponent: has no effect under link model"):
        fedsim.scenario_from_mapping(_tiny({"name": "fedavg"}, channel={"uplink": {"model": "two_slope:two_slope",
                                                                                   "exponent": 3.0}}),
                                     source_dir=ROOT / "docs" / "extending")


def _nan_loss(d_m, config, los):
    return float("nan")
