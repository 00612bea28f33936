"""The verifier: pure functions of tensors that decide which draft tokens the target keeps.

Vocabulary (used everywhere in this project):
- *accepted*: draft tokens kept, a prefix of the draft;
- *recovered*: the token sampled from the residual distribution after the first rejection;
- *bonus*: the token sampled from p when the whole draft was accepted.
Every verification yields the accepted tokens plus exactly one recovered-or-bonus token, so one
target forward confirms between 1 and γ + 1 tokens (γ = draft length).

Notation as in Leviathan et al. 2023 / Chen et al. 2023: x_1..x_γ the draft, q_i the draft
distribution that x_i was sampled from, p_i the target distribution at the same position (both
already processed by `sampling.probabilities`), p_{γ+1} the target distribution after the whole draft.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # number of draft tokens kept (a prefix of the draft)
    token: int  # the recovered token (after a rejection) or the bonus token (all accepted)

    def bonus(self, draft_length: int) -> bool:
        return self.accepted == draft_length


def verify_greedy(draft: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy verification: accept x_i while x_i = argmax p_i; then emit argmax at the first mismatch
    (recovered) or argmax p_{γ+1} (bonus). Output equals plain greedy decoding token for token.

    draft: [γ] int64; target_logits: [γ + 1, V]
    """
    gamma = draft.shape[0]
    assert target_logits.shape[0] == gamma + 1, (draft.shape, target_logits.shape)
    best = target_logits.argmax(-1)  # [γ + 1]
    mismatch = (best[:gamma] != draft).nonzero()
    accepted = int(mismatch[0, 0]) if mismatch.numel() else gamma
    return Verdict(accepted, int(best[accepted]))


def verify_sampling(
    draft: torch.Tensor,
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Speculative sampling: the emitted tokens are distributed exactly as sampling from p.

    For i = 1..γ: draw r ~ U(0, 1); accept x_i if r < min(1, p_i(x_i) / q_i(x_i)).
    At the first rejection i, emit a recovered token from norm(max(0, p_i − q_i)) and stop.
    If all γ are accepted, emit a bonus token from p_{γ+1}.
    A deterministic drafter (q is None) proposes x_i with certainty: q_i is one-hot at x_i, so
    x_i is accepted with probability p_i(x_i) and the residual is p_i with x_i removed.

    draft: [γ] int64; q: [γ, V] or None; p: [γ + 1, V]
    """
    gamma = draft.shape[0]
    assert p.shape[0] == gamma + 1, (draft.shape, p.shape)
    if q is None:
        q = torch.nn.functional.one_hot(draft, p.shape[-1]).to(p.dtype)
    assert q.shape == (gamma, p.shape[-1]), (q.shape, p.shape)
    idx = torch.arange(gamma)
    p_x, q_x = p[idx, draft], q[idx, draft]  # [γ]
    r = torch.rand(gamma, generator=generator)
    rejected = (r * q_x >= p_x).nonzero()  # r < p/q without dividing by q
    if not rejected.numel():
        return Verdict(gamma, int(sample(p[gamma], generator)))
    i = int(rejected[0, 0])
    return Verdict(i, int(sample(residual(p[i], q[i]), generator)))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)): what p still owes after q's proposal was rejected.

    If p ≤ q everywhere (so p = q), a rejection has probability 0; fall back to p for safety
    against rounding. p, q: [V] -> [V]
    """
    diff = (p - q).clamp_min(0)
    total = diff.sum()
    return diff / total if total > 0 else p
