"""The decoding loop, shared by plain decoding (an empty draft) and every drafter.

Cache invariant: between steps a sequence's KV cache holds context[:n-1]; the last context token
is *pending* (fed in the next forward). One step, for one sequence or a batch of them:
  1 propose  — each drafter proposes a token tree within its caps; the step's budget keeps the N
               nodes that pay for their rows (`budget.allocate`; N = 0 is plain decoding);
  2 score    — one target forward over [pending, nodes] (tree attention) gives N + 1 distributions;
  3 verify   — the verifier accepts a path of a nodes and adds one recovered-or-bonus token;
  4 commit   — compact the cache to the pending token + the accepted path (n + a entries), append
               the a + 1 new tokens to the context, tell the drafter, record the stats, stop if due.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator
from typing import Sequence as Tokens

import torch

from ..errors import InvalidParameterError, PromptTooLongError
from ..kernels import ROW_INVARIANT_ROWS
from .budget import StepShape, allocate, min_chance, prompt_share, step_gain
from .cost import StepCost
from .detokenize import IncrementalText
from .drafter import EMPTY_DRAFT, Draft, Drafter
from .metrics import RunStats
from .sampling import probabilities
from .sequence import DraftLimit, GenerationConfig, Sequence, new_generator
from .target import Target
from .verify import verify_greedy, verify_sampling


@dataclass
class Chunk:
    token_ids: list[int]  # tokens confirmed by this step (EOS excluded)
    text: str = ""  # text delta that is safe to show
    finish_reason: str | None = None  # set on the last chunk: "stop" (EOS, stop string) or "length"
    stats: RunStats | None = None  # set on the last chunk


# prompt rows per prefill call: the attention kernel computes a row alike in any call of up to
# this many rows (and every other kernel in any call), so a prompt's cache is the same however
# its prefill is split, alone or beside other sequences' steps
PREFILL_CHUNK = ROW_INVARIANT_ROWS


def admit(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
          limit: DraftLimit | None, decode: Callable[[list[int]], str] | None = None) -> Sequence:
    """A new sequence for `prompt`, nothing prefilled yet (`Sequence.to_prefill`)."""
    if not prompt:
        raise InvalidParameterError("the prompt is empty")
    if len(prompt) >= target.max_length:
        raise PromptTooLongError(
            f"prompt has {len(prompt)} tokens; the context window is {target.max_length}"
        )
    tokens = torch.empty(target.max_length, dtype=torch.long)
    tokens[: len(prompt)] = torch.tensor(prompt, dtype=torch.long)
    seq = Sequence(tokens, len(prompt), len(prompt), target.new_cache(), config,
                   new_generator(config.seed, target.device), limit,
                   IncrementalText(decode, config.stop) if decode else None)
    drafter.start(seq)
    return seq


def start(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
          limit: DraftLimit | None, decode: Callable[[list[int]], str] | None = None) -> Sequence:
    """A new sequence for `prompt`, its prompt prefilled (all but the pending last token)."""
    started = time.perf_counter()
    seq = admit(target, drafter, prompt, config, limit, decode)
    while seq.to_prefill:
        step_batch(target, [], prefill=[(drafter, seq, min(seq.to_prefill, PREFILL_CHUNK))])
    drafter.prepare(seq)
    seq.stats.prefill_seconds = time.perf_counter() - started
    return seq


@dataclass
class _Planned:
    """One sequence's part of a step between proposing and committing."""

    drafter: Drafter
    seq: Sequence
    draft: Draft
    draft_seconds: float
    judged: bool  # the sequence's gate judges this step (not drafted while it paused the model)

    @property
    def rows(self) -> torch.Tensor:
        """[N + 1] int64: the pending token, then the draft's nodes."""
        n = self.seq.length
        return torch.cat([self.seq.tokens[n - 1 : n], self.draft.tree.tokens])


def step(target: Target, drafter: Drafter, seq: Sequence,
         eos_token_ids: frozenset[int] = frozenset(), cost: StepCost | None = None) -> Chunk:
    """One target forward for `seq`: propose, score, verify, commit. Returns the step's Chunk (the
    last one, with finish_reason and stats, once the sequence is done)."""
    return step_batch(target, [(drafter, seq)], eos_token_ids, cost)[0]


