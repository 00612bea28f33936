"""Continuous batching: several sequences share each target forward.

Sequences join and leave at step boundaries. Every step, each active sequence proposes its draft
(or none), the rows of all of them are scored in one forward (`engine.step_batch`) and each is
verified and committed alone. The kernels compute a row the same way whatever else the forward
holds, so a sequence's tokens do not depend on what it was batched with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ..drafters.base import Drafter
from ..models.target import Target
from .cost import StepCost
from .engine import Chunk, GenerationResult, start, step_batch
from .sequence import DraftLimit, GenerationConfig
from .sequence import Sequence as Seq


@dataclass
class Request:
    """One prompt to generate from, with its drafter (any mix of methods may share a batch)."""

    prompt: Sequence[int]
    config: GenerationConfig
    drafter: Drafter
    limit: DraftLimit | None  # None: plain decoding


class Batch:
    """The sequences in flight on one target. `join` prefills a prompt (all of it, before the next
    step); `step` advances every active sequence by one target forward, its draft rows chosen by
    `cost` for the whole batch (`core.budget`; None: every proposed node), and drops the finished;
    `leave` drops a sequence at once (a cancelled request), freeing its cache."""

    def __init__(self, target: Target, cost: StepCost | None = None,
                 eos_token_ids: frozenset[int] = frozenset(),
                 decode: Callable[[list[int]], str] | None = None) -> None:
        self.target, self.cost = target, cost
        self.eos_token_ids, self.decode = eos_token_ids, decode
        self.active: list[tuple[Drafter, Seq, float]] = []  # (drafter, sequence, joined at)
        self.last_step = (0, 0, 0)  # the last step's sequences, rows and draft rows

    def __len__(self) -> int:
        return len(self.active)

    def join(self, request: Request) -> Seq:
        joined = time.perf_counter()
        seq = start(self.target, request.drafter, request.prompt, request.config,
                    request.limit, self.decode)
        self.active.append((request.drafter, seq, joined))
        return seq

    def leave(self, seq: Seq) -> None:
        self.active = [entry for entry in self.active if entry[1] is not seq]

    def step(self) -> list[tuple[Seq, Chunk]]:
        """One forward for every active sequence: (sequence, its chunk) each, in join order."""
        if not self.active:
            return []
        drafted = sum(s.stats.drafted for _, s, _ in self.active)
        chunks = step_batch(self.target, [(d, s) for d, s, _ in self.active], self.eos_token_ids,
                            self.cost)
        draft_rows = sum(s.stats.drafted for _, s, _ in self.active) - drafted
        self.last_step = (len(self.active), len(self.active) + draft_rows, draft_rows)
        now, out, still = time.perf_counter(), [], []
        for (drafter, seq, joined), chunk in zip(self.active, chunks):
            out.append((seq, chunk))
            if chunk.finish_reason is None:
                still.append((drafter, seq, joined))
            else:
                seq.stats.wall_seconds = now - joined
        self.active = still
        return out


def generate_batch(target: Target, requests: list[Request], max_batch: int,
                   cost: StepCost | None = None, eos_token_ids: frozenset[int] = frozenset(),
                   decode: Callable[[list[int]], str] | None = None) -> list[GenerationResult]:
    """Generate every request, at most `max_batch` at a time (a finished one's place goes to the
    next waiting); results in the order of `requests`."""
    batch = Batch(target, cost, eos_token_ids, decode)
    waiting = list(enumerate(requests))
    index: dict[int, int] = {}  # id(sequence) -> position in requests
    parts: dict[int, tuple[list[int], list[str]]] = {}
    results: list[GenerationResult | None] = [None] * len(requests)
    while waiting or len(batch):
        while waiting and len(batch) < max_batch:
            i, request = waiting.pop(0)
            seq = batch.join(request)
            index[id(seq)] = i
            parts[i] = ([], [])
        for seq, chunk in batch.step():
            i = index[id(seq)]
            parts[i][0].extend(chunk.token_ids)
            parts[i][1].append(chunk.text)
            if chunk.finish_reason is not None:
                results[i] = GenerationResult(parts[i][0], "".join(parts[i][1]),
                                              chunk.finish_reason, chunk.stats)
    return results
