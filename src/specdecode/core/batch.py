"""Many requests at once: at most `max_batch` in flight on one target, a finished one's place
going to the next waiting (continuous batching). Each runs the one lifecycle, `engine.Batch`, and
gets the tokens it gets alone: the kernels compute a row the same way whatever else the forward
holds.
"""

from __future__ import annotations

from typing import Callable, Iterator

from .cost import StepCost
from .engine import Batch, Chunk, GenerationResult, Request, Speculation, collect
from .target import Target

__all__ = ["Batch", "Request", "collect_each", "generate_batch", "stream_batch"]


def stream_batch(target: Target, requests: list[Request], max_batch: int,
                 cost: StepCost | None = None, eos_token_ids: frozenset[int] = frozenset(),
                 decode: Callable[[list[int]], str] | None = None,
                 speculation: Speculation = "adaptive") -> Iterator[tuple[int, Chunk]]:
    """Generate every request, at most `max_batch` at a time (a finished one's place goes to the
    next waiting), yielding (index in `requests`, chunk) as steps complete; each request's last
    chunk carries its finish_reason and stats."""
    batch = Batch(target, cost, eos_token_ids, decode, speculation)
    waiting = list(enumerate(requests))
    index: dict[int, int] = {}  # id(sequence) -> position in requests
    while waiting or len(batch):
        while waiting and len(batch) < max_batch:
            i, request = waiting.pop(0)
            index[id(batch.join(request))] = i
        for seq, chunk in batch.step():
            yield index[id(seq)], chunk


def collect_each(chunks: Iterator[tuple[int, Chunk]], count: int) -> list[GenerationResult]:
    """A `stream_batch` of `count` requests consumed to its end: their results, in order."""
    parts: list[list[Chunk]] = [[] for _ in range(count)]
    for i, chunk in chunks:
        parts[i].append(chunk)
    return [collect(p) for p in parts]


def generate_batch(target: Target, requests: list[Request], max_batch: int,
                   cost: StepCost | None = None, eos_token_ids: frozenset[int] = frozenset(),
                   decode: Callable[[list[int]], str] | None = None,
                   speculation: Speculation = "adaptive") -> list[GenerationResult]:
    """`stream_batch` to the end: results in the order of `requests`."""
    return collect_each(stream_batch(target, requests, max_batch, cost, eos_token_ids, decode,
                                     speculation), len(requests))
