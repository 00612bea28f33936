"""The constraint stage of a step (`core.constraint` says what a constraint is and why this is
exact): a draft cut to what the rule allows and extended by what it forces, and the allowed set
of every row of a draft tree."""

from __future__ import annotations

import torch

from .constraint import Constraint, mask_words
from .drafter import Draft
from .tree import ROOT, TokenTree


class _Walk:
    """The matcher moved between the nodes of a draft tree in any topological order: `to(node)`
    leaves it after the path root .. node, accepting or rolling back only what differs."""

    def __init__(self, constraint: Constraint, tree: TokenTree) -> None:
        self.constraint, self.tokens = constraint, tree.tokens.tolist()
        self.parents = tree.parents.tolist()
        self.path: list[int] = []  # the nodes whose tokens the matcher holds, root first

    def ancestry(self, node: int) -> list[int]:
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def to(self, node: int) -> bool:
        """Move to `node`; False when the rule forbids its token (the matcher then stands at
        its parent)."""
        want = self.ancestry(node)
        same = 0
        while same < min(len(want), len(self.path)) and want[same] == self.path[same]:
            same += 1
        if len(self.path) > same:
            self.constraint.rollback(len(self.path) - same)
            del self.path[same:]
        for n in want[same:]:
            if not self.constraint.accept(self.tokens[n]):
                return False
            self.path.append(n)
        return True

    def home(self) -> None:
        """Back to the root (where the walk started)."""
        if self.path:
            self.constraint.rollback(len(self.path))
            self.path = []


def constrain(constraint: Constraint, draft: Draft) -> tuple[Draft, int]:
    """The draft without the nodes the rule forbids (a forbidden node's subtree goes with it),
    and a deterministic chain (q None) extended by the span the rule forces where it ends, so
    forced tokens are drafted at no drafter cost; an empty draft becomes the forced span. Returns
    (draft, forced nodes added). The matcher ends where it started.

    Cutting is exact for sampled drafts too: the verifier renormalizes a node's q over the
    allowed set (`renormalize`), and a node drawn from q and kept only when allowed is a draw
    from that renormalized q. Forced tokens extend only deterministic drafts: appended to a
    sampled chain they would make the draw a mixture whose q the verifier does not know."""
    chain = draft.q is None and draft.tree.is_chain
    walk, keep, cut = _Walk(constraint, draft.tree), [], set()
    for i, parent in enumerate(walk.parents):
        if parent in cut or not walk.to(i):
            cut.add(i)
        else:
            keep.append(i)
    # a chain's walk stands at its last kept node: the forced span continues from there
    forced = constraint.take_forced() if chain else []
    constraint.rollback(len(forced))
    walk.home()
    if len(keep) != len(draft):
        draft = draft.keep(keep)
    return (draft.extended(forced), len(forced)) if forced else (draft, 0)


def masks(constraint: Constraint, tree: TokenTree, vocab: int) -> torch.Tensor:
    """[N + 1, words] int32: the allowed set of each row of the draft tree (row 0 after the
    context, row i + 1 after the path to node i). Every node must be allowed on its path
    (`constrain` has cut the rest). The matcher ends where it started."""
    out = torch.empty(len(tree) + 1, mask_words(vocab), dtype=torch.int32)
    constraint.fill(out, 0)
    walk = _Walk(constraint, tree)
    for i in range(len(tree)):
        if not walk.to(i):
            raise RuntimeError(f"draft node {i} is forbidden by the constraint")
        constraint.fill(out, i + 1)
    walk.home()
    return out
