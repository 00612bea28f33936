"""The step-cost curve: linear between measured row counts, longer caches cost more, and noise
never prices a row below zero (its measuring: tests/test_timing.py)."""

import pytest

from specdecode.core.cost import StepCost


def test_steps_between_and_past_measured_row_counts_are_linear():
    cost = StepCost((1, 2, 8), (1.0, 1.2, 2.4))
    assert cost.step(1, 64) == 1.0 and cost.step(8, 8 * 64) == pytest.approx(2.4)
    assert cost.step(5, 5 * 64) == pytest.approx(1.8)
    assert cost.step(14, 14 * 64) == pytest.approx(3.6)  # past the last: the last slope


def test_rows_that_attend_to_longer_caches_cost_more():
    cost = StepCost((1, 2), (1.0, 1.1), context=64, per_cached=0.001)
    assert cost.step(2, 2 * 64) == pytest.approx(1.1)
    assert cost.step(2, 2 * 64 + 100) == pytest.approx(1.2)
    assert cost.step(2, 10) == pytest.approx(1.1)  # shorter caches than measured: never cheaper
    assert StepCost.linear(0.25).row_cost() == pytest.approx(0.25)


def test_a_few_rows_cost_what_was_measured_after_either_context_and_linear_between():
    cost = StepCost((1, 2, 4, 8, 16), (1.0, 1.2, 1.6, 2.4, 4.0), context=64, per_cached=0.001,
                    long_context=1064, long_seconds=(2.0, 2.6, 3.4, 4.8))
    assert cost.step(2, 2 * 1064) == pytest.approx(2.6)
    assert cost.step(2, 2 * 564) == pytest.approx((1.2 + 2.6) / 2)
    assert cost.step(3, 3 * 1064) == pytest.approx(3.0)  # between measured row counts
    assert cost.step(1, 10) == pytest.approx(1.0)  # shorter caches than measured: never cheaper
    # past the long curve's rows: its last count, then the short curve's slope and, for each
    # further row, what it adds per cached token
    assert cost.step(16, 16 * 1064) == pytest.approx(4.8 + (4.0 - 2.4) + 0.001 * 8 * 1000)
    assert cost.step(9, 9 * 64) == pytest.approx(2.4 + 0.2)


def test_a_noisy_curve_where_more_rows_cost_less_never_prices_a_row_below_zero():
    noisy = StepCost((1, 2, 4, 8, 16), (1.0, 1.3, 1.2, 1.1, 2.0), long_context=1024,
                     long_seconds=(2.0, 1.9, 2.5))
    assert noisy.seconds == (1.0, 1.3, 1.3, 1.3, 2.0)
    assert noisy.long_seconds == (2.0, 2.0, 2.5)
    assert noisy.row_cost() >= 0.0
    assert all(noisy.step(r + 1, (r + 1) * 300) >= noisy.step(r, r * 300) for r in range(1, 20))