def step_batch(target: Target, work: list[tuple[Drafter, Sequence]],
               eos_token_ids: frozenset[int] = frozenset(), cost: StepCost | None = None,
               prefill: list[tuple[Drafter, Sequence, int]] = (),
               jointly: bool = True) -> list[Chunk]:
    """One target forward for several unfinished sequences, each with its own drafter: every
    sequence proposes, the step keeps the draft nodes that pay by `cost` (None: every proposed
    node; jointly: for the whole step, else for each sequence as if alone), the rows of all of
    them are scored together (each against its own cache), then each is verified and committed
    alone. `prefill`: (drafter, sequence, n) for sequences whose next n prompt tokens go into
    their caches in the same forward (at most PREFILL_CHUNK each). A sequence's tokens are the
    same as stepped alone: the target computes a row the same way whatever else the forward
    holds."""
    clock = time.perf_counter
    chunks = [(seq.cache, seq.tokens[seq.cache.length : seq.cache.length + n])
              for _, seq, n in prefill]
    prefill_rows = sum(len(tokens) for _, tokens in chunks)
    prefill_cached = sum(len(tokens) * cache.length for cache, tokens in chunks)
    rows, cached = len(work) + prefill_rows, prefill_cached + sum(s.length for _, s in work)
    # the prompt chunks' seconds are spent whatever is drafted: a token is worth the rest
    spent = 0.0 if cost is None else prompt_share(cost, rows, cached, prefill_rows,
                                                  prefill_cached)
    planned = []
    for drafter, seq in work:  # 1 propose, each draft within what the step could score
        t0 = clock()
        price = ((0.0, 0.0) if cost is None else
                 (min_chance(cost, rows, cached, len(work), seq.length, spent),
                  (cost.step(rows, cached) - spent) / len(work)) if jointly else
                 (min_chance(cost, 1, seq.length, 1, seq.length), cost.step(1, seq.length)))
        draft, judged = _propose(target, drafter, seq, *price)
        planned.append(_Planned(drafter, seq, draft, clock() - t0, judged))
    shared = None  # the step's shape, by which a jointly drafted sequence's gain is judged
    if cost is not None:
        drafts = [(p.draft.chances, len(p.draft), p.seq.length) for p in planned]
        counts = (allocate(cost, drafts, prefill_rows, prefill_cached) if jointly
                  else [n for draft in drafts for n in allocate(cost, [draft])])
        for p, n in zip(planned, counts):
            p.draft = p.draft.best(n)
        if jointly:
            shared = StepShape(rows + sum(counts), cached + sum(
                n * p.seq.length for p, n in zip(planned, counts)), len(planned),
                prefill_rows, prefill_cached)
    t1 = clock()  # 2 score every pending token and draft (and prompt chunk) in one forward
    hiddens = target.hidden_batch([(p.seq.cache, p.rows, p.draft.tree) for p in planned]
                                  + [(cache, tokens, None) for cache, tokens in chunks])
    for (drafter, seq, _), hidden in zip(prefill, hiddens[len(planned):]):
        if drafter.uses_features:
            drafter.observe_features(seq, hidden)
    if not planned:
        return []
    hiddens = hiddens[: len(planned)]
    logits = target.logits(torch.cat(hiddens)).split([h.shape[0] for h in hiddens])
    forward_seconds = clock() - t1
    return [_commit(p, h, lg, forward_seconds, target.max_length, eos_token_ids, cost, shared)
            for p, h, lg in zip(planned, hiddens, logits)]


def _propose(target: Target, drafter: Drafter, seq: Sequence, price: float,
             token_seconds: float) -> tuple[Draft, bool]:
    """The sequence's draft for this step, and whether its gate judges the step: while the gate
    pauses drafting, a drafter with drafts that cost no forward (`free_drafts`) still offers
    those, priced by the budget like any other, and the gate does not count them."""
    left = min(seq.config.max_new_tokens - seq.stats.new_tokens, target.max_length - seq.length)
    # room for the bonus token
    budget = seq.limit.budget(left - 1, price, token_seconds) if seq.limit else None
    if not budget or budget.nodes == 0:
        return EMPTY_DRAFT, False
    if seq.limit.gate.open():
        return drafter.propose(seq, budget), True
    if drafter.free_drafts:
        return drafter.propose(seq, replace(budget, forwards=False)), False
    return EMPTY_DRAFT, False


