"""`ar`: plain autoregressive decoding, the baseline. It drafts nothing, so each engine step is one
target forward that yields exactly one token."""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Draft, Drafter, DrafterOptions, register


@register("ar")
class NoDrafter(Drafter):
    @classmethod
    def create(cls, target, options: DrafterOptions) -> "NoDrafter":
        return cls()

    def propose(self, context: torch.Tensor, k: int, params: SamplingParams, generator) -> Draft:
        return EMPTY_DRAFT

    @property
    def default_k(self) -> int:
        return 0
