"""`ar`: plain autoregressive decoding, the baseline. It drafts nothing, so each engine step is one
target forward that yields exactly one token."""

from __future__ import annotations

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from .registry import register


@register("ar")
class NoDrafter(Drafter):
    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return []  # the baseline every candidate is measured against, timed anyway

    @classmethod
    def create(cls, model, options) -> "NoDrafter":
        return cls()

    def propose(self, seq, budget: DraftBudget) -> Draft:
        return EMPTY_DRAFT

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(0, 0)
