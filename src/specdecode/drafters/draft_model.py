"""`draft`: a separate, smaller causal LM with the same tokenizer drafts autoregressively, with
its own KV cache per sequence. Between steps that cache is rolled back to the longest prefix it
shares with the context, so only the tokens it has not seen are fed again. Its output layer may
cover only the most frequent tokens (`--draft-vocab`, `vocabulary`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..core.budget import DraftBudget
from ..errors import InvalidParameterError
from ..models.target import Target, forward
from .base import EMPTY_DRAFT, Draft, Drafter, draft_chain, option, register
from .vocabulary import proposable_ids


FORWARD_WEIGHT = 0.1  # weight of the newest draft in `forward_seconds`


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
                  "id); default: the target alias's own drafter (qwen2.5-coder-1.5b: "
                  "qwen2.5-coder-0.5b)")
        draft_vocab: int = option(
            0, "the draft model's output layer keeps only this many most frequent tokens (plus "
               "special ones), which makes each draft token cheaper; 0: all")
        draft_dtype: str = option(
            "auto", "the draft model's weights: auto (as stored) or a format made on load (q4_0, "
                    "q8_0: fewer bytes per draft token where it is stored wider)")

    def __init__(self, model: Target, label: str = "draft model",
                 vocabulary: torch.Tensor | None = None, vocab_size: int | None = None) -> None:
        self.model = model  # logits over `vocabulary` when given: [V'] int64 token ids
        self.label = label
        self.vocabulary, self.vocab_size = vocabulary, vocab_size
        self.forward_seconds = 0.0  # a draft forward's seconds, moving average

    @classmethod
    def unavailable(cls, model, options: Options) -> str | None:
        if options.draft_model or model.drafter:
            return None
        return f"method 'draft' needs --draft-model NAME_OR_PATH ({model.name} has no default)"

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        draft_model = draft_model or model.drafter
        return ([{"max_draft_depth": d, "draft_model": draft_model} for d in (2, 4, 6)]
                if draft_model else [])

    @classmethod
    def create(cls, model, options: Options) -> "DraftModel":
        from ..models import load_model

        reason = cls.unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        if options.draft_vocab < 0:
            raise InvalidParameterError(f"--draft-vocab must be >= 0, got {options.draft_vocab}")
        name = options.draft_model or model.drafter
        drafter = load_model(name, device=str(model.target.device), dtype=options.draft_dtype)
        ids = proposable_ids(model.tokenizer, drafter.tokenizer, drafter.target.vocab_size,
                             model.target.vocab_size, options.draft_vocab)
        label = name if ids is None else f"{name}, {len(ids)} tokens"
        if ids is None:
            return cls(drafter.target, label)
        if hasattr(drafter.target, "with_vocabulary"):  # a smaller output layer: cheaper steps
            return cls(drafter.target.with_vocabulary(ids), label, ids, model.target.vocab_size)
        return cls(_Columns(drafter.target, ids), label, ids, model.target.vocab_size)

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
        # a node is worth its forward when its chance brings more than the forward costs (in
        # the step's tokens) on top of what its row costs (min_chance)
        stop_below = budget.min_chance + (self.forward_seconds / budget.token_seconds
                                          if budget.token_seconds > 0 else 0.0)
        t0 = time.perf_counter()
        draft = draft_chain(lambda tokens: forward(self.model, state.cache, tokens),
                            context[keep:], length, seq.sampling, seq.generator,
                            self.vocabulary, self.vocab_size, stop_below)
        seconds = (time.perf_counter() - t0) / draft.forwards
        self.forward_seconds = seconds if not self.forward_seconds else (
            (1 - FORWARD_WEIGHT) * self.forward_seconds + FORWARD_WEIGHT * seconds)
        state.cached = torch.cat([context, draft.tokens[:draft.forwards - 1]])  # what it fed
        return draft

    def describe(self) -> str:
        return f"draft ({self.label})"


class _Columns:
    """A target whose logits keep only some columns: a draft model that cannot cut its output
    layer proposes the same tokens, no cheaper."""

    def __init__(self, target: Target, ids: torch.Tensor) -> None:
        self.target, self.ids = target, ids
        self.max_length = target.max_length

    def new_cache(self):
        return self.target.new_cache()

    def hidden(self, cache, tokens: torch.Tensor) -> torch.Tensor:
        return self.target.hidden(cache, tokens)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target.logits(hidden)[:, self.ids]