def _commit(p: _Planned, hidden: torch.Tensor, logits: torch.Tensor, forward_seconds: float,
            max_length: int, eos_token_ids: frozenset[int], cost: StepCost | None,
            shared: StepShape | None) -> Chunk:
    """Verify one sequence's rows (hidden, logits: [N + 1, H], [N + 1, V]) and commit; tell the
    sequence's gate what a drafted step gained (by `cost`, in the `shared` step or alone)."""
    drafter, seq, draft, stats, n = p.drafter, p.seq, p.draft, p.seq.stats, p.seq.length
    t2 = time.perf_counter()
    tree = draft.tree
    # 3 verify
    if seq.sampling.greedy:
        verdict = verify_greedy(tree, logits)
    else:
        verdict = verify_sampling(tree, draft.q, probabilities(logits, seq.sampling),
                                  seq.generator)
    verify_seconds = forward_seconds + time.perf_counter() - t2
    # 4 commit: node i sits at cache position n + i, behind the pending token at n - 1
    seq.cache.compact(n, [n + i for i in verdict.path])
    drafter.observe(seq, len(tree), verdict.accepted)
    rows = [0] + [i + 1 for i in verdict.path]  # the root's and the accepted nodes'
    if drafter.uses_features:
        drafter.observe_features(seq, hidden[rows])
    if drafter.uses_logits:
        drafter.observe_logits(seq, [int(seq.tokens[n - 1])] + tree.path_tokens(list(verdict.path)),
                               logits[rows])
    if seq.limit:
        seq.limit.update(tree.depth, verdict.accepted)  # all accepted: the deepest level
        if cost is not None and len(tree) and p.judged:
            seq.limit.gate.observe(step_gain(cost, verdict.accepted, len(tree), n,
                                             p.draft_seconds, shared))
    new = tree.path_tokens(list(verdict.path)) + [verdict.token]
    confirmed = len(new)
    for i, token in enumerate(new):
        if token in eos_token_ids:  # EOS ends the text but was still confirmed (counts for τ)
            new, seq.finish_reason, confirmed = new[:i], "stop", i + 1
            break
    stats.observe(len(tree), verdict.accepted, len(new), confirmed, draft.forwards,
                  p.draft_seconds, verify_seconds, tree.depth)
    seq.tokens[n : n + len(new)] = torch.tensor(new, dtype=torch.long)
    seq.length += len(new)
    if seq.finish_reason is None and (stats.new_tokens >= seq.config.max_new_tokens
                                      or seq.length >= max_length):
        seq.finish_reason = "length"
    delta = seq.text.push(new) if seq.text else ""
    if seq.text and seq.text.stopped:
        seq.finish_reason = "stop"
    if seq.finish_reason is None:
        return Chunk(new, delta)
    drafter.finish(seq)
    return Chunk(new, delta + (seq.text.flush() if seq.text else ""), seq.finish_reason, stats)


def stream(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
           limit: DraftLimit | None, eos_token_ids: frozenset[int] = frozenset(),
           decode: Callable[[list[int]], str] | None = None,
           cost: StepCost | None = None) -> Iterator[Chunk]:
    """Generate from `prompt`, yielding a Chunk per step; the last chunk carries the stats, whose
    wall time runs from the start of the prefill to the last step. `cost`: the target's step
    cost, by which each step keeps the draft nodes that pay (None: all proposed)."""
    started = time.perf_counter()
    seq = start(target, drafter, prompt, config, limit, decode)
    while True:
        chunk = step(target, drafter, seq, eos_token_ids, cost)
        if chunk.finish_reason is not None:
            seq.stats.wall_seconds = time.perf_counter() - started
            yield chunk
            return
        yield chunk


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str
    stats: RunStats


def collect(chunks: Iterable[Chunk]) -> GenerationResult:
    """Consume a stream to its end and assemble the result."""
    ids, parts = [], []
    for chunk in chunks:
        ids.extend(chunk.token_ids)
        parts.append(chunk.text)
    return GenerationResult(ids, "".join(parts), chunk.finish_reason, chunk.stats)


def generate(*args, **kwargs) -> GenerationResult:
    """`stream` (same arguments) run to the end."""
    return collect(stream(*args, **kwargs))
