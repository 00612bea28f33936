"""`OnCache`: a target with one KV cache, for tests that score a single sequence."""

from __future__ import annotations

from typing import Sequence

import torch

from specdecode.core.tree import TokenTree
from specdecode.core.target import forward


class OnCache:
    def __init__(self, target) -> None:
        self.target, self.cache = target, target.new_cache()

    @property
    def length(self) -> int:
        return self.cache.length

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return forward(self.target, self.cache, tokens)

    def forward_layers(self, tokens: torch.Tensor, layers: Sequence[int]) -> torch.Tensor:
        return self.target.forward_layers(self.cache, tokens, layers)

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.target.prefill(self.cache, tokens)

    def hidden(self, tokens: torch.Tensor, tree: TokenTree | None = None) -> torch.Tensor:
        return self.target.hidden(self.cache, tokens, tree)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target.logits(hidden)

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)

    def compact(self, base: int, positions: Sequence[int]) -> None:
        self.cache.compact(base, positions)

    def reset(self) -> None:
        self.cache = self.target.new_cache()
