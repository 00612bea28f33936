"""The Target protocol and its transformers backend.

A target scores new tokens against its own KV cache and owns that cache. Drafters and the
verifier never reach inside it: they see `hidden`/`logits`/`forward`, `compact`/`rollback`,
`length` and `reset`. Hidden states are the final-normed features the LM head reads (EAGLE and
Medusa heads draft from them).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from ..tree import TokenTree


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

    def hidden(self, tokens: torch.Tensor, tree: TokenTree | None = None) -> torch.Tensor:
        """Append tokens ([T] int64) and return their hidden states [T, H]. With a tree the tokens
        are its rows [root, nodes], each attending only to the cache and its ancestors."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head: hidden [T, H] -> logits [T, V] (float32)."""
        ...

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append tokens ([T] int64) without computing logits (the prompt: only its KV is needed);
        returns their hidden states [T, H]."""
        ...

    def compact(self, base: int, positions: Sequence[int]) -> None:
        """Keep the cached entries at `positions` (ascending, >= base), packed to base, base + 1..;
        drop everything else from base on."""
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
        return self.logits(self.hidden(tokens))

    def hidden(self, tokens: torch.Tensor, tree: TokenTree | None = None) -> torch.Tensor:
        if tree is not None and not tree.is_chain:
            raise NotImplementedError("the transformers backend verifies chains only, not trees")
        positions = torch.arange(self._length, self._length + tokens.shape[0])
        with torch.inference_mode():
            out = self.model.get_decoder()(input_ids=tokens[None], position_ids=positions[None],
                                           cache=self.cache, use_cache=True)
        self._length += tokens.shape[0]
        return out.last_hidden_state[0]  # [T, H]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)  # Gemma 2
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.hidden(tokens)

    def compact(self, base: int, positions: Sequence[int]) -> None:
        if list(positions) != list(range(base, base + len(positions))):
            raise NotImplementedError("the transformers backend verifies chains only, not trees")
        self.rollback(base + len(positions))

    def rollback(self, length: int) -> None:
        assert 0 <= length <= self._length, (length, self._length)
        if length < self._length:
            self.cache.crop(length - self._length)  # transformers 5: a negative count drops
        self._length = length
