"""Token trees: the shape of every draft.

A draft of N tokens is a tree hanging from the *root*, the pending context token that the next
target forward feeds first. Node i (0-based) holds token `tokens[i]` and has parent `parents[i]`:
-1 is the root, otherwise an earlier node (parents[i] < i, so nodes are in topological order and
siblings keep the drafter's order of preference). A chain is the tree with parents [-1, 0, 1, ...].

The target scores the root and all nodes in one forward over the N + 1 *rows* [root, node 0, ...,
node N-1]: row r sees the cached prefix and its own ancestors, and sits at position
start + depth(r), exactly where it would sit had its branch been decoded alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

ROOT = -1  # parent index of the first-level nodes


@dataclass(frozen=True, eq=False)
class TokenTree:
    tokens: torch.Tensor  # [N] int64
    parents: torch.Tensor  # [N] int64, ROOT or an earlier node index

    def __post_init__(self) -> None:
        # a drafter's tree, checked in every build mode: the verifier and the attention masks
        # index by these parents
        n = self.tokens.shape[0]
        if not self.tokens.shape == self.parents.shape == (n,):
            raise ValueError(f"a tree's tokens {tuple(self.tokens.shape)} and parents "
                             f"{tuple(self.parents.shape)} must be one-dimensional, of one length")
        if not (bool((self.parents < torch.arange(n)).all())
                and bool((self.parents >= ROOT).all())):
            raise ValueError("parents must point to the root or an earlier node: "
                             f"{self.parents.tolist()}")

    @classmethod
    def chain(cls, tokens: torch.Tensor) -> "TokenTree":
        """tokens: [N] -> the one-branch tree x_1 <- x_2 <- ... (parents -1, 0, 1, ...)."""
        return cls(tokens, torch.arange(tokens.shape[0]) - 1)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @cached_property
    def is_chain(self) -> bool:
        return bool((self.parents == torch.arange(len(self)) - 1).all())

    @cached_property
    def depths(self) -> torch.Tensor:
        """[N] int64: 1 for children of the root, parent's depth + 1 below."""
        depths = [0] * len(self)
        for i, parent in enumerate(self.parents.tolist()):
            depths[i] = 1 if parent == ROOT else depths[parent] + 1
        return torch.tensor(depths, dtype=torch.long)

    @property
    def depth(self) -> int:
        """Depth of the deepest node (0 for an empty tree)."""
        return int(self.depths.max()) if len(self) else 0

    @cached_property
    def children(self) -> list[list[int]]:
        """children[r] for row r = 0 (root) .. N: node indices, in the drafter's order."""
        rows: list[list[int]] = [[] for _ in range(len(self) + 1)]
        for i, parent in enumerate(self.parents.tolist()):
            rows[parent + 1].append(i)
        return rows

    def row_positions(self, start: int) -> torch.Tensor:
        """[N + 1] cache positions of the rows [root, nodes]: start + depth."""
        return start + torch.cat([torch.zeros(1, dtype=torch.long), self.depths])

    @cached_property
    def row_ancestors(self) -> torch.Tensor:
        """[N + 1, N + 1] bool: entry (r, c) is True when row c is row r or one of its ancestors.

        This is the tree-attention mask over the rows (lower-triangular for a chain)."""
        rows = len(self) + 1
        mask = torch.zeros(rows, rows, dtype=torch.bool)
        mask[0, 0] = True
        for i, parent in enumerate(self.parents.tolist()):
            mask[i + 1] = mask[parent + 1]
            mask[i + 1, i + 1] = True
        return mask

    def attention(self, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary positions [N + 1] and attention mask [N + 1, start + N + 1] (True = may attend)
        for scoring the rows behind a cache of `start` entries."""
        mask = torch.ones(len(self) + 1, start + len(self) + 1, dtype=torch.bool)
        mask[:, start:] = self.row_ancestors  # every row sees the whole cached prefix
        return self.row_positions(start), mask

    def path_tokens(self, path: list[int]) -> list[int]:
        return self.tokens[path].tolist() if path else []
