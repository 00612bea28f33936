"""Constraints: a per-sequence rule on which token may come next (a grammar), applied as a stage of
verification, exactly as plain constrained decoding applies it at each step.

A `Constraint` is a matcher that advances along the tokens a sequence confirms. The engine uses it
three times a step (`core.masking`), for every drafter, chain or tree, batched or alone:
  1 propose — `constrain` cuts the draft nodes the rule forbids (they would cost a row and could
              never be accepted) and extends a deterministic chain by the span the rule forces
              (keys, quotes, braces: drafts that cost no drafter forward);
  3 verify  — `masks` gives each row of the draft its allowed set: row 0 the state after the
              context, row i + 1 the state after the path from the root to node i; the target's
              logits are set to -inf outside it (`allowed`) before the verifier sees them, and a
              sampled draft's q is renormalized over the same set;
  4 commit  — the confirmed tokens advance the matcher (`Constraint.accept`).
So greedy output stays token-identical to plain constrained greedy decoding and sampling keeps the
masked, renormalized distribution: the verifier compares p and q exactly as without a rule.

Masks are bitmasks: row r is `ceil(V / 32)` int32 words, token t allowed when bit t % 32 of word
t // 32 is set (the layout grammar engines fill).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch


def mask_words(vocab: int) -> int:
    """int32 words in one row of a bitmask over `vocab` tokens."""
    return (vocab + 31) // 32


class Constraint(ABC):
    """One sequence's matcher. Its state is the tokens accepted so far; the engine walks draft
    trees with `accept` and `rollback` and leaves it where the confirmed tokens put it."""

    @abstractmethod
    def fill(self, masks: torch.Tensor, row: int) -> None:
        """Write the allowed set of the current state into masks[row] ([R, words] int32)."""

    @abstractmethod
    def accept(self, token: int) -> bool:
        """Advance by `token`; False (and no change) when the rule forbids it here."""

    @abstractmethod
    def rollback(self, tokens: int) -> None:
        """Undo the last `tokens` accepted tokens."""

    def forced(self) -> list[int]:
        """Tokens the rule forces next, whatever the model says (none: no jump-forward)."""
        return []

    def take_forced(self, room: int | None = None) -> list[int]:
        """Accept the forced span (at most `room` tokens) as far as the matcher takes it (a
        grammar engine's forced tokenization may differ from what its matcher accepts); returns
        the tokens accepted."""
        taken = []
        for token in self.forced()[:room]:
            if not self.accept(token):
                break
            taken.append(token)
        return taken


class Grammar(ABC):
    """A compiled rule, shared by the requests that use it; each gets its own matcher."""

    @abstractmethod
    def matcher(self) -> Constraint:
        """A fresh matcher at the rule's start."""


def allowed(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[R, words] int32 bitmask -> [R, vocab] bool."""
    bits = bitmask.contiguous().numpy().view("uint8")  # numpy unpacks bits many times faster
    unpacked = np.unpackbits(bits, axis=-1, bitorder="little")[:, :vocab]
    return torch.from_numpy(unpacked).bool()


def renormalize(q: torch.Tensor, allowed_rows: torch.Tensor) -> torch.Tensor:
    """q [N, V] with each row restricted to its allowed set [N, V] bool and summed to 1 again."""
    q = q.masked_fill(~allowed_rows, 0.0)
    return q / q.sum(-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
