"""One request's state while it generates.

Targets and drafters hold weights and policies; everything that changes during a request lives
here: the tokens, the target's KV cache for them, the drafter's own state, the random generator,
the draft caps (adaptive or not) and the statistics. Several sequences can therefore be in flight on one
model (a batching engine steps a list of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import InvalidParameterError
from .budget import MAX_DRAFT_NODES, DraftBudget, DraftGate
from .constraint import Constraint, Grammar
from .detokenize import IncrementalText
from .logprobs import MAX_TOP_LOGPROBS, TokenLogprob
from .penalties import Penalties, PenaltyState
from .run_stats import RunStats
from .sampling import SamplingParams, keyed_uniform, sample, sample_at


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None  # None: a fresh random seed per request
    stop: tuple[str, ...] = ()  # stop strings (need a decode function)
    stop_token_ids: frozenset[int] = frozenset()  # tokens that end it as the model's EOS does
    grammar: Grammar | None = None  # what the output must match (`core.constraint`); None: free
    penalties: Penalties = field(default_factory=Penalties)  # `core.penalties`; default: none
    # `core.logprobs`: None off, else each generated (prompt) token's and this many alternatives
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    # tokens the output is expected to repeat (OpenAI's predicted output): drafters that copy
    # n-gram matches copy from them as from the context; the output is the target's regardless
    reference: tuple[int, ...] = ()
    # logprobs of the distribution each token was drawn from (after penalties, the grammar,
    # temperature and truncation; greedy: all on the chosen token) instead of the model's own,
    # alternatives with no chance left out (llama.cpp's post_sampling_probs)
    sampled_logprobs: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < (0 if self.prompt_logprobs is not None else 1):
            raise InvalidParameterError(f"max-new-tokens must be >= 1 (0 only to score the "
                                        f"prompt), got {self.max_new_tokens}")
        for name in ("logprobs", "prompt_logprobs"):
            if not 0 <= (getattr(self, name) or 0) <= MAX_TOP_LOGPROBS:
                raise InvalidParameterError(f"{name.replace('_', ' ')} must be in "
                                            f"[0, {MAX_TOP_LOGPROBS}], got {getattr(self, name)}")


ADAPTIVE_MAX_DEPTH = 16  # how deep an adaptive depth cap may grow


@dataclass
class DraftLimit:
    """The caps on what this sequence's drafter proposes per step (`budget.DraftBudget`); the
    step's cost rule (`budget.allocate`) scores the part of a draft that pays.

    Adaptive (as transformers' assisted generation, on the depth): the depth cap moves +2 after a
    draft accepted to its deepest level (a whole chain, or one full branch of a tree) and -1 after
    a rejection, always within [1, max_depth]. Whether to draft at all is the gate's call."""

    nodes: int
    depth: int
    adaptive: bool = False
    max_depth: int = ADAPTIVE_MAX_DEPTH
    gate: DraftGate = field(default_factory=DraftGate)  # whether drafting pays (`budget`)

    def __post_init__(self) -> None:
        if not (1 <= self.nodes <= MAX_DRAFT_NODES and self.depth >= 1):
            raise InvalidParameterError(f"need 1 <= max-draft-nodes <= {MAX_DRAFT_NODES} and "
                                        f"max-draft-depth >= 1, got {self.nodes}, {self.depth}")
        self.max_depth = max(self.max_depth, self.depth)

    def budget(self, room: int, min_chance: float = 0.0,
               token_seconds: float = 0.0) -> DraftBudget:
        """This step's caps when at most `room` more tokens may be drafted (and the chance below
        which the step scores no node, and a token's seconds without drafts)."""
        return DraftBudget(max(min(self.nodes, room), 0), max(min(self.depth, room), 0),
                           min_chance, token_seconds)

    def update(self, depth: int, accepted: int) -> None:
        if not self.adaptive or depth == 0:
            return
        step = 2 if accepted == depth else -1
        self.depth = min(max(self.depth + step, 1), self.max_depth)


@dataclass
class SequenceState:
    tokens: torch.Tensor  # [max_length] int64 (CPU): the prompt, then the generated tokens
    length: int  # valid tokens in `tokens`; between steps the cache holds tokens[:length - 1]
    prompt_length: int
    cache: Any  # the target's `KVCache` for this sequence
    config: GenerationConfig
    generator: torch.Generator  # on the target's device: draws of this request only
    limit: DraftLimit | None  # None: plain decoding
    text: IncrementalText | None  # detokenized output, with the stop strings
    stats: RunStats = field(default_factory=RunStats)
    drafter_state: Any = None  # whatever the drafter keeps for this request (`Drafter.start`)
    finish_reason: str | None = None  # "stop" (EOS, stop string) or "length" once finished
    constraint: Constraint | None = None  # the grammar's matcher, at the confirmed tokens
    penalties: PenaltyState | None = None  # the counts penalties read, at the confirmed tokens
    # the prompt's tokens' log-probabilities as its prefill computes them (the first has none),
    # when the config asks; handed out with the sequence's first chunk
    prompt_logprobs: list[TokenLogprob | None] | None = None
    # sequences of the same prompt waiting for this one's prefill to copy its cache (`Batch.fork`)
    forks: list["SequenceState"] = field(default_factory=list)
    # a continuation's tokens generated before, as `core.engine.Chunk`s to send first (`admit`)
    replay: list[Any] = field(default_factory=list)

    @property
    def context(self) -> torch.Tensor:
        """[length] int64: prompt + generated so far."""
        return self.tokens[: self.length]

    @property
    def to_prefill(self) -> int:
        """Prompt tokens not yet in the cache (all but the pending one are, once prefilled)."""
        return self.length - 1 - self.cache.length

    @property
    def sampling(self) -> SamplingParams:
        return self.config.sampling

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length : self.length].tolist()

    @property
    def output_length(self) -> int:
        """Tokens generated so far, a continuation's earlier ones included (EOS is not kept):
        what `max_new_tokens` limits."""
        return self.length - self.prompt_length

    def uniform(self, depth: int) -> float:
        """A seeded request's uniform for the token `depth` places past the next one (the next
        is depth 0: position `length`): keyed by the seed and the position alone."""
        assert self.config.seed is not None
        return keyed_uniform(self.config.seed, self.length + depth)

    def draw(self, probs: torch.Tensor, depth: int) -> torch.Tensor:
        """A drafter's token from probs ([V], the target's token ids) for the position `depth`
        past the next one: with a seed, at that position's uniform, where the target's own draw
        there will look (`verify.verify_seeded` keeps the token when both agree); without one,
        from the request's generator."""
        if self.config.seed is None:
            return sample(probs, self.generator)
        return sample_at(probs, self.uniform(depth))


def new_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """One generator per request, so runs are reproducible and independent of each other."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()  # a non-deterministic seed, without touching the global RNG
    else:
        generator.manual_seed(seed)
    return generator

