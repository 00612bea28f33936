"""`ar`: plain autoregressive decoding, the baseline. It drafts nothing, so each engine step is one
target forward that yields exactly one token."""

from __future__ import annotations

from .base import EMPTY_DRAFT, Draft, Drafter, register


@register("ar")
class NoDrafter(Drafter):
    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return []  # the baseline every candidate is measured against, timed anyway

    @classmethod
    def create(cls, model, options) -> "NoDrafter":
        return cls()

    def propose(self, seq, k: int) -> Draft:
        return EMPTY_DRAFT

    @property
    def default_k(self) -> int:
        return 0
