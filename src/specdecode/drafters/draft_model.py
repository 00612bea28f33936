"""`draft`: a separate, smaller causal LM with the same tokenizer drafts autoregressively, with
its own KV cache. Between steps its cache is rolled back to the longest prefix it shares with the
context, so only the tokens it has not seen are fed again."""

from __future__ import annotations

import torch

from ..errors import InvalidParameterError, VocabularyMismatchError
from ..models.target import Target
from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Draft, Drafter, DrafterOptions, draft_chain, register


@register("draft")
class DraftModel(Drafter):
    def __init__(self, model: Target, label: str = "draft model") -> None:
        self.model = model
        self.label = label
        self.cached = torch.empty(0, dtype=torch.long)  # tokens whose KV the draft model holds

    @classmethod
    def create(cls, target, options: DrafterOptions) -> "DraftModel":
        from ..models import load_model

        if not options.draft_model:
            raise InvalidParameterError("method 'draft' needs --draft-model NAME_OR_PATH")
        drafter = load_model(options.draft_model)
        check_same_vocabulary(target.tokenizer, drafter.tokenizer)
        return cls(drafter.target, options.draft_model)

    def reset(self) -> None:
        self.model.reset()
        self.cached = self.cached[:0]

    def propose(self, context: torch.Tensor, k: int, params: SamplingParams, generator) -> Draft:
        # reuse the cached prefix, but always refeed at least the last token to get its logits
        limit = min(self.cached.shape[0], context.shape[0] - 1)
        same = (self.cached[:limit] != context[:limit]).nonzero()
        keep = int(same[0, 0]) if same.numel() else limit
        self.model.rollback(keep)
        k = min(k, self.model.max_length - context.shape[0])
        if k < 1:  # the draft model's context window is full: let the target go on alone
            return EMPTY_DRAFT
        draft = draft_chain(self.model.forward, context[keep:], k, params, generator)
        self.cached = torch.cat([context, draft.tokens[:-1]])  # the last draft token is never fed
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
