"""The GAS figure recipe: a tiny Figure 2 run writes the CSV it plots and the PNG; the CLI parses its options."""
from __future__ import annotations

import pandas as pd
import pytest

from figures import gas


def test_figure2_recipe_writes_csv_and_png(tmp_path):
    jobs = gas.figure2_jobs([0], versions=3)
    assert [j.key for j in jobs] == [("fig2", "gas", 0), ("fig2", "async-sfl", 0)]
    results = gas.run_jobs(jobs, tmp_path, label="GAS", progress=False)
    table = gas.figure2(results, [0], tmp_path)
    on_disk = pd.read_csv(tmp_path / "fig2_dissimilarity_accuracy.csv")
    assert (tmp_path / "fig2_dissimilarity_accuracy.png").stat().st_size > 0
    assert list(on_disk.columns) == ["method", "seed", "global_iteration", "dissimilarity", "accuracy"]
    assert set(on_disk["method"]) == {"GAS", "w/o generative activations"}
    assert len(on_disk) == len(table) and on_disk["global_iteration"].max() == 3
    # the accuracy column is the run's own evaluation at each version
    m = results["fig2", "gas", 0]["metrics"].set_index("version")["accuracy"]
    got = on_disk[on_disk["method"] == "GAS"].set_index("global_iteration")["accuracy"]
    assert got.loc[3] == pytest.approx(m.loc[3])


def test_cli_requires_out(capsys):
    with pytest.raises(SystemExit):
        gas.main([])
    assert "--out" in capsys.readouterr().err
