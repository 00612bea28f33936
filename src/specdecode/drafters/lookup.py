"""`lookup`: prompt lookup decoding (Saxena 2023). Find the latest earlier occurrence of the
context's last n tokens (n from ngram_max down to ngram_min) and propose the tokens that followed
it. Free to run, deterministic (no q), strong when the output copies the input (translation,
summarization, code edits) or repeats itself."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidParameterError
from .base import EMPTY_DRAFT, Draft, Drafter, option, register


def find_continuation(context: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Tokens following the most recent earlier match of context[-n:], at most k of them.

    context: [L] int64 -> [<= k] int64 (empty when there is no match)."""
    L = context.shape[0]
    if L <= n:
        return context[:0]
    windows = context[: L - 1].unfold(0, n, 1)  # [L - n, n]; excludes the suffix matching itself
    hits = (windows == context[L - n :]).all(dim=1).nonzero()
    if not hits.numel():
        return context[:0]
    start = int(hits[-1, 0]) + n
    return context[start : start + k]


@register("lookup")
class PromptLookup(Drafter):
    @dataclass(frozen=True)
    class Options:
        ngram_max: int = option(5, "longest n-gram matched; a match this long drafts k tokens")
        ngram_min: int = option(1, "shortest n-gram tried")

        def __post_init__(self) -> None:
            if not 1 <= self.ngram_min <= self.ngram_max:
                raise InvalidParameterError(f"need 1 <= ngram-min <= ngram-max, got "
                                            f"{self.ngram_min}, {self.ngram_max}")

    def __init__(self, ngram_max: int = 5, ngram_min: int = 1) -> None:
        self.ngram_max, self.ngram_min = ngram_max, ngram_min

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return [{"k": k, "ngram_max": n} for n in (3, 5) for k in (3, 5, 7, 10)]

    @classmethod
    def create(cls, model, options: Options) -> "PromptLookup":
        return cls(options.ngram_max, options.ngram_min)

    def propose(self, seq, k: int) -> Draft:
        context = seq.context
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            tokens = find_continuation(context, n, draft_length(n, k, self.ngram_max))
            if tokens.numel():
                return Draft(tokens, None)
        return EMPTY_DRAFT

    @property
    def default_k(self) -> int:
        # drafts stay within the rows a step verifies at little extra cost (BENCHMARKS.md)
        return 7

    def describe(self) -> str:
        return f"lookup (n-gram {self.ngram_max}..{self.ngram_min})"


def draft_length(n: int, k: int, ngram_max: int) -> int:
    """Tokens to copy after a match of the context's last n tokens, at most k.

    A longer match is stronger evidence that the continuation repeats; a step over a few tokens
    costs little more than one over 1 (`kernels`), so even weak matches draft several tokens: a
    3-gram or longer k, a 2-gram 5, a 1-gram 3. Chosen by replaying drafting policies over greedy
    outputs of held-out Spec-Bench prompts against the measured step costs (BENCHMARKS.md, measurements behind defaults).
    """
    if n >= 3 or n >= ngram_max:
        return k
    return min(k, 5 if n == 2 else 3)
