"""`draft`: a separate, smaller causal LM with the same tokenizer drafts autoregressively, with
its own KV cache per sequence. Between steps that cache is rolled back to the longest prefix it
shares with the context, so only the tokens it has not seen are fed again."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.budget import DraftBudget
from ..errors import InvalidParameterError, VocabularyMismatchError
from ..models.target import Target, forward
from .base import EMPTY_DRAFT, Draft, Drafter, draft_chain, option, register


@dataclass
class _State:
    cache: object  # the draft model's KV cache for this sequence
    cached: torch.Tensor  # [c] int64: the tokens whose keys and values it holds


@register("draft")
class DraftModel(Drafter):
    @dataclass(frozen=True)
    class Options:
        draft_model: str | None = option(
            None, "a smaller model with the same tokenizer (alias, .gguf file, directory or hub "
                  "id)")

    def __init__(self, model: Target, label: str = "draft model") -> None:
        self.model = model
        self.label = label

    @classmethod
    def unavailable(cls, model, options: Options) -> str | None:
        return None if options.draft_model else "method 'draft' needs --draft-model NAME_OR_PATH"

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return ([{"max_draft_depth": d, "draft_model": draft_model} for d in (2, 4, 6)]
                if draft_model else [])

    @classmethod
    def create(cls, model, options: Options) -> "DraftModel":
        from ..models import load_model

        reason = cls.unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        drafter = load_model(options.draft_model, device=str(model.target.device))
        check_same_vocabulary(model.tokenizer, drafter.tokenizer)
        return cls(drafter.target, options.draft_model)

    def start(self, seq) -> None:
        seq.drafter_state = _State(self.model.new_cache(), torch.empty(0, dtype=torch.long))

    def propose(self, seq, budget: DraftBudget) -> Draft:
        state, context = seq.drafter_state, seq.context
        # reuse the cached prefix, but always refeed at least the last token to get its logits
        limit = min(state.cached.shape[0], context.shape[0] - 1)
        same = (state.cached[:limit] != context[:limit]).nonzero()
        keep = int(same[0, 0]) if same.numel() else limit
        state.cache.rollback(keep)
        length = min(budget.nodes, budget.depth, self.model.max_length - context.shape[0])
        if length < 1:  # the draft model's context window is full: let the target go on alone
            return EMPTY_DRAFT
        draft = draft_chain(lambda tokens: forward(self.model, state.cache, tokens),
                            context[keep:], length, seq.sampling, seq.generator)
        state.cached = torch.cat([context, draft.tokens[:-1]])  # the last draft token is never fed
        return draft

    def describe(self) -> str:
        return f"draft ({self.label})"


def check_same_vocabulary(target_tokenizer, draft_tokenizer) -> None:
    """Draft token ids are only meaningful to the target if both tokenizers map ids identically."""
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise VocabularyMismatchError(
            f"the draft model's vocabulary ({len(draft_tokenizer)} tokens) differs from the "
            f"target's ({len(target_tokenizer)} tokens); use a draft model with the same tokenizer"
        )
