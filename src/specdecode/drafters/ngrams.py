"""What the training-free drafters (`lookup`, `suffix`, and `draft`'s n-gram matches) draft from:
one n-gram index of token streams, and one record of how their drafts fared.

`NgramIndex` keeps, for every n-gram (n = 1..n_max), the tokens that followed it, how often and
how recently (suffix's candidates, most frequent first), and, in the one stream `extend` grows,
where it last started (lookup's match: what followed the latest earlier occurrence), so a step
finds either in O(n + k) rather than scanning the context (a tensor scan cost ~0.2 ms a step,
most of a drafting sequence's Python time in a busy batch).

`AcceptanceRecord` counts, per kind of draft token (lookup: n-gram length and position; suffix:
source, length and rank), how often one was tried and accepted, and estimates its acceptance rate
with PRIOR_WEIGHT pseudo-observations of a prior, so that a sequence's own verdicts soon
outweigh the prior.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Hashable

import torch

Key = tuple[int, ...]
PRIOR_WEIGHT = 2.0


class NgramIndex:
    """The n-grams of one growing stream (`extend`) and of any others counted in or out
    (`count`: a bounded memory of earlier outputs): key -> {next token: [count, stamp]}."""

    def __init__(self, n_max: int, before: Sequence[int] = ()) -> None:
        """`before`: tokens the stream may copy from as if they had come first (a reference
        text); a match there is taken only where the stream itself has none later."""
        self.n_max = n_max
        self.tokens: list[int] = list(before)  # `before`, then the stream `extend` grows
        self.before = len(self.tokens)
        self.latest: dict[Key, int] = {}  # its n-grams with a continuation: where each last began
        self.next: dict[Key, dict[int, list[int]]] = {}
        self.clock = 0
        self._count(self.tokens, 1, 1, stream=True)

    def extend(self, context: torch.Tensor) -> None:
        """context: [L] int64, the stream so far (what was seen, then new tokens)."""
        seen = len(self.tokens) - self.before
        self.tokens += context[seen:].tolist()
        self._count(self.tokens, self.before + seen, 1, stream=True)

    def count(self, tokens: list[int], start: int = 1, sign: int = 1) -> None:
        """Add (sign 1) or remove (-1) the continuation at each position >= start of another
        stream `tokens` (n-grams never span two calls' streams)."""
        self._count(tokens, start, sign, stream=False)

    def _count(self, tokens: list[int], start: int, sign: int, stream: bool) -> None:
        for i in range(max(start, 1), len(tokens)):
            self.clock += 1
            token = tokens[i]
            for n in range(1, min(self.n_max, i) + 1):
                key = tuple(tokens[i - n : i])
                if stream:
                    self.latest[key] = i - n
                counts = self.next.setdefault(key, {})
                entry = counts.setdefault(token, [0, 0])
                entry[0] += sign
                entry[1] = self.clock
                if entry[0] <= 0:
                    del counts[token]
                    if not counts:
                        del self.next[key]

    def continuation(self, n: int, k: int) -> list[int]:
        """At most k tokens of the stream after the latest earlier occurrence of its last n
        tokens ([] when there is none)."""
        if len(self.tokens) <= n:
            return []
        start = self.latest.get(tuple(self.tokens[-n:]))
        if start is None:
            return []
        end = start + n + k
        if start + n <= self.before:  # a match in `before` continues to its end, not past it
            end = min(end, self.before)
        return self.tokens[start + n : end]

    def continuations(self, suffix: Key) -> tuple[int, list[int]]:
        """(n, tokens): the continuations of the longest n-gram ending `suffix` that was seen,
        most frequent first (ties: most recent first); (0, []) when none was."""
        for n in range(min(len(suffix), self.n_max), 0, -1):
            counts = self.next.get(suffix[len(suffix) - n :])
            if counts:
                return n, sorted(counts, key=lambda t: counts[t], reverse=True)
        return 0, []


class AcceptanceRecord:
    """Per kind of draft token: how often one was tried and how often accepted."""

    def __init__(self) -> None:
        self.tried: dict[Hashable, float] = {}
        self.accepted: dict[Hashable, float] = {}

    def add(self, kind: Hashable, accepted: bool) -> None:
        self.tried[kind] = self.tried.get(kind, 0.0) + 1
        if accepted:
            self.accepted[kind] = self.accepted.get(kind, 0.0) + 1

    def rate(self, kind: Hashable, prior: float) -> float:
        """The acceptance rate of `kind`: its verdicts with PRIOR_WEIGHT pseudo-observations of
        `prior`."""
        tried, hit = self.tried.get(kind, 0.0), self.accepted.get(kind, 0.0)
        return (hit + PRIOR_WEIGHT * prior) / (tried + PRIOR_WEIGHT)
