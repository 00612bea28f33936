"""`lookup`: prompt lookup decoding (Saxena 2023). Find the latest earlier occurrence of the
context's last n tokens (n from ngram_max down to ngram_min) and propose the tokens that followed
it. Free to run, deterministic (no q), strong when the output copies the input (translation,
summarization, code edits) or repeats itself."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..errors import InvalidParameterError
from .ngrams import AcceptanceRecord, NgramIndex
from .registry import option, register


@dataclass
class MatchEvidence:
    """Per sequence: its n-gram index, and per n-gram length n and draft position j how often
    position j was reached (the j - 1 tokens before it accepted) and accepted then."""

    index: NgramIndex
    verdicts: AcceptanceRecord = field(default_factory=AcceptanceRecord)  # kind: (n, j)
    pending: int = 0  # n of the draft awaiting its verdict

    def chances(self, n: int, positions: int) -> list[float]:
        """P(the first j draft tokens are accepted), j = 1..positions: the product of each
        position's acceptance rate given the ones before, each position's prior the rate of the
        position before (PRIOR for the first): a position never judged is taken to be as good
        as the last one judged, so drafts can grow."""
        chance, rate, out = 1.0, PRIOR, []
        for j in range(positions):
            rate = self.verdicts.rate((n, j), rate)
            chance *= rate
            out.append(chance)
        return out

    def match(self, context: torch.Tensor, n_max: int, n_min: int, length: int,
              min_chance: float) -> tuple[list[int], Draft]:
        """The continuation (at most `length` tokens) of the longest n-gram match of the
        context's end, n from n_max down to n_min ([] when none), and its draft: the tokens whose
        chance reaches `min_chance` (the step would not score the rest), with their chances."""
        self.index.extend(context)
        for n in range(n_max, n_min - 1, -1):
            tokens = self.index.continuation(n, length)
            if tokens:
                self.pending = n
                chances = [c for c in self.chances(n, len(tokens)) if c >= min_chance]
                if not chances:
                    return tokens, EMPTY_DRAFT
                return tokens, Draft(torch.tensor(tokens[: len(chances)]), None,
                                     chances=torch.tensor(chances))
        return [], EMPTY_DRAFT

    def record(self, scored: int, accepted: int) -> None:
        """The verdict on the pending draft, of which the first `scored` tokens were scored."""
        for j in range(min(scored, accepted + 1)):  # positions the verifier looked at
            self.verdicts.add((self.pending, j), accepted > j)
        self.pending = 0


PRIOR = 0.5  # a weak prior for a match's first token (`ngrams.AcceptanceRecord`)


@register("lookup")
class PromptLookup(Drafter):
    """Proposes a match's continuation with each token's chance that it and all before it are
    accepted (this sequence's record for matches of this length), so that the step scores only
    the tokens that pay for their rows (`core.budget`): on kernels where rows are nearly free up
    to the depth cap, where each row costs its own arithmetic only what is likely to be kept."""

    @dataclass(frozen=True)
    class Options:
        ngram_max: int = option(5, "longest n-gram matched; longer matches count as this long")
        ngram_min: int = option(1, "shortest n-gram tried")

        def __post_init__(self) -> None:
            if not 1 <= self.ngram_min <= self.ngram_max:
                raise InvalidParameterError(f"need 1 <= ngram-min <= ngram-max, got "
                                            f"{self.ngram_min}, {self.ngram_max}")

    def __init__(self, ngram_max: int = 5, ngram_min: int = 1) -> None:
        self.ngram_max, self.ngram_min = ngram_max, ngram_min

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return [{"max_draft_depth": d, "ngram_max": n} for n in (3, 5) for d in (3, 5, 7, 10)]

    @classmethod
    def create(cls, model, options: Options) -> "PromptLookup":
        return cls(options.ngram_max, options.ngram_min)

    def start(self, seq) -> None:
        seq.drafter_state = MatchEvidence(NgramIndex(self.ngram_max, seq.config.reference))

    def propose(self, seq, budget: DraftBudget) -> Draft:
        if seq.drafter_state is None:
            self.start(seq)
        _, draft = seq.drafter_state.match(seq.context, self.ngram_max, self.ngram_min,
                                           min(budget.nodes, budget.depth), budget.min_chance)
        return draft

    def observe(self, seq, scored: int, accepted: int) -> None:
        evidence = seq.drafter_state
        if evidence is not None and scored:
            evidence.record(scored, accepted)

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(10, 10)  # the most a match drafts; the step's cost keeps what pays

    def describe(self) -> str:
        return f"lookup (n-gram {self.ngram_max}..{self.ngram_min})"
