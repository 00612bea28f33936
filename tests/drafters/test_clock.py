"""`drafters/clock.py`: a draft model's seconds per forward, and when it is priced out."""

from __future__ import annotations

import pytest

from specdecode.core.budget import DraftBudget
from specdecode.drafters.clock import ForwardClock


def test_a_forward_clock_averages_its_forwards_but_not_a_prompts_reading():
    clock = ForwardClock()
    clock.record(1, 0.010, 1)
    assert clock.seconds == pytest.approx(0.010)
    clock.record(2, 0.220, 2)  # 110 ms each: a tenth of the way
    assert clock.seconds == pytest.approx(0.020)
    clock.record(ForwardClock.CATCH_UP + 1, 1.0, 1)  # a prompt's reading is not timed
    assert clock.seconds == pytest.approx(0.020)


def test_a_forward_clock_that_prices_the_forwards_out_still_lets_a_short_one_run_every_probe():
    clock, budget = ForwardClock(), DraftBudget(4, 4, min_chance=0.1, token_seconds=0.02)
    short, long = 2, ForwardClock.CATCH_UP + 1  # tokens a call would feed
    clock.record(1, 0.030, 1)  # 30 ms a forward against a 20 ms token
    verdicts = [clock.priced_out(budget, short) for _ in range(2 * ForwardClock.PROBE)]
    assert verdicts[: ForwardClock.PROBE] == [True] * ForwardClock.PROBE
    assert verdicts[ForwardClock.PROBE :] == [False] * ForwardClock.PROBE  # until one is timed
    # a sequence far behind is not the probe: its catch-up would cost much and time nothing
    assert clock.priced_out(budget, long)
    clock.record(short, 0.080, 2)  # the probe, timed at 40 ms: it replaces the estimate
    assert clock.seconds == pytest.approx(0.040)
    assert all(clock.priced_out(budget, short) for _ in range(ForwardClock.PROBE))
    assert not clock.priced_out(budget, short)  # the next probe
    clock.record(1, 0.005, 1)
    assert not clock.priced_out(budget, short) and clock.cost(budget) == pytest.approx(0.25)
