"""The SemiSFL figure recipe's cost model against the spec's table (sizes derived from the authors' code)."""
from __future__ import annotations

import pytest

from figures.semisfl import model_sizes, round_traffic


def test_code_model_sizes_match_the_spec_table():
    """Spec §3: bottom / top parameters and d_feat of the code's CNN, AlexNet and VGG13-BN at their split."""
    s = model_sizes().set_index("model")
    assert s.loc["CNN (SVHN)"].tolist() == [53_696, 824_842, 1_600]
    assert s.loc["AlexNet (CIFAR-10)"].tolist() == [2_251_584, 33_603_594, 4_096]
    assert s.loc["VGG13-BN (STL-10)"].tolist() == [9_410_880, 35_700_746, 4_608]


def test_crossover_by_hand():
    # CNN, K_u = 50, B = 64, one client: SFL = 3·4·53,696 + 50·3·64·1,600·4; FL = 2·4·(53,696 + 824,842)
    sfl, fl = round_traffic(53_696, 824_842, 1_600, 50, 64, 1)
    assert sfl == 3 * 4 * 53_696 + 50 * 3 * 64 * 1_600 * 4 == 62_084_352
    assert fl == 2 * 4 * (53_696 + 824_842) == 7_028_304
    assert sfl / fl == pytest.approx(8.83, abs=0.01)  # tiny CNN: feature traffic dwarfs the model
    sfl, fl = round_traffic(2_251_584, 33_603_594, 4_096, 1, 64, 1)
    assert sfl < fl  # AlexNet with one split iteration: SFL sends less than the 137 MB model twice
