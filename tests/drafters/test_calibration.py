"""`Calibration`: a draft model's probabilities become observed rates of acceptance."""

from __future__ import annotations

from specdecode.drafters.calibration import Calibration


def test_an_unjudged_probability_is_its_own_rate_to_the_bin():
    rate = Calibration().rate
    assert abs(rate(0.42) - 0.45) < 1e-9 and abs(rate(1.0) - 0.95) < 1e-9


def test_judged_nodes_move_their_bins_rate_toward_what_was_observed():
    calibration = Calibration()
    # a tree: root's children 7 (p 0.5) and 8 (p 0.2); under 7, 9 (p 0.5)
    tokens, parents, probs = [7, 8, 9], [-1, -1, 0], [0.5, 0.2, 0.5]
    for _ in range(50):
        calibration.judge(tokens, parents, probs, [7, 9, 3])
    assert calibration.rate(0.55) > 0.95  # 7 and 9 were always the target's
    assert calibration.rate(0.25) < 0.05  # 8 never was


def test_only_nodes_under_the_path_the_context_took_are_judged():
    calibration = Calibration()
    # 9 sits under 8, which the context did not take: 9 is not judged
    calibration.judge([7, 8, 9], [-1, -1, 1], [0.5, 0.2, 0.9], [7, 1])
    assert calibration.reached[9] == 0 and calibration.reached[2] == 1
    assert calibration.reached[5] == 1 and calibration.accepted[5] == 1
