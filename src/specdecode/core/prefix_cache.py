"""Prompts' caches kept for the prompts that come next and start the same way (a conversation's
next turn holds the last turn's prompt; many requests share a system prompt or tool list): a new
prompt's longest common prefix with a kept prompt is copied from that prompt's cache instead of
prefilled, and only the rest is read.

Lossless by the prefill rule (`engine.PREFILL_CHUNK`): a prompt's cache is the same however its
prefill is split, so a kept prefix followed by a prefill of the rest is exactly the cache a whole
prefill makes, and what follows is what would have followed. That is why only prefills are kept
(a prompt's cache once it has been read), never the entries of generated tokens, which came from
verification steps; and why a batch keeps none on a target whose kernels do not compute a row
alike however calls are split (`Target.row_invariant`). Drafters that read the target's features
of the prompt (EAGLE, Medusa) and requests for prompt log-probabilities need the prefill's rows,
so they never take a kept prefix (`Batch.join` checks).

Bounded by `max_tokens` kept positions over all prompts; the least recently used go first.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .target import KVCache


class PrefixCache:
    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ValueError(f"a prefix cache needs room for >= 1 token, got {max_tokens}")
        self.max_tokens = max_tokens
        self.kept: OrderedDict[int, tuple[torch.Tensor, KVCache]] = OrderedDict()
        self.held = 0  # positions over all kept caches
        self.added = 0  # keys of the kept, in the order they came

    def keep(self, tokens: torch.Tensor, cache: KVCache) -> None:
        """Keep a copy of `cache`, which holds exactly `tokens` [n] (a prompt just read)."""
        n = tokens.shape[0]
        if not 0 < n <= self.max_tokens or cache.length != n:
            return
        for key, (kept, _) in list(self.kept.items()):
            if kept.shape[0] >= n and torch.equal(kept[:n], tokens):
                self.kept.move_to_end(key)  # held already (in it or in a longer one)
                return
            if torch.equal(kept, tokens[: kept.shape[0]]):
                self._drop(key)  # a prefix of the new one: it serves every lookup it served
        self.added += 1
        self.kept[self.added] = (tokens.clone(), cache.copy())
        self.held += n
        while self.held > self.max_tokens:
            self._drop(next(iter(self.kept)))

    def lookup(self, prompt: torch.Tensor) -> tuple[int, KVCache | None]:
        """The longest prefix of `prompt` [n] (the positions a prefill would write) that a kept
        cache holds, and a copy of that cache cut to it; (0, None) when none starts alike."""
        best, best_key = 0, None
        for key, (kept, _) in self.kept.items():
            n = min(kept.shape[0], prompt.shape[0])
            differ = (kept[:n] != prompt[:n]).nonzero()
            common = int(differ[0]) if differ.numel() else n
            if common > best:
                best, best_key = common, key
        if best_key is None:
            return 0, None
        self.kept.move_to_end(best_key)
        cache = self.kept[best_key][1].copy()
        cache.rollback(best)
        return best, cache

    def _drop(self, key: int) -> None:
        tokens, _ = self.kept.pop(key)
        self.held -= tokens.shape[0]
