"""Drafting with a model of another tokenizer (`draft --draft-model` whose vocabulary is not the
target's; `draft` builds this drafter then): text is the common ground. The drafter reads the
context as text in its own tokens, drafts greedily, and its text becomes the target's tokens,
which the target verifies like any draft (text as the bridge between vocabularies, as in Timor
et al., ICML 2025, on speculative decoding with heterogeneous vocabularies).

Lossless under greedy decoding and sampling alike: the draft is deterministic (no q), so the
verifier accepts a drafted token with the target's own probability of it and a rejection samples
from the target's distribution without it (`core.verify`), which leaves the target's
distribution exactly as it is.

The boundaries, where two tokenizers cut the same text differently:
- the context's end: the drafter's text is retokenized with the target's tokens after the last
  few context tokens (`OVERLAP`), and used only when those come out as the context has them;
- the draft's end: the drafter's last token may end inside a word the target cuts elsewhere, so
  the target token holding the end of the text is dropped unless the drafter ended its turn;
- the drafter's own cache: its tokens of a longer text can differ from those of a shorter one
  near the end, so each step rolls its cache back to the tokens it shares with the new reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..core.sampling import SamplingParams
from ..core.target import forward_last
from .chain import draft_chain
from .clock import ForwardClock
from .registry import drafter_class

OVERLAP = 3  # context tokens retokenized with the draft's text, to find the boundary
GREEDY = SamplingParams(temperature=0.0)


@dataclass
class _State:
    cache: object  # the drafter's KV cache
    cached: list[int]  # the drafter's tokens whose keys and values it holds
    offset: int | None = None  # the drafter reads the context from here (set at the first draft)


class CrossTokenizerDraft(Drafter):
    """Built by `draft` (drafters/draft_model.py) for a drafter whose tokens are not the target's;
    not a method of its own."""

    name = "draft"

    def __init__(self, drafter, target_tokenizer, label: str, window: int = 0) -> None:
        self.drafter = drafter  # a LoadedModel
        self.target_tokenizer = target_tokenizer
        self.label, self.window = label, window
        self.stops = frozenset(drafter.eos_token_ids)
        self.clock = ForwardClock()

    @classmethod
    def create(cls, model, options) -> Drafter:
        """What `draft` builds with these options: this drafter where the draft model's
        tokenizer is not the target's."""
        return drafter_class("draft").create(model, options)

    def start(self, seq) -> None:
        seq.drafter_state = _State(self.drafter.target.new_cache(), [])

    def propose(self, seq, budget: DraftBudget) -> Draft:
        state = seq.drafter_state
        context = seq.context.tolist()
        if state.offset is None:
            state.offset = max(0, len(context) - self.window) if self.window else 0
        if len(context) - state.offset <= OVERLAP:
            return EMPTY_DRAFT
        text = self._text(context[state.offset:])
        ids = self.drafter.tokenizer(text, add_special_tokens=False)["input_ids"]
        # the cached prefix, but always refeed at least the last token to get its logits
        limit = min(len(state.cached), len(ids) - 1)
        keep = next((i for i in range(limit) if state.cached[i] != ids[i]), limit)
        state.cache.rollback(keep)
        length = min(budget.nodes, budget.depth, self.drafter.target.max_length - len(ids) - 1)
        if length < 1 or keep == len(ids):
            return EMPTY_DRAFT
        forward_cost = self.clock.cost(budget)
        t0 = time.perf_counter()
        # one drafter token more than the target may take: the last one's word may be cut
        chain = draft_chain(lambda tokens: forward_last(self.drafter.target, state.cache, tokens),
                            torch.tensor(ids[keep:]), length + 1, GREEDY, None,
                            stop_below=budget.min_chance + forward_cost)
        self.clock.record(len(ids) - keep, time.perf_counter() - t0, chain.forwards)
        drafted = chain.tokens.tolist()
        state.cached = ids + drafted[:chain.forwards - 1]  # what it fed
        return self._in_target_tokens(context, drafted, chain.chances, length)

    def _text(self, tokens: list[int]) -> str:
        return self.target_tokenizer.decode(tokens, skip_special_tokens=False)

    def _in_target_tokens(self, context: list[int], drafted: list[int],
                          chances: torch.Tensor | None, length: int) -> Draft:
        """The drafter's tokens as at most `length` target tokens that continue `context`, each
        with the chance of the drafter token its text ends in."""
        if not drafted:
            return EMPTY_DRAFT
        ended = drafted[-1] in self.stops
        pieces = [self.drafter.tokenizer.decode(drafted[: i + 1], skip_special_tokens=False)
                  for i in range(len(drafted))]  # the draft's text after each drafter token
        tail = context[-OVERLAP:]
        ids = self.target_tokenizer(self._text(tail) + pieces[-1],
                                    add_special_tokens=False)["input_ids"]
        if ids[:OVERLAP] != tail:  # the boundary merged with the draft: no draft this step
            return EMPTY_DRAFT
        proposed = ids[OVERLAP:]
        if not ended:  # the last target token may hold a word the drafter had not finished
            proposed = proposed[:-1]
        proposed = proposed[:length]
        if not proposed:
            return EMPTY_DRAFT
        # a target token's chance: that of the first drafter token whose text covers its end
        ends = [len(self._text(proposed[: j + 1])) for j in range(len(proposed))]
        covered = [next((i for i, piece in enumerate(pieces) if len(piece) >= end),
                        len(pieces) - 1) for end in ends]
        chance = (chances[covered] if chances is not None
                  else torch.ones(len(proposed)))
        return Draft(torch.tensor(proposed, dtype=torch.long), None, len(drafted),
                     chances=chance)

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(6, 6)

    def describe(self) -> str:
        return f"draft ({self.label}, another tokenizer: drafts as text)"
