"""figures.embracingfl: every recipe scenario is valid, the table helpers count what they say, and the
shortened recipe writes claims.md and RESULTS.md from its own numbers."""
from __future__ import annotations

import pandas as pd
import pytest

import figures.embracingfl as fe
from fedsim import scenario_from_mapping


def test_every_recipe_scenario_validates(tmp_path):
    jobs = (fe.table2_jobs([0], 12, (0, 4, 12), tmp_path) + fe.table34_jobs([0], 12, (1, 2, 5, 7))
            + fe.table6_jobs([0], 12, (1, 5, 7)) + fe.floor_jobs([0], 12, (2, 16))
            + fe.table2_resplit_jobs([0], 12, (0, 4, 12)) + fe.table6_split_jobs([0], 12, (1, 5, 7)))
    assert len({j.key for j in jobs}) == len(jobs)          # one run directory per job
    for j in jobs:
        sc = scenario_from_mapping(j.mapping)
        assert sc.stop.max_versions == 12
    t2 = {j.key: j.mapping for j in fe.table2_jobs([0], 12, (12,), tmp_path)}
    assert t2[("t2", "heterofl", 12, 0)]["algorithm"]["widths"] == {fe.STRONG_DEV: 1.0, fe.WEAK_DEV: 0.2}
    assert t2[("t2", "embracingfl", 12, 0)]["algorithm"]["types"] == {fe.STRONG_DEV: "strong", fe.WEAK_DEV: "weak"}


def test_table2_keeps_the_strong_set_and_its_data_fixed_as_weak_clients_are_added(tmp_path):
    """The paper fixes 16 strong clients and adds weak ones with their own data: here every weak count runs the
    same world (same partition, same devices) and only the first w weak clients are online."""
    import numpy as np

    from fedsim.build import prepare_data

    jobs = [j for j in fe.table2_jobs([0], 2, (0, 4, 12), tmp_path) if j.key[1] == "embracingfl"]
    parts, online = {}, {}
    for j in jobs:
        w = j.key[2]
        parts[w] = prepare_data(scenario_from_mapping(j.mapping)).parts
        csv = pd.read_csv(j.mapping["availability"]["path"])
        online[w] = sorted(csv["client"])
        assert j.mapping["devices"]["mix"] == [{"profile": fe.STRONG_DEV, "count": fe.T2_STRONG},
                                               {"profile": fe.WEAK_DEV, "count": fe.T2_WEAK}]
        assert j.mapping["algorithm"]["clients_per_round"] == fe.T2_STRONG + w
    for w in (4, 12):
        assert all(np.array_equal(a, b) for a, b in zip(parts[0], parts[w]))    # the same data, client by client
        assert online[w] == list(range(fe.T2_STRONG + w))                    # strong set plus w weak, each its own
    assert online[0] == list(range(fe.T2_STRONG))


def test_rounds_to_target_is_the_first_evaluated_version_at_or_above_it():
    m = pd.DataFrame({"version": [0, 2, 4, 6], "accuracy": [0.1, 0.5, 0.49, 0.7]})
    assert fe._rounds_to(m, 50.0) == 2.0
    assert fe._rounds_to(m, 69.0) == 6.0
    assert pd.isna(fe._rounds_to(m, 80.0))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """The quick recipe shortened to 2 rounds (and 2 SVCCA iterations)."""
    out = tmp_path_factory.mktemp("embracingfl-figures")
    return out, fe.make_all(out, quick=True, seeds=[0], progress=False, rounds=2)


