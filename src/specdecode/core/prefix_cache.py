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

Bounded by `max_bytes` of kept caches over all prompts; the least recently used go first. With
a `store` (`core.prompt_store`), every kept prompt is saved to disk as well, and a prompt that
starts longer like a saved one than like any in memory is read from there: after a restart, the
first request with a known system prompt reads it from disk.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from .prompt_store import PromptStore
from .target import SavableCache


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """The length of the longest common prefix of two token sequences."""
    n = min(a.shape[0], b.shape[0])
    differ = (a[:n] != b[:n]).nonzero()
    return int(differ[0]) if differ.numel() else n


class PrefixCache:
    def __init__(self, max_bytes: int, store: PromptStore | None = None) -> None:
        if max_bytes < 1:
            raise ValueError(f"a prefix cache needs room for >= 1 byte, got {max_bytes}")
        self.max_bytes, self.store = max_bytes, store
        self.kept: OrderedDict[int, tuple[torch.Tensor, SavableCache]] = OrderedDict()
        self.held = 0  # bytes over all kept caches
        self.added = 0  # keys of the kept, in the order they came

    def keep(self, tokens: torch.Tensor, cache: SavableCache) -> None:
        """Keep a copy of `cache`, which holds exactly `tokens` [n] (a prompt just read)."""
        n = tokens.shape[0]
        if n == 0 or cache.length != n:
            return
        for key, (kept, _) in list(self.kept.items()):
            if kept.shape[0] >= n and torch.equal(kept[:n], tokens):
                self.kept.move_to_end(key)  # held already (in it or in a longer one)
                return
            if torch.equal(kept, tokens[: kept.shape[0]]):
                self._drop(key)  # a prefix of the new one: it serves every lookup it served
        copy = cache.copy()
        if self.store is not None:
            self.store.save(tokens, copy)  # never changed: lookups hand out copies of it
        if copy.nbytes <= self.max_bytes:  # a larger one would only push every other out
            self._hold(tokens.clone(), copy)

    def lookup(self, prompt: torch.Tensor) -> tuple[int, SavableCache | None]:
        """The longest prefix of `prompt` [n] (the positions a prefill would write) that a kept
        cache holds, and a copy of that cache cut to it; (0, None) when none starts alike."""
        best, best_key = 0, None
        for key, (kept, _) in self.kept.items():
            common = common_prefix(kept, prompt)
            if common > best:
                best, best_key = common, key
        if self.store is not None:
            saved, path = self.store.best(prompt)
            loaded = self.store.load(path) if saved > best else None
            if loaded is not None:
                tokens, cache = loaded
                if cache.nbytes > self.max_bytes:  # too large to hold: this lookup's only
                    cache.rollback(saved)
                    return saved, cache
                best, best_key = saved, self._hold(tokens, cache)
        if best_key is None:
            return 0, None
        self.kept.move_to_end(best_key)
        cache = self.kept[best_key][1].copy()
        cache.rollback(best)
        return best, cache

    def _hold(self, tokens: torch.Tensor, cache: SavableCache) -> int:
        """Hold a cache (within the budget) in memory, the least recently used dropped to make
        room; returns its key."""
        self.added += 1
        self.kept[self.added] = (tokens, cache)
        self.held += cache.nbytes
        while self.held > self.max_bytes:
            self._drop(next(iter(self.kept)))
        return self.added

    def _drop(self, key: int) -> None:
        _, cache = self.kept.pop(key)
        self.held -= cache.nbytes
