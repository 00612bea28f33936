"""The Target protocol and its transformers backend.

A target scores new tokens against its own KV cache and owns that cache. Drafters and the
verifier never reach inside it: they see `forward`, `rollback`, `length` and `reset`.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch


class Target(Protocol):
    vocab_size: int
    max_length: int  # context window in tokens
    length: int  # tokens currently in the KV cache
    num_layers: int

    def forward(self, tokens: torch.Tensor, layers: Sequence[int] | None = None) -> torch.Tensor:
        """Append tokens ([T] int64) at positions length..length+T; return logits [T, V].

        `layers` runs only those decoder layers (self-speculative drafting); backends that cannot do
        that raise NotImplementedError."""
        ...

    def prefill(self, tokens: torch.Tensor) -> None:
        """Append tokens ([T] int64) without computing logits (the prompt: only its KV is needed)."""
        ...

    def rollback(self, length: int) -> None:
        """Drop every cached position >= length."""
        ...

    def reset(self) -> None:
        """Empty the cache for a new request."""
        ...


class HFTarget:
    """Any transformers causal LM, with a `DynamicCache` cropped on rollback.

    The fallback for architectures the native path does not cover."""

    def __init__(self, model: torch.nn.Module) -> None:
        from transformers import DynamicCache

        self.model = model.eval()
        config = model.config
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_length = getattr(config, "max_position_embeddings", 2048)
        self.num_layers = config.num_hidden_layers
        self._new_cache = lambda: DynamicCache(config=config)
        self.reset()

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self.cache = self._new_cache()
        self._length = 0

    def forward(self, tokens: torch.Tensor, layers: Sequence[int] | None = None) -> torch.Tensor:
        if layers is not None:
            raise NotImplementedError("the transformers backend cannot skip layers")
        return self._run(tokens, keep=0)  # transformers: logits_to_keep=0 means all positions

    def prefill(self, tokens: torch.Tensor) -> None:
        self._run(tokens, keep=1)  # the cheapest transformers allows

    def _run(self, tokens: torch.Tensor, keep: int) -> torch.Tensor:
        positions = torch.arange(self._length, self._length + tokens.shape[0])
        with torch.inference_mode():
            out = self.model(input_ids=tokens[None], position_ids=positions[None],
                             cache=self.cache, use_cache=True, logits_to_keep=keep)
        self._length += tokens.shape[0]
        return out.logits[0]  # [T or keep, V]

    def rollback(self, length: int) -> None:
        assert 0 <= length <= self._length, (length, self._length)
        if length < self._length:
            self.cache.crop(length - self._length)  # transformers 5: a negative count drops
        self._length = length