def test_claims_table_is_generated_from_the_recipe_numbers(recipe):
    """claims.md is the rendering of ``claims()`` on the run's own tables with commit, seeds, the rules and
    the choices table; RESULTS.md carries it and the tables; moving an input number moves the cell and the
    verdict."""
    import copy

    from figures.claims import RULES, commit_hash, render_claims

    out, tables = recipe
    text = (out / "claims.md").read_text(encoding="utf-8")
    rows = fe.claims(tables, [0])
    assert text == render_claims(rows, command="python -m figures.embracingfl --quick --seeds 0", seeds=[0],
                                 commit=commit_hash(), choices=fe.choices(tables, [0], rows))
    assert f"commit `{commit_hash()}`" in text and "seeds 0;" in text and RULES in text
    # the choices are computed from their own runs: Table 2's world and Table 6's model split
    assert "*data re-split over strong + w*" in text and "*FEMNIST split (2 / 3 frozen blocks)*" in text
    assert "Stability: not measured" in text
    results = (out / "RESULTS.md").read_text(encoding="utf-8")
    assert text in results and (out / "table6.md").read_text(encoding="utf-8") in results
    t6 = tables["table6"].set_index("case")
    assert fe.seed_values(t6.loc[7, "embracingfl_seeds"]) == pytest.approx([t6.loc[7, "embracingfl"]], abs=1e-4)

    def row(t: dict, start: str) -> "fe.Claim":
        return next(c for c in fe.claims(t, [0, 1, 2]) if c.claim.startswith(start))

    three = copy.deepcopy(tables)
    raw = three["svcca_raw"]
    three["svcca_raw"] = pd.concat([raw.assign(seed=s) for s in (0, 1, 2)], ignore_index=True)
    fl = three["bias_floor_seeds"]
    three["bias_floor_seeds"] = pd.concat([fl.assign(seed=s) for s in (0, 1, 2)], ignore_index=True)
    three["fig1_spearman"] = pd.DataFrame({"seed": [0, 1, 2], "spearman_depth_svcca": [-0.5] * 3})
    # Table 6, case 7, paper +22.5 points: ahead on every seed by half of it / under half (above the 25% floor) /
    # one seed carries it / both methods near chance (n/a)
    for efl, wr, expected in (([62.0, 62.0, 62.0], 50, "yes"), ([58.0, 60.0, 59.0], 50, "partly"),
                              ([90.0, 45.0, 45.0], 50, "no"), ([20.0, 21.0, 20.0], 15, "n/a")):
        moved = copy.deepcopy(three)
        t = moved["table6"]
        i = t.index[t["case"] == 7][0]
        t.loc[i, ["embracingfl_seeds", "width_reduction_seeds"]] = [" ".join(map(str, efl)), f"{wr} {wr} {wr}"]
        t.loc[t["case"] == 1, "embracingfl_seeds"] = "60 60 60"
        r = row(moved, "Table 6, case 7: EmbracingFL above")
        assert r.verdict == expected and "per seed " + " / ".join(f"{x - wr:.1f}" for x in efl) in r.fedsim
        assert expected != "n/a" or "near chance" in r.fedsim
    # one seed is never a verdict: the recipe's own one-seed table has no yes / partly / no on a seeded row
    one = fe.claims(tables, [0])
    assert all(c.verdict == "n/a" for c in one if c.fedsim.startswith("per seed"))
    # Table 7: a case never reached by either counts as not measured; by EmbracingFL alone, as late
    moved = copy.deepcopy(three)
    t7 = moved["table7"]
    t7.loc[t7["case"] == 7, ["rounds_embracingfl_seeds", "rounds_width_reduction_seeds"]] = ["nan nan nan", "nan nan nan"]
    assert row(moved, "Table 7, case 7").verdict == "n/a"
    t7.loc[t7["case"] == 7, ["rounds_embracingfl_seeds", "rounds_width_reduction_seeds"]] = ["nan nan nan", "1 1 1"]
    r = row(moved, "Table 7, case 7")
    assert r.verdict == "n/a" and "3 censored seed(s)" in r.fedsim   # censored against the claim: never a value
    t7.loc[t7["case"] == 7, ["rounds_embracingfl_seeds", "rounds_width_reduction_seeds"]] = ["4 6 4", "nan 20 20"]
    moved["rounds"] = 30
    r = row(moved, "Table 7, case 7")        # width reduction never reached it on seed 0: a bound in the claim's favour
    assert r.verdict == "yes" and ">26" in r.fedsim and "mean 15" in r.fedsim