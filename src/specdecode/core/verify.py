"""The verifier: pure functions of tensors that decide which draft tokens the target keeps.

Vocabulary (used everywhere in this project):
- *accepted*: draft tokens kept, a path from the root of the draft tree (a prefix of a chain);
- *recovered*: the token sampled from the residual distribution after a rejection;
- *bonus*: the token sampled from p when the accepted path ends at a leaf of the draft.
Every verification yields the accepted tokens plus exactly one recovered-or-bonus token, so one
target forward confirms between 1 and depth + 1 tokens.

Notation as in Leviathan et al. 2023 / Chen et al. 2023: x the drafted tokens, q the draft
distribution each was sampled from, p the target distribution at the same position (both already
processed by `sampling.probabilities`). Drafts are `tree.TokenTree`s; a chain is the one-branch case
of the same code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .sampling import greedy_tokens, sample, sample_at
from .tree import TokenTree


@dataclass(frozen=True)
class Verdict:
    path: tuple[int, ...]  # accepted draft nodes, root's child first (a chain: 0, 1, .., a - 1)
    token: int  # the recovered token (after a rejection) or the bonus token (a leaf was reached)

    @property
    def accepted(self) -> int:
        return len(self.path)


def verify_greedy(tree: TokenTree, target_logits: torch.Tensor) -> Verdict:
    """Greedy verification: from the root, step to the child whose token is argmax p of the current
    row, while there is one; then emit that argmax (recovered, or bonus at a leaf). The path is the
    longest one whose tokens all equal the target's argmax, so the output equals plain greedy
    decoding token for token.

    target_logits: [N + 1, V], rows [root, node 0, ..., node N-1] (see `tree.TokenTree`)
    """
    assert target_logits.shape[0] == len(tree) + 1, (len(tree), target_logits.shape)
    best = greedy_tokens(target_logits)  # [N + 1]
    return _walk(tree, lambda row, depth: best[row])


def verify_seeded(tree: TokenTree, p: torch.Tensor, uniform: Callable[[int], float]) -> Verdict:
    """Verification of a seeded request: the target draws its own token at each row it reaches,
    by inverting p's cumulative distribution at `uniform(depth)` (the root's row is depth 0: the
    uniform of the position that row predicts, `sampling.keyed_uniform`), and the path steps to
    the child holding that token, as `verify_greedy` steps to the argmax's. Every emitted token is
    plain sampling's draw at its position, so the output is exactly plain decoding's with the same
    seed, whatever was drafted. A deterministic draft token x is kept with probability p(x) (and
    siblings with their sum), as in `verify_sampling`; a token drawn from q is kept with the
    chance that both draws agree, which is highest when the drafter inverts q at the same uniform
    (`SequenceState.draw`).

    p: [N + 1, V] rows as the tree's"""
    assert p.shape[0] == len(tree) + 1, (len(tree), p.shape)
    return _walk(tree, lambda row, depth: int(sample_at(p[row], uniform(depth))))


def _walk(tree: TokenTree, target_token: Callable[[int, int], int]) -> Verdict:
    """From the root, step to the child whose token is `target_token(row, depth)`, while there is
    one; then emit that token (recovered, or bonus at a leaf)."""
    tokens = tree.tokens.tolist()
    path: list[int] = []
    row = 0
    while True:
        token = target_token(row, len(path))
        match = next((c for c in tree.children[row] if tokens[c] == token), None)
        if match is None:
            return Verdict(tuple(path), token)
        path.append(match)
        row = match + 1


def verify_sampling(
    tree: TokenTree,
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Recursive rejection sampling over the tree: the emitted tokens are distributed exactly as
    sampling from p (SpecInfer, Miao et al. 2023; a chain is Leviathan et al. 2023).

    At the current row (the root first) with target distribution p, try its children x_1, x_2, ..
    in order, child x_j drawn from q_j: draw r ~ U(0, 1) and accept x_j if r < min(1, p(x_j)/q_j(x_j));
    then move to x_j's row. On rejection p <- norm(max(0, p − q_j)) and try the next sibling. When
    every child is rejected, emit a recovered token from the current p; at a leaf, a bonus token.
    This is exact when siblings are independent draws from their q (with replacement), and when
    the drafter is deterministic (q is None): then q_j is one-hot at x_j, x_j is accepted with
    p(x_j) and removed from p on rejection, which is EAGLE's rule for top-k drafts taken without
    replacement.

    q: [N, V] the distribution each node was drawn from, or None; p: [N + 1, V] rows as the tree's
    """
    assert p.shape[0] == len(tree) + 1, (len(tree), p.shape)
    assert q is None or q.shape == (len(tree), p.shape[-1]), (None if q is None else q.shape, p.shape)
    tokens = tree.tokens.tolist()
    path: list[int] = []
    row = 0
    p_row = p[0]
    while True:
        for child in tree.children[row]:
            x = tokens[child]
            q_x = 1.0 if q is None else float(q[child, x])
            r = float(torch.rand(1, generator=generator, device=p.device))
            if r * q_x < float(p_row[x]):  # r < p/q without dividing by q
                path.append(child)
                row = child + 1
                p_row = p[row]
                break
            q_child = _one_hot(x, p_row) if q is None else q[child]
            p_row = residual(p_row, q_child)
        else:  # no child accepted (or a leaf): one token from what p still holds
            return Verdict(tuple(path), int(sample(p_row, generator)))


def _one_hot(token: int, like: torch.Tensor) -> torch.Tensor:
    q = torch.zeros_like(like)
    q[token] = 1.0
    return q


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)): what p still owes after q's proposal was rejected.

    If p ≤ q everywhere (so p = q), a rejection has probability 0; fall back to p for safety
    against rounding. p, q: [V] -> [V]
    """
    diff = (p - q).clamp_min(0)
    total = diff.sum()
    return diff / total if total > 0 else p
