"""Continuous batching: several sequences share each target forward.

Sequences join and leave at step boundaries. A joining sequence's prompt is prefilled in chunks
that ride along with the others' steps (at most `prefill_rows` prompt rows a step), so a long
prompt does not stall them. Every step, each decoding sequence proposes its draft (or none), the
step keeps the draft rows that pay for the whole batch (`core.budget`), the rows of all of them
are scored in one forward (`engine.step_batch`) and each is verified and committed alone. The
kernels compute a row the same way whatever else the forward holds, so a sequence's tokens do not
depend on what it was batched with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Sequence

from .cost import MEASURED_ROWS, StepCost
from .drafter import Drafter
from .engine import PREFILL_CHUNK, Chunk, GenerationResult, admit, collect, step_batch
from .sequence import DraftLimit, GenerationConfig
from .sequence import Sequence as Seq
from .target import Target

# adaptive: draft rows chosen for the whole batch (speculation shrinks as it fills); always: each
# sequence's as if it ran alone; off: no drafts
Speculation = Literal["adaptive", "always", "off"]
SPECULATION: tuple[str, ...] = ("adaptive", "always", "off")
# the most sequences a batch steps together: each brings at least one row, and the step-cost
# curve the draft budget reads is measured up to this many rows (`core.cost.MEASURED_ROWS`)
MAX_BATCH = MEASURED_ROWS[-1]


@dataclass
class Request:
    """One prompt to generate from, with its drafter (any mix of methods may share a batch)."""

    prompt: Sequence[int]
    config: GenerationConfig
    drafter: Drafter
    limit: DraftLimit | None  # None: plain decoding


@dataclass
class _Entry:
    drafter: Drafter
    seq: Seq
    joined: float  # perf_counter when it joined


@dataclass(frozen=True)
class StepReport:
    """What the last step held: decoding sequences, their rows (one each plus draft nodes), the
    draft rows among them, and prompt rows prefilled beside them."""

    sequences: int = 0
    rows: int = 0
    draft_rows: int = 0
    prefill_rows: int = 0


class Batch:
    """The sequences in flight on one target. `join` admits a request (its prompt is prefilled
    by the next steps); `step` prefills and advances every sequence by one target forward, and
    drops the finished; `leave` drops a sequence at once (a cancelled request), freeing its
    cache. `cost` chooses the draft rows (None: every proposed node), as `speculation` says."""

    def __init__(self, target: Target, cost: StepCost | None = None,
                 eos_token_ids: frozenset[int] = frozenset(),
                 decode: Callable[[list[int]], str] | None = None,
                 speculation: Speculation = "adaptive", prefill_rows: int = PREFILL_CHUNK) -> None:
        if speculation not in SPECULATION or prefill_rows < 1:
            raise ValueError(f"speculation {speculation!r}, prefill rows {prefill_rows}")
        self.target, self.cost, self.speculation = target, cost, speculation
        self.eos_token_ids, self.decode, self.prefill_rows = eos_token_ids, decode, prefill_rows
        self.prefilling: list[_Entry] = []  # in join order: the first gets its chunk first
        self.decoding: list[_Entry] = []
        self.last_step = StepReport()

    def __len__(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def join(self, request: Request) -> Seq:
        """Admit a request (raises SpecDecodeError for a bad prompt); it starts decoding once its
        prompt is in its cache."""
        limit = None if self.speculation == "off" else request.limit
        entry = _Entry(request.drafter, admit(self.target, request.drafter, request.prompt,
                                              request.config, limit, self.decode),
                       time.perf_counter())
        if entry.seq.to_prefill:
            self.prefilling.append(entry)
        else:  # a one-token prompt: nothing to prefill
            entry.drafter.prepare(entry.seq)
            self.decoding.append(entry)
        return entry.seq

    def leave(self, seq: Seq) -> None:
        self.prefilling = [e for e in self.prefilling if e.seq is not seq]
        self.decoding = [e for e in self.decoding if e.seq is not seq]

    def step(self) -> list[tuple[Seq, Chunk]]:
        """One forward: the next prompt chunks and every decoding sequence's rows; returns
        (sequence, its chunk) for each decoding sequence, in join order."""
        if not len(self):
            return []
        prefill, left = [], self.prefill_rows
        for e in self.prefilling:
            if left == 0:
                break
            n = min(e.seq.to_prefill, left, PREFILL_CHUNK)
            prefill.append((e.drafter, e.seq, n))
            left -= n
        drafted = sum(e.seq.stats.drafted for e in self.decoding)
        chunks = step_batch(self.target, [(e.drafter, e.seq) for e in self.decoding],
                            self.eos_token_ids, self.cost, prefill,
                            jointly=self.speculation == "adaptive")
        draft_rows = sum(e.seq.stats.drafted for e in self.decoding) - drafted
        self.last_step = StepReport(len(self.decoding), len(self.decoding) + draft_rows,
                                    draft_rows, self.prefill_rows - left)
        now, out, still = time.perf_counter(), [], []
        for e, chunk in zip(self.decoding, chunks):
            out.append((e.seq, chunk))
            if chunk.finish_reason is None:
                still.append(e)
            else:
                e.seq.stats.wall_seconds = now - e.joined
        for e in [e for e in self.prefilling if not e.seq.to_prefill]:
            e.drafter.prepare(e.seq)
            e.seq.stats.prefill_seconds = time.perf_counter() - e.joined
            still.append(e)
        self.prefilling = [e for e in self.prefilling if e.seq.to_prefill]
        self.decoding = still
        return out


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
