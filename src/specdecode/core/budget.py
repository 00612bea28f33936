"""The draft budget: how many draft rows a step scores, chosen by cost.

A drafter proposes within caps (`DraftBudget`: nodes and depth) and, when it can, says for each
node the chance c_i that the node ends up on the accepted path, nodes best first (so every prefix
of its draft is a tree). The step then scores, of all its sequences' drafts together, the nodes
that maximise the expected tokens per second of the step,

    sum over sequences b of (1 + sum of c_i over b's scored nodes) / step seconds(rows, cached),

with rows = one per sequence (its pending token) + the scored nodes, and the step's seconds from
the measured curve (`core.cost.StepCost`). For one sequence this is today's speculation: a node
joins while its chance pays for its row. With many sequences each row is shared by more tokens, so
the same chance pays for less: speculation shrinks as the batch grows, down to none. A draft
without chances is scored whole. Prompt chunks prefilled in the same forward take their seconds
whatever is drafted: a decoding token is valued at the step without them (`prompt_share`), so a
long chunk does not make every draft row, and every drafter forward, look free.

What drafting itself costs (a learned head's forwards) is spent before the rows are chosen, so
each sequence also has a `DraftGate`: it measures what its drafting gained (accepted tokens, in
plain steps' time) against what it cost (the drafter's time and the extra rows), and when that
does not pay, it stops proposing for a while and tries again later: never much slower than plain
decoding.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import torch

from ..kernels import ROW_INVARIANT_ROWS
from .cost import StepCost

# a sequence's rows in a step (its pending token and its nodes) must fit one attention call that
# computes each row as alone on every kernel path
MAX_DRAFT_NODES = ROW_INVARIANT_ROWS - 1


@dataclass(frozen=True)
class DraftBudget:
    """The most a drafter may propose for one step: `nodes` draft tokens in all, on paths of at
    most `depth` (a chain: min(nodes, depth) tokens). Zero nodes: plain decoding. `min_chance`:
    the step will not score a node whose chance is below it (what the first draft row would have
    to bring to pay for itself), so a drafter may stop there. `token_seconds`: what a token costs
    in this step without drafts, against which a drafter can weigh its own time per node.
    `forwards` False: the drafter's model is paused (`DraftGate`): only drafts that cost it no
    forward (n-gram matches) may be proposed."""

    nodes: int
    depth: int
    min_chance: float = 0.0
    # seconds a token of this step costs without drafts (the step over its sequences; 0: not
    # measured): a drafter whose own forwards take time weighs them against it
    token_seconds: float = 0.0
    forwards: bool = True


@dataclass(frozen=True)
class StepShape:
    """What one target forward held: all its rows, the cached tokens they attend to in all, and
    its decoding sequences (each confirms at least one token a step); of those rows and cached
    tokens, the prompt chunks' (prefilled beside the sequences)."""

    rows: int
    cached: int
    sequences: int
    prompt_rows: int = 0
    prompt_cached: int = 0


def prompt_share(cost: StepCost, rows: int, cached: int, prompt_rows: int,
                 prompt_cached: int) -> float:
    """Seconds of a step of `rows` rows attending to `cached` tokens that its prompt chunks
    (`prompt_rows` of them, attending to `prompt_cached`) add: spent whatever is drafted."""
    if not prompt_rows:
        return 0.0
    return cost.step(rows, cached) - cost.step(rows - prompt_rows, cached - prompt_cached)


def step_gain(cost: StepCost, accepted: int, nodes: int, context: int, draft_seconds: float,
              shared: StepShape | None = None) -> float:
    """Seconds a drafted step of one sequence saved against plain decoding: its accepted tokens
    at what a token costs without its draft, less the drafting and what its `nodes` rows added.
    Alone (`shared` None) a token costs a plain step; in a step `shared` by several sequences it
    costs the step (without these rows) over its sequences, and the rows cost what they add to
    the whole step, so drafting that a lone sequence would profit from can lose in a full batch.
    A token's cost leaves out the step's prompt chunks (`prompt_share`)."""
    step = shared or StepShape(1 + nodes, (1 + nodes) * context, 1)
    rows, cached = step.rows - nodes, step.cached - nodes * context  # the step without the draft
    without = cost.step(rows, cached)
    token = (without - prompt_share(cost, rows, cached, step.prompt_rows, step.prompt_cached)) \
        / step.sequences
    return accepted * token - draft_seconds - (cost.step(step.rows, step.cached) - without)


