"""Co-S²P bad input through the CLI: one line naming the field, the value and what is allowed; exit 2."""
from __future__ import annotations

import pytest

from fedsim.cli import main


@pytest.mark.parametrize(
    "override, field, allowed",
    [
        ("algorithm.mu=0", "algorithm.mu", "(0, 1]"),
        ("algorithm.mu=1.5", "algorithm.mu", "(0, 1]"),
        ("algorithm.t_clk=-1", "algorithm.t_clk", ">= 0"),
        ("algorithm.lambda1=-0.5", "algorithm.lambda1", ">= 0"),
        ("algorithm.lambda2=1.2", "algorithm.lambda2", "[0, 1]"),
        ("algorithm.width_depth_ratio=0", "algorithm.width_depth_ratio", "> 0"),
        # R = 0.01 -> depth rate 0.1 on 8 blocks: floor(0.8) = 0 trainable blocks
        ("algorithm.rates.jetson-xavier-nx-8gb=0.01", "algorithm.rates.jetson-xavier-nx-8gb", "trainable blocks"),
        ("algorithm.rates.jetson-agx-orin-32gb=0", "algorithm.rates.jetson-agx-orin-32gb", "(0, 1]"),
        ("algorithm.kl_direction=sideways", "algorithm.kl_direction", "allowed"),
        ("algorithm.rates.jetson-xavier-nx=0.5", "algorithm.rates.jetson-xavier-nx", "allowed"),
        ("devices.mix=[{profile: jetson-nano, count: 3}]", "devices.mix", "sum to"),
        ("algorithm.rate_rule=fastest", "algorithm.rate_rule", "allowed"),
        ("algorithm.rate_max=0", "algorithm.rate_max", "(0, 1]"),
    ],
)
def test_bad_cos2p_settings_give_one_line(capsys, tmp_path, override, field, allowed):
    # the rates table is read under rate_rule: table7 (the default, balanced, derives R_n instead)
    code = main(["run", "cos2p", "algorithm.rate_rule=table7", override, "stop.max_versions=1", "output.figures=false", "--out", str(tmp_path),
                 "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and allowed in lines[0], lines[0]
    assert "Traceback" not in err
