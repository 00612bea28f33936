"""A draft model's measured seconds per forward, which prices its draft tokens."""

from __future__ import annotations


class ForwardClock:
    """A draft model's seconds per forward, over its drafting steps; a step feeding more than
    CATCH_UP tokens is a prompt's first reading, not timed. `cost` puts a forward in the step's
    tokens: a node is worth its forward when its chance brings more than that on top of what its
    row costs (the budget's min_chance).

    The estimate is a moving average (WEIGHT on the newest). Other work on the same cores for a
    few seconds can raise it until no forward seems to pay (`priced_out`), and then nothing would
    time a forward again: the drafter would stay off for good (a stale estimate held `draft` down
    on every later request: docs/benchmarks/qwen-pair). So after PROBE calls it priced out, the
    next call whose feed is short enough to be timed runs a forward regardless, and that forward's
    time replaces the estimate. (A sequence that has fallen further behind would pay for the
    whole catch-up untimed: under load, where forwards are priced out by the shared step rather
    than by a stale estimate, probing those would make every sequence catch up in turn.)"""

    WEIGHT = 0.1
    CATCH_UP = 16
    PROBE = 32

    def __init__(self) -> None:
        self.seconds = 0.0
        self.untimed = 0  # calls priced out since a forward was last timed

    def cost(self, budget) -> float:
        return self.seconds / budget.token_seconds if budget.token_seconds > 0 else 0.0

    def priced_out(self, budget, fed: int) -> bool:
        """Whether a call that would feed `fed` tokens should run no forward: at the estimated
        cost no token's chance can pay for one (min_chance + cost >= 1), and it is not a probe
        (the PROBE calls are not yet up, or its feed would not be timed)."""
        if budget.min_chance + self.cost(budget) < 1.0:
            return False
        self.untimed += 1
        return self.untimed <= self.PROBE or fed > self.CATCH_UP

    def record(self, fed: int, seconds: float, forwards: int) -> None:
        """A drafting call that fed `fed` tokens and made `forwards` forwards in `seconds`."""
        if fed <= self.CATCH_UP:
            each = seconds / forwards
            probe = self.untimed > self.PROBE
            self.seconds = each if not self.seconds or probe else (
                (1 - self.WEIGHT) * self.seconds + self.WEIGHT * each)
            self.untimed = 0
