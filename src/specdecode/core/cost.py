"""What a target step costs as it scores more rows: the measured curve the draft budget is chosen
from (`core.budget`).

With fp32 weights a step over 8 rows costs little more than one (memory-bound); with 8-bit integer
kernels every row adds its own arithmetic; on the torch path a row costs nearly a step; and every
row attends to its own sequence's whole cache, so rows cost more as contexts grow. The curve is
measured on the machine, once per target, not assumed; `specdecode tune` saves it in the model's
profile, where later processes on the same machine and kernel path find it.
"""

from __future__ import annotations

import bisect
import itertools
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from ..models.target import Target, forward
from ..profiles import load_profile, save_profile_section

if TYPE_CHECKING:
    from ..models import LoadedModel

PROFILE_SECTION = "step_cost"
# steps of at most SMALL_STEP rows: SETTLE untimed ones first (a larger step before them slows
# them), then SMALL_TIMED timed ones in a row: the first draft row's cost is the difference of the
# 1- and 2-row times, so their noise decides whether drafting starts at all
SETTLE, SMALL_TIMED, SMALL_STEP = 3, 3, 8
MEASURED_ROWS = (1, 2, 4, 8, 16, 32, 64)
SHORT_CONTEXT, LONG_CONTEXT = 64, 1024

# by (model, weight formats, kernel path), not by thread count: every load of one model in a
# process drafts alike, so a server's worker thread and a library call report the same τ
_MEASURED: dict[tuple[str, str, str], "StepCost"] = {}


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


def step_seconds(target: Target, sizes: tuple[int, ...], context: int = 256,
                 repeats: int = 15) -> dict[int, float]:
    """Median time of one target forward over n new tokens after `context` cached ones, for each n
    in `sizes`; the sizes take turns in every repeat, so a drift in the machine's speed (its memory
    bandwidth moves by tens of percent) hits them alike and their ratios hold. Each timed step
    follows untimed ones of its own size, as in decoding, where steps of similar sizes follow
    each other: right after a much larger step, small ones run slower for a few steps
    (BENCHMARKS.md, the step-cost curve). Small steps are
    timed SMALL_TIMED times a repeat: they are cheap and their differences matter most."""
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
        for n in sorted(sizes, reverse=True):  # a larger step slows the next one more
            small = n <= SMALL_STEP
            for _ in range(SETTLE if small else 1):
                step(n)
            times[n].extend(step(n) for _ in range(SMALL_TIMED if small else 1))
    return {n: statistics.median(t) for n, t in times.items()}


def measure(target: Target, repeats: int = 5) -> StepCost:
    """The curve over MEASURED_ROWS rows after SHORT_CONTEXT cached tokens, the same up to
    SMALL_STEP rows after LONG_CONTEXT (less where the window is smaller), and what each row
    past SMALL_STEP adds per cached token: the growth of rows SMALL_STEP/2 .. SMALL_STEP between
    the two contexts, a row's share."""
    rows = tuple(r for r in MEASURED_ROWS if SHORT_CONTEXT + r < target.max_length)
    short = step_seconds(target, rows, context=SHORT_CONTEXT, repeats=repeats)
    long_context = min(LONG_CONTEXT, target.max_length - SMALL_STEP - 1)
    small = tuple(r for r in rows if r <= SMALL_STEP)
    if long_context < 2 * SHORT_CONTEXT or len(small) < 2:
        return StepCost(rows, tuple(short[r] for r in rows), SHORT_CONTEXT)
    long = step_seconds(target, small, context=long_context, repeats=repeats)
    half, last = small[-2], small[-1]
    extra = (long[last] - long[half]) - (short[last] - short[half])
    per_cached = max(extra, 0.0) / ((last - half) * (long_context - SHORT_CONTEXT))
    return StepCost(rows, tuple(short[r] for r in rows), SHORT_CONTEXT, per_cached, long_context,
                    tuple(long[r] for r in small))


def machine_key(model: "LoadedModel") -> str:
    """What a measured curve depends on besides the model: weight formats, kernel path (with its
    threads) and CPU."""
    return f"{model.weights} | {model.kernels} | {platform.machine()} {cpu_name()}"


def step_cost(model: "LoadedModel") -> StepCost:
    """The model's curve on this machine: from its profile when `tune` saved one for this machine
    key, else measured (a few seconds), once per model, formats and kernel path in a process."""
    path = getattr(getattr(model.target, "kernels", None), "name", None) or model.kernels
    key = (model.key, model.weights, path)
    if key not in _MEASURED:
        saved = (load_profile(model.key).get(PROFILE_SECTION) or {}).get(machine_key(model))
        _MEASURED[key] = (StepCost(tuple(saved["rows"]), tuple(saved["seconds"]),
                                   saved["context"], saved["per_cached"],
                                   saved.get("long_context", 0),
                                   tuple(saved.get("long_seconds", ())))
                          if saved else measure(model.target))
    return _MEASURED[key]


def save_step_cost(model: "LoadedModel", cost: StepCost) -> None:
    """Keep `cost` in the model's profile under this machine's key (what `tune` measured)."""
    section = dict(load_profile(model.key).get(PROFILE_SECTION) or {})
    section[machine_key(model)] = {**asdict(cost), "date": time.strftime("%Y-%m-%d")}
    save_profile_section(model.key, PROFILE_SECTION, section)
    path = getattr(getattr(model.target, "kernels", None), "name", None) or model.kernels
    _MEASURED[(model.key, model.weights, path)] = cost


def cpu_name() -> str:
    """The CPU's model name, for reports and measured profiles."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or os.uname().machine
