"""What a target step costs as it scores more rows: the measured curve the draft budget is chosen
from (`core.budget`).

With fp32 weights a step over 8 rows costs little more than one (memory-bound); with 8-bit integer
kernels every row adds its own arithmetic; on the torch path a row costs nearly a step; and every
row attends to its own sequence's whole cache, so rows cost more as contexts grow. The curve is
measured on the machine, once per target, not assumed (`specdecode.models.timing`);
`specdecode tune` saves it in the model's profile, where later processes on the same machine and
kernel path find it.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

MEASURED_ROWS = (1, 2, 4, 8, 16, 32, 64)  # the row counts a curve is measured at (`timing`)
SHORT_CONTEXT = 64


@dataclass(frozen=True)
class StepCost:
    """Seconds of one target forward over `rows` new rows (all sequences' rows together) whose
    caches hold `cached` tokens in all: `seconds[i]` over `rows[i]` rows after `context` cached
    tokens each, linear between measured row counts and past the last. Up to the last of
    `long_seconds` (the first row counts again, after `long_context` tokens each), linear in the
    rows' mean cached tokens between the two curves; each further row adds `per_cached` seconds
    for every cached token it sees beyond `context`. Without a long curve every row does that.

    Measured at two contexts because rows differ: a step's first row reads its sequence's cache
    from memory, its further rows find it in the core's cache, and a few rows share less work
    per row than many."""

    rows: tuple[int, ...]  # increasing, 1 first
    seconds: tuple[float, ...]
    context: int = SHORT_CONTEXT
    per_cached: float = 0.0
    long_context: int = 0
    long_seconds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        # a step of more rows never costs less than one of fewer: timing noise that says so
        # (a busy host, the transformers backend) would price every draft row as free
        for name in ("seconds", "long_seconds"):
            object.__setattr__(self, name, tuple(itertools.accumulate(getattr(self, name), max)))

    @classmethod
    def linear(cls, row_cost: float, per_cached: float = 0.0) -> "StepCost":
        """A one-row step of 1 (unit) time, each further row `row_cost` of it."""
        return cls((1, 2), (1.0, 1.0 + row_cost), SHORT_CONTEXT, per_cached)

    def step(self, rows: int, cached: int) -> float:
        """The seconds of a forward over `rows` rows whose caches hold `cached` tokens in all
        (summed over the rows: each row attends to its own sequence's cache)."""
        rows = max(rows, 1)
        beyond = max(cached / rows - self.context, 0.0)  # a row's cached tokens past `context`
        small = self.rows[len(self.long_seconds) - 1] if self.long_seconds else 1
        r = min(rows, small)
        at = _between(self.rows, self.seconds, r)
        if self.long_seconds:  # r rows, measured after both contexts
            growth = _between(self.rows, self.long_seconds, r) - at
            at += max(growth, 0.0) * beyond / (self.long_context - self.context)
        else:
            at += self.per_cached * beyond
        further = _between(self.rows, self.seconds, rows) - _between(self.rows, self.seconds, r)
        return max(at + further, 0.0) + self.per_cached * (rows - r) * beyond

    def row_cost(self, context: int = SHORT_CONTEXT) -> float:
        """What an eighth row adds to a step of 7, after `context` cached tokens, in one-row
        steps (for reports)."""
        one = self.step(1, context)
        return (self.step(8, 8 * context) - self.step(7, 7 * context)) / one

    def __str__(self) -> str:
        return f"rows cost {self.row_cost():.2f} of a step"


def _between(rows: tuple[int, ...], seconds: tuple[float, ...], n: int) -> float:
    """seconds at n rows, linear between the measured row counts (the first len(seconds) of
    `rows`) and past the last."""
    rows = rows[: len(seconds)]
    if len(rows) == 1:
        return seconds[0]
    i = min(max(bisect.bisect_left(rows, n), 1), len(rows) - 1)
    r0, r1, s0, s1 = rows[i - 1], rows[i], seconds[i - 1], seconds[i]
    return s0 + (s1 - s0) * (n - r0) / (r1 - r0)
