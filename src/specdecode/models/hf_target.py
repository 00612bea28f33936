"""The transformers backend: any transformers causal LM as a `core.target.Target`."""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from ..core.target import hidden_each
from ..core.tree import TokenTree


class HFCache:
    """A transformers `DynamicCache` with a length; rollback crops it (chains only)."""

    def __init__(self, cache) -> None:
        self.cache, self.length = cache, 0

    def rollback(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll a cache of {self.length} entries back to {length}")
        if length < self.length:
            self.cache.crop(length - self.length)  # transformers 5: a negative count drops
        self.length = length

    def copy(self) -> "HFCache":
        out = HFCache(copy.deepcopy(self.cache))
        out.length = self.length
        return out

    def compact(self, base: int, positions: Sequence[int]) -> None:
        if list(positions) != list(range(base, base + len(positions))):
            raise NotImplementedError("the transformers backend verifies chains only, not trees")
        self.rollback(base + len(positions))


class HFTarget:
    """Any transformers causal LM: the fallback for architectures the native path does not
    cover, and the backend for GPUs."""

    scores_trees = False  # transformers' attention takes a causal mask only
    row_invariant = False  # its kernels' results may change with a call's rows

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model.eval()
        config = model.config
        self.config = config
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_length = getattr(config, "max_position_embeddings", 2048)
        first = next(model.parameters())
        self.device, self.weights = first.device, str(first.dtype).removeprefix("torch.")

    def new_cache(self) -> HFCache:
        from transformers import DynamicCache

        return HFCache(DynamicCache(config=self.config))

    def hidden(self, cache: HFCache, tokens: torch.Tensor,
               tree: TokenTree | None = None) -> torch.Tensor:
        if tree is not None and not tree.is_chain:
            raise NotImplementedError("the transformers backend verifies chains only, not trees")
        tokens = tokens.to(self.device)
        positions = torch.arange(cache.length, cache.length + tokens.shape[0], device=self.device)
        with torch.inference_mode():
            out = self.model.get_decoder()(input_ids=tokens[None], position_ids=positions[None],
                                           cache=cache.cache, use_cache=True)
        cache.length += tokens.shape[0]
        return out.last_hidden_state[0]  # [T, H]

    def hidden_batch(self, steps) -> list[torch.Tensor]:
        return hidden_each(self, steps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.config, "final_logit_softcapping", None)  # Gemma 2
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def prefill(self, cache: HFCache, tokens: torch.Tensor) -> torch.Tensor:
        return self.hidden(cache, tokens)

    def describe(self) -> str:
        return f"transformers on {self.device.type}"

    def weight_bytes(self) -> int:
        embed = self.model.get_input_embeddings().weight
        tied = self.model.get_output_embeddings().weight is embed
        return sum(p.numel() * p.element_size() for p in self.model.parameters()
                   if p is not embed or tied)