def min_chance(cost: StepCost, rows: int, cached: int, tokens: int, context: int,
               spent: float = 0.0) -> float:
    """The chance a first draft node must have to pay for its row, in a step of `rows` rows
    attending to `cached` tokens in all that confirms `tokens` without drafts, for a sequence of
    `context` tokens: tokens x (what the row adds) / (the step less the `spent` seconds of its
    prompt chunks). Where each further row costs as much as the first (the measured curve past
    its first few rows), `allocate` keeps no node below it: every kept node raises the step's
    tokens per second, and with it the bar."""
    step = cost.step(rows, cached)
    return tokens * (cost.step(rows + 1, cached + context) - step) / (step - spent)


def allocate(cost: StepCost, drafts: Sequence[tuple[torch.Tensor | None, int, int]],
             other_rows: int = 0, other_cached: int = 0) -> list[int]:
    """How many of each draft's nodes to score: drafts are (chances [N] or None, N, context
    length) per sequence, in the step's order; the step also holds `other_rows` rows that attend
    to `other_cached` cached tokens in all (prompt chunks being prefilled). Returns a count per
    draft (N where chances is None): the best prefix of the merged order (each draft's nodes
    taken in its own order, the likeliest next node first) by expected tokens per second of the
    step less its prompt chunks' share; ties keep fewer rows."""
    counts = [n if chances is None else 0 for chances, n, _ in drafts]
    rows = other_rows + sum(1 + fixed for fixed in counts)
    cached = other_cached + sum((1 + fixed) * context
                                for fixed, (_, _, context) in zip(counts, drafts))
    spent = prompt_share(cost, rows, cached, other_rows, other_cached)
    expected = float(len(drafts))  # every sequence confirms at least one token per step
    ranked = [(chances.tolist(), context) for chances, _, context in drafts
              if chances is not None]
    owners = [b for b, (chances, _, _) in enumerate(drafts) if chances is not None]
    heap = [(-chances[0], j, 0) for j, (chances, _) in enumerate(ranked) if chances]
    heapq.heapify(heap)
    best_rate, best_taken = expected / (cost.step(rows, cached) - spent), [0] * len(ranked)
    taken = [0] * len(ranked)
    while heap:
        neg_chance, j, i = heapq.heappop(heap)
        chances, context = ranked[j]
        expected, rows, cached = expected - neg_chance, rows + 1, cached + context
        taken[j] = i + 1
        if i + 1 < len(chances):
            heapq.heappush(heap, (-chances[i + 1], j, i + 1))
        rate = expected / (cost.step(rows, cached) - spent)
        if rate > best_rate:
            best_rate, best_taken = rate, list(taken)
    for j, b in enumerate(owners):
        counts[b] = best_taken[j]
    return counts


# the gate's memory of earlier steps (weight of the newest), the drafted steps it judges by before
# it may pause, and its pauses, in steps
GATE_WEIGHT, GATE_STEPS, MIN_PAUSE, MAX_PAUSE = 0.2, 4, 8, 256


@dataclass
class DraftGate:
    """One sequence's measure of whether its drafting pays: a moving average of each drafted
    step's gain, (accepted tokens) x (a plain step's seconds) - (drafting seconds) - (the extra
    rows' seconds), over the drafted steps since it last opened. Below zero after at least
    GATE_STEPS of them, drafting pauses for `MIN_PAUSE` steps, doubling (up to `MAX_PAUSE`) while
    the steps after a pause keep failing; steps that pay reset the pause. Until it has seen
    1 / GATE_WEIGHT steps the average is their plain mean: a moving average started at its first
    step would judge by that one step (half its weight still after four), and a first draft that
    misses is no sign that the next ones will."""

    gain: float = 0.0  # seconds a drafted step saved, moving average
    judged: int = 0  # drafted steps since the gate last opened
    paused: int = 0  # steps left without drafting
    pause: int = MIN_PAUSE  # the next pause's length

    def open(self) -> bool:
        """Whether this step may draft (counts a paused step off)."""
        if self.paused:
            self.paused -= 1
            return False
        return True

    def observe(self, gain: float) -> None:
        """A drafted step's gain in seconds (negative: it cost more than it saved)."""
        self.judged += 1
        weight = max(GATE_WEIGHT, 1 / self.judged)
        self.gain = (1 - weight) * self.gain + weight * gain
        if self.gain >= 0:
            self.pause = MIN_PAUSE
        elif self.judged >= GATE_STEPS:
            self.paused, self.pause = self.pause, min(2 * self.pause, MAX_PAUSE)
            self.judged = 0  # after the pause it is judged afresh
