"""Static KV cache: preallocated key/value tensors plus a length, one per sequence.

Rollback is moving the length back: entries past it are simply overwritten by the next forward
(as in gpt-fast), and nothing reads past the length, so new memory is never cleared. Capacity
grows by doubling when a forward would overflow it, so short prompts do not pay for the whole
context window up front.
"""

from __future__ import annotations

from typing import Sequence

import torch


class StaticKVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        capacity: int,
        max_capacity: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        self.shape = (num_layers, num_kv_heads, head_dim)
        self.max_capacity = max_capacity
        self.dtype, self.device = dtype, device
        self.length = 0
        self._allocate(min(capacity, max_capacity))

    def _allocate(self, capacity: int) -> None:
        layers, heads, dim = self.shape
        keys = torch.empty(layers, heads, capacity, dim, dtype=self.dtype, device=self.device)
        values = torch.empty_like(keys)
        if hasattr(self, "keys"):  # keep what is cached when growing
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values  # [layers, kv_heads, capacity, head_dim]

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def reserve(self, new_tokens: int) -> None:
        """Make room for `new_tokens` more entries after `length`."""
        needed = self.length + new_tokens
        if needed > self.max_capacity:
            raise ValueError(f"KV cache overflow: {needed} > {self.max_capacity} positions")
        if needed > self.capacity:
            self._allocate(min(self.max_capacity, max(needed, 2 * self.capacity)))

    def pad(self, length: int) -> None:
        """Grow to `length` entries of zeros, which no model computed: for timing a step after
        that many cached tokens (its cost does not depend on what the entries hold) without a
        prefill, which takes 40 s for 1024 tokens of a 1.5B model on a slow CPU. Never for
        decoding."""
        if length < self.length:
            raise ValueError(f"cannot pad a cache of {self.length} entries to {length}")
        self.reserve(length - self.length)
        with torch.inference_mode():
            self.keys[:, :, self.length:length] = 0
            self.values[:, :, self.length:length] = 0
        self.length = length

    def compact(self, base: int, positions: Sequence[int]) -> None:
        """Move the entries at `positions` (ascending, each >= base) to base, base + 1, .. and
        forget everything after them: a tree's accepted path packed behind the prefix."""
        if not all(base <= p < self.length for p in positions):
            raise ValueError(f"cannot keep positions {list(positions)} of a cache of "
                             f"{self.length} entries behind {base}")
        kept = base + len(positions)
        if list(positions) != list(range(base, kept)):  # a chain's prefix needs no copy
            index = torch.tensor(positions, dtype=torch.long)
            # the cache may have grown inside a forward's inference mode: write in it too
            with torch.inference_mode():
                self.keys[:, :, base:kept] = self.keys[:, :, index]  # indexing copies first
                self.values[:, :, base:kept] = self.values[:, :, index]
        self.rollback(kept)

    def copy(self) -> "StaticKVCache":
        """A copy sized to the entries (a kept prompt's holds no room it will not use; a copy
        that decodes on grows as any cache does)."""
        out = StaticKVCache(*self.shape, max(self.length, 1), self.max_capacity, self.dtype,
                            self.device)
        with torch.inference_mode():  # the forwards' own mode, which wrote these entries
            out.keys[:, :, : self.length] = self.keys[:, :, : self.length]
            out.values[:, :, : self.length] = self.values[:, :, : self.length]
        out.length = self.length
        return out

    @property
    def nbytes(self) -> int:
        """The memory its tensors hold."""
        return self.keys.nbytes + self.values.nbytes

    def state(self) -> dict[str, torch.Tensor]:
        """Its entries, for saving: keys and values [layers, kv_heads, length, head_dim]."""
        return {"keys": self.keys[:, :, : self.length], "values": self.values[:, :, : self.length]}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        """Hold the entries of `state` (`state()` of a cache of this shape and dtype) instead of
        its own."""
        keys, values = state["keys"], state["values"]
        layers, heads, dim = self.shape
        if (keys.shape[:2] != (layers, heads) or keys.shape[3] != dim
                or values.shape != keys.shape or keys.dtype != self.dtype):
            raise ValueError(f"saved entries {tuple(keys.shape)} {keys.dtype} do not fit a cache "
                             f"of {self.shape} {self.dtype}")
        self.length = 0
        self.reserve(keys.shape[2])
        with torch.inference_mode():
            self.keys[:, :, : keys.shape[2]] = keys
            self.values[:, :, : keys.shape[2]] = values
        self.length = keys.shape[2]

    def rollback(self, length: int) -> None:
        """Forget every entry at position >= length (a rollback never grows the cache: the
        entries past its length hold nothing valid)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll a cache of {self.length} entries back to {length}")
        self.length = length
