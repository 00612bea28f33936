"""`lookup`: prompt lookup decoding (Saxena 2023). Find the latest earlier occurrence of the
context's last n tokens (n from ngram_max down to ngram_min) and propose the tokens that followed
it. Free to run, deterministic (no q), strong when the output copies the input (translation,
summarization, code edits) or repeats itself."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.cost import RowCost, row_cost
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


@dataclass
class MatchEvidence:
    """Per sequence, per n-gram length n: how often draft position j was reached (the j - 1
    tokens before it accepted) and how often it was accepted then."""

    reached: dict[int, list[int]] = field(default_factory=dict)
    accepted: dict[int, list[int]] = field(default_factory=dict)
    pending: tuple[int, int] = (0, 0)  # (n, tokens) of the draft awaiting its verdict

    def chances(self, n: int, positions: int) -> list[float]:
        """P(the first j draft tokens are accepted), j = 1..positions: the product of each
        position's acceptance rate given the ones before, estimated with PRIOR_WEIGHT
        pseudo-observations of rate PRIOR."""
        reached, accepted = self.reached.get(n, []), self.accepted.get(n, [])
        chance, out = 1.0, []
        for j in range(positions):
            seen, hit = (reached[j], accepted[j]) if j < len(reached) else (0, 0)
            chance *= (hit + PRIOR_WEIGHT * PRIOR) / (seen + PRIOR_WEIGHT)
            out.append(chance)
        return out

    def record(self, num_accepted: int) -> None:
        n, tokens = self.pending
        reached = self.reached.setdefault(n, [])
        accepted = self.accepted.setdefault(n, [])
        for j in range(min(tokens, num_accepted + 1)):  # positions the verifier looked at
            if j == len(reached):
                reached.append(0)
                accepted.append(0)
            reached[j] += 1
            accepted[j] += num_accepted > j
        self.pending = (0, 0)


PRIOR, PRIOR_WEIGHT = 0.5, 2.0  # a weak prior: a sequence's own verdicts soon outweigh it


@register("lookup")
class PromptLookup(Drafter):
    """Drafts as many of a match's tokens as pay for their rows: token j goes into the draft
    while the chance that it and all before it are accepted (this sequence's record for matches
    of this length) exceeds what one more row adds to the step (`core.cost.row_cost`, measured).
    On kernels where rows are nearly free it drafts up to k; where each row costs its own
    arithmetic it drafts only what is likely to be kept."""

    @dataclass(frozen=True)
    class Options:
        ngram_max: int = option(5, "longest n-gram matched; longer matches count as this long")
        ngram_min: int = option(1, "shortest n-gram tried")

        def __post_init__(self) -> None:
            if not 1 <= self.ngram_min <= self.ngram_max:
                raise InvalidParameterError(f"need 1 <= ngram-min <= ngram-max, got "
                                            f"{self.ngram_min}, {self.ngram_max}")

    def __init__(self, ngram_max: int = 5, ngram_min: int = 1,
                 row_cost: RowCost | float = 0.0) -> None:
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self.row_cost = row_cost if isinstance(row_cost, RowCost) else RowCost.flat(row_cost)

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return [{"k": k, "ngram_max": n} for n in (3, 5) for k in (3, 5, 7, 10)]

    @classmethod
    def create(cls, model, options: Options) -> "PromptLookup":
        return cls(options.ngram_max, options.ngram_min, row_cost(model))

    def start(self, seq) -> None:
        seq.drafter_state = MatchEvidence()

    def propose(self, seq, k: int) -> Draft:
        if seq.drafter_state is None:
            self.start(seq)
        evidence, context = seq.drafter_state, seq.context
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            tokens = find_continuation(context, n, k)
            if tokens.numel():
                cost = self.row_cost.at(seq.context.shape[0])
                paying = sum(p > cost for p in evidence.chances(n, len(tokens)))
                evidence.pending = (n, paying)
                return Draft(tokens[:paying], None) if paying else EMPTY_DRAFT
        return EMPTY_DRAFT

    def observe(self, seq, num_accepted: int) -> None:
        if seq.drafter_state is not None and seq.drafter_state.pending[1]:
            seq.drafter_state.record(num_accepted)

    @property
    def default_k(self) -> int:
        return 10  # the most a match drafts; the row cost decides how many it does

    def describe(self) -> str:
        return f"lookup (n-gram {self.ngram_max}..{self.ngram_min}, row cost {self.row_cost})"
