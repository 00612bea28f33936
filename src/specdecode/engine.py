"""The decoding loop, shared by plain decoding (an empty draft) and every drafter.

Cache invariant: before each step the target's KV cache holds context[:n-1]; the last context token
is *pending* (fed in the next forward). One step:
  1 propose  — the drafter proposes a token tree of N nodes (a chain, or N = 0 for plain decoding);
  2 score    — one target forward over [pending, nodes] (tree attention) gives N + 1 distributions;
  3 verify   — the verifier accepts a path of a nodes and adds one recovered-or-bonus token;
  4 commit   — compact the cache to the pending token + the accepted path (n + a entries), append
               the a + 1 new tokens to the context, tell the drafter, record the stats, stop if due.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import torch

from .detokenize import IncrementalText
from .drafters.base import EMPTY_DRAFT, Drafter, DraftLength
from .errors import InvalidParameterError, PromptTooLongError
from .metrics import RunStats
from .models.target import Target
from .sampling import SamplingParams, probabilities
from .verify import verify_greedy, verify_sampling


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None  # None: a fresh random seed per request
    stop: tuple[str, ...] = ()  # stop strings (need a decode function)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidParameterError(f"max-new-tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Chunk:
    token_ids: list[int]  # tokens confirmed by this step (EOS excluded)
    text: str = ""  # text delta that is safe to show
    finish_reason: str | None = None  # set on the last chunk: "stop" (EOS, stop string) or "length"
    stats: RunStats | None = None  # set on the last chunk


def stream(
    target: Target,
    drafter: Drafter,
    prompt: Sequence[int],
    config: GenerationConfig,
    draft_length: DraftLength | None,
    eos_token_ids: frozenset[int] = frozenset(),
    decode: Callable[[list[int]], str] | None = None,
) -> Iterator[Chunk]:
    """Generate from `prompt`, yielding a Chunk per step; the last chunk carries the stats."""
    if not prompt:
        raise InvalidParameterError("the prompt is empty")
    if len(prompt) >= target.max_length:
        raise PromptTooLongError(
            f"prompt has {len(prompt)} tokens; the context window is {target.max_length}"
        )
    generator = torch.Generator()  # one per request: runs are reproducible and independent
    if config.seed is None:
        generator.seed()  # a non-deterministic seed, without touching the global RNG
    else:
        generator.manual_seed(config.seed)
    params, clock, stats = config.sampling, time.perf_counter, RunStats()
    text = IncrementalText(decode, config.stop) if decode else None
    started = clock()
    target.reset()
    drafter.reset()
    context = torch.empty(target.max_length, dtype=torch.long)
    n = len(prompt)
    context[:n] = torch.tensor(prompt, dtype=torch.long)
    if n > 1:
        hidden = target.prefill(context[: n - 1])
        if drafter.uses_features:
            drafter.observe_features(hidden)
    stats.prefill_seconds = clock() - started
    finish = None
    while finish is None:
        budget = min(config.max_new_tokens - stats.new_tokens, target.max_length - n)
        gamma = min(draft_length.k if draft_length else 0, budget - 1)
        # 1 propose
        t0 = clock()
        draft = drafter.propose(context[:n], gamma, params, generator) if gamma > 0 else EMPTY_DRAFT
        t1 = clock()
        # 2 score the pending token and the draft in one target forward
        tree = draft.tree
        hidden = target.hidden(torch.cat([context[n - 1 : n], tree.tokens]), tree)  # [N + 1, H]
        logits = target.logits(hidden)  # [N + 1, V]
        # 3 verify
        if params.greedy:
            verdict = verify_greedy(tree, logits)
        else:
            verdict = verify_sampling(tree, draft.q, probabilities(logits, params), generator)
        t2 = clock()
        # 4 commit: node i sits at cache position n + i, behind the pending token at n - 1
        target.compact(n, [n + i for i in verdict.path])
        drafted = len(tree)
        drafter.observe(verdict.accepted)
        if drafter.uses_features:
            drafter.observe_features(hidden[[0] + [i + 1 for i in verdict.path]])
        if draft_length:
            draft_length.update(drafted, verdict.accepted)
        new = tree.path_tokens(list(verdict.path)) + [verdict.token]
        confirmed = len(new)
        for i, token in enumerate(new):
            if token in eos_token_ids:  # EOS ends the text but was still confirmed (counts for τ)
                new, finish, confirmed = new[:i], "stop", i + 1
                break
        stats.observe(drafted, verdict.accepted, len(new), confirmed, draft.forwards, t1 - t0,
                      t2 - t1, tree.depth)
        context[n : n + len(new)] = torch.tensor(new, dtype=torch.long)
        n += len(new)
        if finish is None and (stats.new_tokens >= config.max_new_tokens or n >= target.max_length):
            finish = "length"
        delta = text.push(new) if text else ""
        if text and text.stopped:
            finish = "stop"
        if finish is None:
            yield Chunk(new, delta)
    stats.wall_seconds = clock() - started
    yield Chunk(new, delta + (text.flush() if text else ""), finish, stats)


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
