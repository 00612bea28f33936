"""`draft`: a separate, smaller causal LM drafts autoregressively, with
its own KV cache per sequence. Between steps that cache is rolled back to the longest prefix it
shares with the context, so only the tokens it has not seen are fed again. Its output layer may
cover only the most frequent tokens (`--draft-vocab`, `vocabulary`).

Where the output copies its context (code edits, summaries), an n-gram match drafts for free
(`lookup`'s index and estimates): each step takes the match when its expected accepted tokens are
at least what the draft model's steps have been netting (accepted tokens less their forwards'
time, in the step's tokens), else runs the draft model.

A draft model with another tokenizer drafts as text (`cross_tokenizer`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..core.target import Target, forward
from ..errors import InvalidParameterError, VocabularyMismatchError
from .base import ForwardClock, draft_chain, option, register
from .cross_tokenizer import CrossTokenizerDraft
from .lookup import MatchEvidence
from .ngrams import NgramIndex
from .vocabulary import proposable_ids


NET_WEIGHT = 0.2  # weight of the newest draft model step in a sequence's `net`


@dataclass
class _State:
    cache: object  # the draft model's KV cache for this sequence
    cached: torch.Tensor  # [c] int64: the tokens whose keys and values it holds
    matches: MatchEvidence | None  # the n-gram index and its record (None: matching is off)
    net: float | None = None  # the draft model's steps' accepted tokens less their cost, average
    cost: float = 0.0  # the pending draft model step's forwards, in the step's tokens
    matched: bool = False  # the pending draft is an n-gram match
    match: tuple[int, list[int]] | None = None  # the last match: (context length, its tokens)
    offset: int | None = None  # the draft model sees context[offset:] (set at the first draft)


@register("draft")
class DraftModel(Drafter):
    @dataclass(frozen=True)
    class Options:
        draft_model: str | None = option(
            None, "a smaller model (alias, .gguf file, directory or hub id); with another "
                  "tokenizer it drafts as text, retokenized for the target; default: the target "
                  "alias's own drafter (qwen2.5-coder-1.5b: qwen2.5-coder-0.5b)")
        draft_vocab: int = option(
            65536, "the draft model's output layer keeps only this many most frequent tokens "
                   "(plus special ones), which makes each draft token cheaper; 0: all")
        draft_dtype: str = option(
            "q4_0", "the draft model's weights: a format made on load (q4_0, q8_0: fewer bytes "
                    "per draft token than wider stored formats) or auto (as stored)")
        draft_window: int = option(
            256, "the draft model reads only the last this many tokens of the prompt (its own "
                 "prefill of a long prompt costs more than its drafts gain); 0: all")
        draft_ngram: int = option(
            5, "also draft n-gram matches from the context, up to this n-gram length, when they "
               "promise more than the draft model nets (free drafts where output copies its "
               "context); 0: off")

    def __init__(self, model: Target, label: str = "draft model",
                 vocabulary: torch.Tensor | None = None, vocab_size: int | None = None,
                 ngram: int = 0, window: int = 0) -> None:
        self.model = model  # logits over `vocabulary` when given: [V'] int64 token ids
        self.label, self.ngram, self.window = label, ngram, window
        self.vocabulary, self.vocab_size = vocabulary, vocab_size
        self.clock = ForwardClock()

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
    def create(cls, model, options: Options) -> "DraftModel | CrossTokenizerDraft":
        from ..models import load_model

        reason = cls.unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        if min(options.draft_vocab, options.draft_ngram, options.draft_window) < 0:
            raise InvalidParameterError(
                "--draft-vocab, --draft-ngram and --draft-window must be >= 0, got "
                f"{options.draft_vocab}, {options.draft_ngram}, {options.draft_window}")
        name = options.draft_model or model.drafter
        drafter = load_model(name, device=str(model.target.device), dtype=options.draft_dtype)
        try:
            ids = proposable_ids(model.tokenizer, drafter.tokenizer, drafter.target.vocab_size,
                                 model.target.vocab_size, options.draft_vocab)
        except VocabularyMismatchError:  # another tokenizer: draft as text
            label = name + (f", last {options.draft_window} prompt tokens"
                            if options.draft_window else "")
            return CrossTokenizerDraft(drafter, model.tokenizer, label, options.draft_window)
        label = name if ids is None else f"{name}, {len(ids)} tokens"
        label += f", n-gram matches up to {options.draft_ngram}" if options.draft_ngram else ""
        label += f", last {options.draft_window} prompt tokens" if options.draft_window else ""
        target = drafter.target
        if ids is not None:  # a smaller output layer where the model can cut it: cheaper steps
            target = (target.with_vocabulary(ids) if hasattr(target, "with_vocabulary")
                      else _Columns(target, ids))
        return cls(target, label, ids, model.target.vocab_size, options.draft_ngram,
                   options.draft_window)

    def start(self, seq) -> None:
        seq.drafter_state = _State(self.model.new_cache(), torch.empty(0, dtype=torch.long),
                                   MatchEvidence(NgramIndex(self.ngram)) if self.ngram else None)

    def propose(self, seq, budget: DraftBudget) -> Draft:
        state = seq.drafter_state
        if state.offset is None:
            state.offset = max(0, len(seq.context) - self.window) if self.window else 0
        context = seq.context[state.offset:]  # what the draft model reads
        # reuse the cached prefix, but always refeed at least the last token to get its logits
        limit = min(state.cached.shape[0], context.shape[0] - 1)
        same = (state.cached[:limit] != context[:limit]).nonzero()
        keep = int(same[0, 0]) if same.numel() else limit
        state.cache.rollback(keep)
        state.cached = state.cached[:keep]  # a step that drafts from a match feeds nothing
        length = min(budget.nodes, budget.depth, self.model.max_length - context.shape[0])
        if length < 1:  # the draft model's context window is full: let the target go on alone
            return EMPTY_DRAFT
        forward_cost = self.clock.cost(budget)
        match = self._match(state, seq.context, length, budget.min_chance)
        state.matched = (match is not None and state.net is not None
                         and float(match.chances.sum()) >= state.net)
        if state.matched:
            return match
        t0 = time.perf_counter()
        draft = draft_chain(lambda tokens: forward(self.model, state.cache, tokens),
                            context[keep:], length, seq.sampling, seq.generator,
                            self.vocabulary, self.vocab_size, budget.min_chance + forward_cost)
        self.clock.record(context.shape[0] - keep, time.perf_counter() - t0, draft.forwards)
        state.cached = torch.cat([context, draft.tokens[:draft.forwards - 1]])  # what it fed
        state.cost = draft.forwards * forward_cost
        return draft

    def _match(self, state: _State, context: torch.Tensor, length: int,
               min_chance: float) -> Draft | None:
        """The longest n-gram match's continuation with its chances (`lookup`), None if none.
        The match found the step before is judged first against the tokens committed since,
        whether or not it was drafted, so the estimates learn while the draft model drafts."""
        if state.matches is None:
            return None
        matches = state.matches
        if state.match:
            start, tokens = state.match
            new = context[start:].tolist()
            judged = min(len(tokens), len(new))
            agree = next((j for j in range(judged) if tokens[j] != new[j]), judged)
            matches.record(judged, agree)
        tokens, draft = matches.match(context, self.ngram, 1, length, min_chance)
        state.match = (len(context), tokens) if tokens else None
        return draft if len(draft) else None

    def observe(self, seq, scored: int, accepted: int) -> None:
        state = seq.drafter_state
        if not state.matched and scored:
            net = accepted - state.cost
            state.net = net if state.net is None else (
                (1 - NET_WEIGHT) * state.net + NET_WEIGHT * net)

    @property
    def default_budget(self) -> DraftBudget:
        # deeper than a chain's usual 4: each chain stops where its chance no longer pays
        return DraftBudget(6, 6)

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
