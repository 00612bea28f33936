"""Penalties and biases: the logits processor OpenAI's requests (presence and frequency penalties,
logit_bias) and vLLM's and llama.cpp's extensions (repetition penalty) ask for.

A penalty depends on the tokens before the position it scores, so, like a grammar
(`core.constraint`), it is a stage of verification: every row of a draft is processed with the
counts of the text before it (row 0: the confirmed text; row i + 1: that text and the path from
the root to node i), exactly as plain decoding processes each token's row. The verifier then sees
the processed logits, so greedy output stays token-identical to plain greedy decoding with the
same penalties and sampling keeps the processed distribution. A drafter need not apply them: its
proposals are verified against the processed rows whatever it proposed.

For token t, with c(t) its count in the generated text before the row and s(t) whether it occurs
in the prompt or that text, in vLLM's order:
  l(t) += bias(t)
  l(t)  = l(t) / r if l(t) > 0 else l(t) * r      when s(t)   (CTRL's repetition penalty r)
  l(t) -= frequency * c(t) + presence * [c(t) > 0]
With a `window` (llama.cpp's `repeat_last_n`), c(t) counts t among the last `window` tokens before
the row instead, prompt included, and s(t) is c(t) > 0: llama.cpp's penalties.
Only the columns of tokens seen so far or drafted this step can change, so a step touches those
columns of its rows, never the whole [N + 1, V] matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidParameterError
from .tree import TokenTree

PENALTY_RANGE = (-2.0, 2.0)  # OpenAI's range for presence and frequency penalties
BIAS_RANGE = (-100.0, 100.0)  # OpenAI's range for a logit bias


@dataclass(frozen=True)
class Penalties:
    """What a request asks; the defaults change nothing."""

    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0  # > 0; 1 is off, > 1 discourages repeats
    bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    window: int = 0  # > 0: counts over the last `window` tokens, prompt included (llama.cpp's)

    def __post_init__(self) -> None:
        low, high = PENALTY_RANGE
        for name in ("presence", "frequency"):
            if not low <= getattr(self, name) <= high:
                raise InvalidParameterError(f"{name} penalty must be in [{low:g}, {high:g}], "
                                            f"got {getattr(self, name)}")
        if not self.repetition > 0:
            raise InvalidParameterError(f"repetition penalty must be > 0, got {self.repetition}")
        if self.window < 0:
            raise InvalidParameterError(f"a penalty window must be >= 0, got {self.window}")
        low, high = BIAS_RANGE
        if any(not low <= value <= high for _, value in self.bias):
            raise InvalidParameterError(f"a logit bias must be in [{low:g}, {high:g}]")

    @property
    def active(self) -> bool:
        return bool(self.presence or self.frequency or self.repetition != 1.0 or self.bias)

    def check_vocabulary(self, vocab: int) -> None:
        if any(not 0 <= token < vocab for token, _ in self.bias):
            raise InvalidParameterError(f"logit bias token ids must be in [0, {vocab})")

    def penalize(self, logits: torch.Tensor, counts: torch.Tensor,
                 seen: torch.Tensor) -> torch.Tensor:
        """The formula, elementwise: logits (bias already added), the generated counts and
        whether each token was seen, all of one shape."""
        if self.repetition != 1.0:
            logits = torch.where(seen, torch.where(logits > 0, logits / self.repetition,
                                                   logits * self.repetition), logits)
        return logits - self.frequency * counts - self.presence * (counts > 0).float()


class PenaltyState:
    """One sequence's counts, advanced by the tokens it confirms."""

    def __init__(self, penalties: Penalties, prompt: list[int], vocab: int) -> None:
        penalties.check_vocabulary(vocab)
        self.penalties = penalties
        self.counts = torch.zeros(vocab)  # [V] occurrences in the generated text
        self.seen = torch.zeros(vocab, dtype=torch.bool)  # [V] in the prompt or generated
        self.seen[torch.tensor(prompt, dtype=torch.long)] = True
        self.bias = torch.zeros(vocab)  # [V]
        for token, value in penalties.bias:
            self.bias[token] = value
        self.biased = torch.tensor(sorted({t for t, _ in penalties.bias}), dtype=torch.long)
        # a window's tokens: the last `window` of the prompt and the confirmed text
        self.recent = list(prompt[-penalties.window:]) if penalties.window else []

    def accept(self, tokens: list[int]) -> None:
        ids = torch.tensor(tokens, dtype=torch.long)
        self.counts.index_add_(0, ids, torch.ones(len(tokens)))
        self.seen[ids] = True
        if self.penalties.window:
            self.recent = (self.recent + list(tokens))[-self.penalties.window:]

    def apply(self, logits: torch.Tensor, tree: TokenTree) -> torch.Tensor:
        """logits [N + 1, V] of the rows [root, nodes] -> processed logits [N + 1, V], row r
        with the counts of the confirmed text and the path to it."""
        if self.penalties.window:
            return self._apply_windowed(logits, tree)
        columns = torch.unique(torch.cat([self.seen.nonzero().flatten(), self.biased,
                                          tree.tokens]))  # [C] the only columns that change
        # [N + 1, N]: node j is on row r's path; [N, C]: node j's token is column c
        on_path = tree.row_ancestors[:, 1:].float()
        is_column = (tree.tokens[:, None] == columns[None, :]).float()
        counts = self.counts[columns] + on_path @ is_column  # [N + 1, C]
        seen = self.seen[columns] | (counts > 0)
        out = logits.clone()
        out[:, columns] = self.penalties.penalize(logits[:, columns] + self.bias[columns],
                                                  counts, seen)
        return out

    def _apply_windowed(self, logits: torch.Tensor, tree: TokenTree) -> torch.Tensor:
        """`apply` with a window: row r counts the last `window` tokens of the confirmed text and
        the path to it (a tree's nodes come after their parents, so a path is in node order)."""
        window = self.penalties.window
        columns = torch.unique(torch.cat([torch.tensor(self.recent, dtype=torch.long),
                                          self.biased, tree.tokens]))  # [C]
        column = {int(t): i for i, t in enumerate(columns.tolist())}
        on_path = tree.row_ancestors[:, 1:]  # [N + 1, N]
        counts = torch.zeros(on_path.shape[0], columns.shape[0])  # [N + 1, C]
        for r in range(on_path.shape[0]):
            path = tree.tokens[on_path[r]].tolist()
            kept = window - len(path)
            tokens = (self.recent[-kept:] if kept > 0 else []) + path[-window:]
            if tokens:
                counts[r] = torch.bincount(torch.tensor([column[t] for t in tokens]),
                                           minlength=columns.shape[0]).float()
        out = logits.clone()
        out[:, columns] = self.penalties.penalize(logits[:, columns] + self.bias[columns],
                                                  counts, counts > 0)
        return out

