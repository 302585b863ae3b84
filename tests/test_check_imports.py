"""What a fresh ``fedsim check`` process imports (behaviour, not timing): none of torch's compiler stack
(about 2 s), scipy, scikit-learn or pyplot, which its probes, tables and figures do not need."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNWANTED = ("torch._dynamo", "scipy", "sklearn", "matplotlib.pyplot")


def _fresh(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code += f"\nimport sys\nprint(sorted(m for m in {UNWANTED!r} if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list


def test_building_the_cos2p_model_skips_meta_weight_init():
    """The model is first built on the meta device to check its size; initialising meta weights (its ViT's
    ``normal_``) would import torch._dynamo."""
    loaded = _fresh("import fedsim\nfrom fedsim.build import build_global_model, prepare_data\n"
                    "s = fedsim.load_scenario('cos2p')\nbuild_global_model(s, prepare_data(s).data)")
    assert "torch._dynamo" not in loaded, loaded


def test_meta_init_skip_leaves_shapes_real_tensors_and_shape_errors_alone():
    import pytest
    import torch

    from fedsim.build import _SkipMetaInit

    with torch.device("meta"), _SkipMetaInit():
        p = torch.nn.Parameter(torch.empty(3, 4))
        torch.nn.init.normal_(p, std=0.02)
        torch.nn.init.trunc_normal_(p)
        p.data.uniform_()
    assert p.is_meta and p.shape == (3, 4)
    with _SkipMetaInit():  # real tensors are initialised as ever
        q = torch.zeros(3)
        torch.nn.init.ones_(q)
    assert torch.equal(q, torch.ones(3))
    with pytest.raises(RuntimeError):
        with torch.device("meta"), _SkipMetaInit():
            torch.nn.Linear(3, 4)(torch.empty(2, 5))


def test_fedsim_check_of_a_vit_run_with_checkpoints_imports_none_of_them(tiny, tmp_path):
    from fedsim import scenario_from_mapping
    from fedsim.runner import run_scenario

    sc = copy.deepcopy(tiny)
    sc["data"] = {"name": "digits32", "num_clients": 3, "partition": {"method": "iid"}}
    sc["model"] = {"name": "vit", "depth": 1, "options": {"embed_dim": 16, "heads": 2, "patch": 8}}
    sc["stop"] = {"max_versions": 2}
    sc["output"] = {"figures": False, "checkpoints": 1}
    run_scenario(scenario_from_mapping(sc), tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "checkpoints").is_dir()
    loaded = _fresh("from analysis.present import check_folder\n"
                    f"check_folder({str(tmp_path / 'run')!r}, progress=False)")
    assert (tmp_path / "run" / "probes.csv").exists() and (tmp_path / "run" / "check").is_dir()
    assert loaded == [], loaded
