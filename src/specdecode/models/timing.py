"""Timing a target's steps on this machine: the step-cost curve (`core.cost.StepCost`) the draft
budget reads, measured once per model, weight formats and kernel path (seconds; 47 s for a 1.5B
model on an AVX2-only CPU), kept for the process and saved in the model's profile for later
processes on the same machine and kernel path (`specdecode tune` measures it again).
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

import torch

from ..core.cost import MEASURED_ROWS, SHORT_CONTEXT, StepCost
from ..core.target import Target, forward
from ..profiles import load_profile, save_profile_section
from .cache import StaticKVCache

if TYPE_CHECKING:
    from .loader import LoadedModel

PROFILE_SECTION = "step_cost"
# steps of at most SMALL_STEP rows: SETTLE untimed ones first (a larger step before them slows
# them), then SMALL_TIMED timed ones in a row: the first draft row's cost is the difference of the
# 1- and 2-row times, so their noise decides whether drafting starts at all
SETTLE, SMALL_TIMED, SMALL_STEP = 3, 3, 8
LONG_CONTEXT = 1024
# repeats of a curve measured on first use (`specdecode tune` takes measure's 5): 3 take less
# time, row costs within the spread of two 5-repeat curves (docs/benchmarks/qwen-pair)
FIRST_USE_REPEATS = 3

# by (model, weight formats, kernel path), not by thread count: every load of one model in a
# process drafts alike, so a server's worker thread and a library call report the same τ
_MEASURED: dict[tuple[str, str, str], StepCost] = {}
# one first-use timing at a time: a server's engine thread and a library call in the same
# process would otherwise each time the model while the other runs, and keep different curves
_TIMING = threading.Lock()


def step_seconds(target: Target, sizes: tuple[int, ...], context: int = 256,
                 repeats: int = 15) -> dict[int, float]:
    """Median time of one target forward over n new tokens after `context` cached ones, for each n
    in `sizes`; the sizes take turns in every repeat, so a drift in the machine's speed (its memory
    bandwidth moves by tens of percent) hits them alike and their ratios hold. Each timed step
    of at most SMALL_STEP rows follows untimed ones of its own size, as in decoding, where steps
    of similar sizes follow each other: right after a much larger step, small ones run slower
    for a few steps (docs/benchmarks/kernel-paths); they are timed SMALL_TIMED times a
    repeat: they are cheap and their differences matter most. A larger step is timed once a
    repeat, after whatever preceded it: what a predecessor costs it is a small part of its time.
    The cache is padded to `context` entries where it can be, not prefilled: the entries' values
    do not change a step's time."""
    longest = max(sizes)
    context = max(1, min(context, target.max_length - longest))
    ids = torch.randint(0, target.vocab_size, (context + longest,),
                        generator=torch.Generator().manual_seed(0))
    cache = target.new_cache()
    if isinstance(cache, StaticKVCache):  # what the cached entries hold does not change the time
        cache.pad(context)
    else:
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
            for _ in range(SETTLE if small else 0):  # a large step hardly notices its predecessor
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
    threads) and the build of its sources (a changed kernel prices rows anew: a curve kept from
    the last version would choose drafts by the old kernels' costs), and CPU."""
    build = getattr(getattr(model.target, "kernels", None), "build_id", "")
    kernels = f"{model.kernels}, build {build}" if build else model.kernels
    return f"{model.weights} | {kernels} | {platform.machine()} {cpu_name()}"


def step_cost(model: "LoadedModel") -> StepCost:
    """The model's curve on this machine: from its profile when one was saved for this machine
    key, else measured once per model, formats and kernel path in a process and saved."""
    path = getattr(getattr(model.target, "kernels", None), "name", None) or model.kernels
    key = (model.key, model.weights, path)
    with _TIMING:
        if key not in _MEASURED:
            _MEASURED[key] = _saved_or_measured(model)
    return _MEASURED[key]


def _saved_or_measured(model: "LoadedModel") -> StepCost:
    saved = (load_profile(model.key).get(PROFILE_SECTION) or {}).get(machine_key(model))
    if saved:
        return StepCost(tuple(saved["rows"]), tuple(saved["seconds"]), saved["context"],
                        saved["per_cached"], saved.get("long_context", 0),
                        tuple(saved.get("long_seconds", ())))
    logging.getLogger("specdecode").warning(
        "timing %s's steps on this machine once (seconds to a minute; kept in its profile for "
        "later runs)", model.key)
    cost = measure(model.target, repeats=FIRST_USE_REPEATS)
    try:
        save_step_cost(model, cost)
    except OSError as exc:  # a read-only cache costs later runs the timing, nothing else
        logging.getLogger("specdecode").warning("could not save the step cost: %s", exc)
    return cost


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
