"""`specdecode bench --floor`: how close one decoding step is to the memory-bandwidth floor.

A decoding step must read every weight once, so weight bytes / bandwidth is the fastest a step can
be; speculation then multiplies tokens per step.
"""

from __future__ import annotations

import statistics
import time

import torch

from ...models import LoadedModel
from ...models.target import forward


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: first-touch page faults and kernel selection are not part of a step
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_bandwidth(megabytes: int = 512, repeats: int = 7) -> float:
    """Bytes per second of a streaming read (a sum over `megabytes` of fp32, far beyond the
    caches): the strictest floor, since no kernel reads weights faster than memory delivers
    them."""
    data = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    seconds = _median_seconds(data.sum, repeats)
    return data.numel() * data.element_size() / seconds


def step_seconds(model: LoadedModel, sizes: tuple[int, ...], context: int = 256,
                 repeats: int = 15) -> dict[int, float]:
    """Median time of one target forward over n new tokens after `context` cached ones, for each n
    in `sizes`; the sizes take turns in every repeat, so a drift in the machine's speed (its memory
    bandwidth moves by tens of percent here) hits them alike and their ratios hold."""
    target = model.target
    longest = max(sizes)
    context = max(1, min(context, target.max_length - longest))
    ids = torch.randint(0, target.vocab_size, (context + longest,))
    cache = target.new_cache()
    target.prefill(cache, ids[:context])

    def step(n: int) -> float:
        cache.rollback(context)
        started = time.perf_counter()
        forward(target, cache, ids[context : context + n])
        return time.perf_counter() - started

    for n in sizes:  # warm-up: first-touch page faults and kernel selection are not a step
        step(n)
    times = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            times[n].append(step(n))
    return {n: statistics.median(t) for n, t in times.items()}


def floor_report(model: LoadedModel, sizes=(1, 4, 8, 16)) -> str:
    bandwidth = measure_bandwidth()
    nbytes = model.target.weight_bytes()
    floor = nbytes / bandwidth
    seconds = step_seconds(model, sizes)
    one = seconds[sizes[0]]
    lines = [f"floor: bandwidth {bandwidth / 1e9:.1f} GB/s (streaming read), {model.weights} "
             f"weights {nbytes / 1e6:.0f} MB -> floor {floor * 1e3:.1f} ms/step"]
    for n, s in seconds.items():
        lines.append(f"  step over {n:>2} new tokens: {s * 1e3:6.1f} ms = {s / floor:.2f}x floor, "
                     f"{s / one:.2f}x a {sizes[0]}-token step")
    return "\n".join(lines)
