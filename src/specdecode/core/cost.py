"""What a target step costs as it scores more rows: the measured curve drafters weigh their
drafts against.

A draft token pays when the chance that it is accepted exceeds what its row adds to the step: with
fp32 weights a step over 8 rows costs little more than one (memory-bound), with 8-bit integer
kernels every row adds its own arithmetic, and on the torch path a row costs nearly a step. The
curve is measured on the machine, once per target, not assumed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..models.target import Target, forward

if TYPE_CHECKING:
    from ..models import LoadedModel

# by (model, weight formats, kernel path), not by thread count: every load of one model in a
# process drafts alike, so a server's worker thread and a library call report the same τ
_ROW_COSTS: dict[tuple[str, str, str], "RowCost"] = {}


@dataclass(frozen=True)
class RowCost:
    """What one more row adds to a step, in one-token steps, as a line in the number of cached
    tokens: each row attends to the whole context, so rows cost more as it grows (measured at two
    context lengths, extrapolated past them, never below 0)."""

    short: float  # at `short_context` cached tokens
    long: float  # at `long_context`
    short_context: int = 64
    long_context: int = 1024

    @classmethod
    def flat(cls, cost: float) -> "RowCost":
        return cls(cost, cost)

    def at(self, context: int) -> float:
        slope = (self.long - self.short) / (self.long_context - self.short_context)
        return max(0.0, self.short + slope * (context - self.short_context))

    def __str__(self) -> str:
        if self.short == self.long:
            return f"{self.short:.2f}"
        return f"{self.short:.2f} at {self.short_context} tokens, {self.long:.2f} at {self.long_context}"



def step_seconds(target: Target, sizes: tuple[int, ...], context: int = 256,
                 repeats: int = 15) -> dict[int, float]:
    """Median time of one target forward over n new tokens after `context` cached ones, for each n
    in `sizes`; the sizes take turns in every repeat, so a drift in the machine's speed (its memory
    bandwidth moves by tens of percent) hits them alike and their ratios hold."""
    longest = max(sizes)
    context = max(1, min(context, target.max_length - longest))
    ids = torch.randint(0, target.vocab_size, (context + longest,),
                        generator=torch.Generator().manual_seed(0))
    cache = target.new_cache()
    target.prefill(cache, ids[:context])

    def step(n: int) -> float:
        cache.rollback(context)
        started = time.perf_counter()
        forward(target, cache, ids[context : context + n])
        return time.perf_counter() - started

    for n in sizes:  # warm-up: first-touch page faults and kernel selection are not a step
        step(n)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            times[n].append(step(n))
    return {n: statistics.median(t) for n, t in times.items()}


def row_cost(model: "LoadedModel", rows: int = 8) -> RowCost:
    """What one more row adds to a step of `model`'s target, in one-token steps,
    (c(rows) - c(1)) / ((rows - 1) c(1)), after 64 and after 1024 cached tokens (fewer if the
    context window is smaller); measured once per model, weight formats and kernel path in a
    process (about twenty steps)."""
    path = getattr(getattr(model.target, "kernels", None), "name", None) or model.kernels
    key = (model.key, model.weights, path)
    if key not in _ROW_COSTS:
        contexts = (64, max(65, min(1024, model.target.max_length - rows - 1)))
        costs = []
        for context in contexts:
            seconds = step_seconds(model.target, (1, rows), context=context, repeats=5)
            costs.append(max(0.0, (seconds[rows] / seconds[1] - 1) / (rows - 1)))
        _ROW_COSTS[key] = RowCost(costs[0], costs[1], *contexts)
    return _ROW_COSTS[key]
