"""The verifier on hand-built distributions.

Statistical checks use fixed seeds (so they are deterministic) and tolerances of several standard
deviations or a significance level of 0.001, so they would also pass for almost every other seed.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from specdecode.core.sampling import sample
from specdecode.core.tree import TokenTree
from specdecode.core.verify import Verdict, residual, verify_greedy, verify_sampling

chain = TokenTree.chain

V = 6


def one_hot_logits(argmaxes: list[int], vocab: int = V) -> torch.Tensor:
    """Logits whose row i has its maximum at argmaxes[i] (and distinct other values)."""
    rows = torch.arange(vocab, dtype=torch.float32).repeat(len(argmaxes), 1) * 0.1
    for i, best in enumerate(argmaxes):
        rows[i, best] = 10.0
    return rows


# --- greedy -------------------------------------------------------------------------------------


def test_verify_greedy_accepts_whole_matching_draft_and_adds_bonus_argmax():
    draft = torch.tensor([3, 1, 4])
    verdict = verify_greedy(chain(draft), one_hot_logits([3, 1, 4, 5]))
    assert verdict == Verdict(path=(0, 1, 2), token=5)


@pytest.mark.parametrize("mismatch", [0, 1, 2])
def test_verify_greedy_stops_at_first_mismatch_and_recovers_target_argmax(mismatch):
    draft = torch.tensor([3, 1, 4])
    best = [3, 1, 4, 5]
    best[mismatch] = 2  # target disagrees here
    verdict = verify_greedy(chain(draft), one_hot_logits(best))
    assert verdict == Verdict(path=tuple(range(mismatch)), token=2)


def test_verify_greedy_ignores_agreement_after_the_first_mismatch():
    draft = torch.tensor([3, 1, 4])
    verdict = verify_greedy(chain(draft), one_hot_logits([3, 0, 4, 5]))  # position 2 agrees again
    assert verdict == Verdict(path=(0,), token=0)


def test_verify_greedy_empty_draft_gives_argmax_of_single_row():
    verdict = verify_greedy(chain(torch.empty(0, dtype=torch.long)), one_hot_logits([4]))
    assert verdict == Verdict(path=(), token=4)


# --- residual -----------------------------------------------------------------------------------


def test_residual_is_normalised_positive_part_of_p_minus_q():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.5, 0.1, 0.2])
    # max(0, p - q) = [0.3, 0, 0.1, 0] -> normalised [0.75, 0, 0.25, 0]
    torch.testing.assert_close(residual(p, q), torch.tensor([0.75, 0.0, 0.25, 0.0]))


def test_residual_falls_back_to_p_when_p_equals_q():
    p = torch.tensor([0.1, 0.6, 0.3])
    torch.testing.assert_close(residual(p, p.clone()), p)


def test_residual_of_one_hot_q_is_p_without_the_drafted_token():
    p = torch.tensor([0.1, 0.6, 0.3])
    q = torch.tensor([0.0, 1.0, 0.0])
    torch.testing.assert_close(residual(p, q), torch.tensor([0.25, 0.0, 0.75]))


# --- sampling: exact properties -----------------------------------------------------------------


def random_dist(gen: torch.Generator, rows: int, vocab: int = V, scale: float = 1.5):
    return torch.softmax(torch.randn(rows, vocab, generator=gen) * scale, -1)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_verify_sampling_with_p_equal_q_always_accepts_everything(gamma):
    gen = torch.Generator().manual_seed(gamma)
    for seed in range(200):
        p = random_dist(gen, gamma + 1)
        q = p[:gamma].clone()
        draft = sample(q, gen)
        verdict = verify_sampling(chain(draft), q, p, torch.Generator().manual_seed(seed))
        assert verdict.accepted == gamma


@pytest.mark.parametrize("position", [0, 1, 2])
def test_verify_sampling_always_rejects_where_p_of_draft_is_zero_and_never_recovers_it(position):
    gamma = 3
    gen = torch.Generator().manual_seed(10 + position)
    for seed in range(200):
        p = random_dist(gen, gamma + 1)
        q = p[:gamma].clone()  # p == q before `position`: those are always accepted
        draft = sample(q, gen)
        x = int(draft[position])
        p[position, x] = 0.0
        p[position] /= p[position].sum()
        q[position] = random_dist(gen, 1)[0]  # any q that makes x possible
        verdict = verify_sampling(chain(draft), q, p, torch.Generator().manual_seed(seed))
        assert verdict.accepted == position
        assert verdict.token != x
        assert p[position, verdict.token] > 0


def test_verify_sampling_deterministic_drafter_rejects_token_with_zero_probability():
    p = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])
    for seed in range(100):
        verdict = verify_sampling(chain(torch.tensor([0])), None, p, torch.Generator().manual_seed(seed))
        assert verdict.accepted == 0 and verdict.token in (1, 2)


def test_verify_sampling_deterministic_drafter_accepts_token_with_probability_one():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.2, 0.3, 0.5]])
    for seed in range(100):
        gen = torch.Generator().manual_seed(seed)
        verdict = verify_sampling(chain(torch.tensor([1, 2])), None, p, gen)
        assert verdict.accepted == 2


def test_verify_sampling_is_reproducible_for_a_seeded_generator():
    gen = torch.Generator().manual_seed(3)
    p, q = random_dist(gen, 5), random_dist(gen, 4)
    draft = sample(q, gen)
    a = [verify_sampling(chain(draft), q, p, torch.Generator().manual_seed(s)) for s in range(20)]
    b = [verify_sampling(chain(draft), q, p, torch.Generator().manual_seed(s)) for s in range(20)]
    assert a == b


# --- sampling: statistics -----------------------------------------------------------------------

N = 4000
SIGMAS = 5


def assert_binomial(successes: int, n: int, prob: float) -> None:
    sd = math.sqrt(n * prob * (1 - prob))
    assert abs(successes - n * prob) <= SIGMAS * sd, (successes, n * prob, sd)


def assert_follows(counts: torch.Tensor, probs: torch.Tensor, alpha: float = 0.001) -> None:
    """Chi-square goodness of fit over the cells with positive probability; none outside."""
    support = probs > 0
    assert counts[~support].sum() == 0, (counts, probs)
    observed = counts[support].double().numpy()
    expected = probs[support].double().numpy() * observed.sum()
    expected *= observed.sum() / expected.sum()
    result = stats.chisquare(observed, expected)
    assert result.pvalue > alpha, (observed, expected, result)


def test_verify_sampling_deterministic_drafter_accepts_x_with_probability_p_of_x():
    p = torch.tensor([[0.1, 0.3, 0.25, 0.35], [0.25, 0.25, 0.25, 0.25]])
    x = 1
    gen = torch.Generator().manual_seed(1234)
    accepted = 0
    recovered = torch.zeros(4, dtype=torch.long)
    for _ in range(N):
        verdict = verify_sampling(chain(torch.tensor([x])), None, p, gen)
        accepted += verdict.accepted
        if not verdict.accepted:
            recovered[verdict.token] += 1
    assert_binomial(accepted, N, 0.3)
    # after a rejection the token comes from p without x: [0.1, 0, 0.25, 0.35] / 0.7
    assert_follows(recovered, residual(p[0], torch.nn.functional.one_hot(torch.tensor(x), 4)))


def test_verify_sampling_accepts_x_with_probability_min_1_p_over_q():
    p = torch.tensor([[0.1, 0.3, 0.6], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.5, 0.2, 0.3]])
    gen = torch.Generator().manual_seed(99)
    for x, prob in [(0, 0.2), (1, 1.0), (2, 1.0)]:
        accepted = sum(verify_sampling(chain(torch.tensor([x])), q, p, gen).accepted for _ in range(N))
        if prob == 1.0:
            assert accepted == N
        else:
            assert_binomial(accepted, N, prob)


def test_verify_sampling_first_token_follows_p_when_drafting_from_q():
    """The core lemma: draft x ~ q, verify against p; the first emitted token is distributed as
    p."""
    p = torch.tensor([[0.05, 0.45, 0.3, 0.2, 0.0], [0.2] * 5])
    q = torch.tensor([[0.4, 0.1, 0.1, 0.2, 0.2]])
    gen = torch.Generator().manual_seed(2024)
    counts = torch.zeros(5, dtype=torch.long)
    for _ in range(N):
        draft = sample(q, gen)
        verdict = verify_sampling(chain(draft), q, p, gen)
        counts[int(draft[0]) if verdict.accepted else verdict.token] += 1
    assert_follows(counts, p[0])


def test_verify_sampling_bonus_token_follows_last_target_row():
    gamma = 2
    gen = torch.Generator().manual_seed(5)
    p = random_dist(gen, gamma + 1)
    p[gamma] = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.2, 0.3])
    q = p[:gamma].clone()  # always fully accepted
    counts = torch.zeros(V, dtype=torch.long)
    for _ in range(N):
        draft = sample(q, gen)
        verdict = verify_sampling(chain(draft), q, p, gen)
        assert verdict.accepted == gamma
        counts[verdict.token] += 1
    assert_follows(counts, p[gamma])


# --- trees --------------------------------------------------------------------------------------

#        root
#       /    \
#     n0(1)  n1(2)
#     /  \      \
#  n2(3) n4(4)  n3(5)
BRANCHY = TokenTree(torch.tensor([1, 2, 3, 5, 4]), torch.tensor([-1, -1, 0, 1, 0]))


def test_verify_greedy_on_a_tree_follows_the_child_matching_each_argmax():
    # rows: root, n0, n1, n2, n3, n4; root -> 2 (n1), n1 -> 5 (n3), n3 -> 0 (leaf reached: bonus)
    verdict = verify_greedy(BRANCHY, one_hot_logits([2, 3, 5, 0, 0, 0]))
    assert verdict == Verdict(path=(1, 3), token=0)


def test_verify_greedy_on_a_tree_tries_every_sibling_not_just_the_first():
    # root -> 1 (n0), n0 -> 4 (its second child n4), n4 is a leaf: bonus argmax of n4's row
    verdict = verify_greedy(BRANCHY, one_hot_logits([1, 4, 0, 0, 0, 5]))
    assert verdict == Verdict(path=(0, 4), token=5)


def test_verify_greedy_on_a_tree_recovers_the_argmax_when_no_child_matches():
    verdict = verify_greedy(BRANCHY, one_hot_logits([1, 0, 0, 0, 0, 0]))  # n0 has no child 0
    assert verdict == Verdict(path=(0,), token=0)


def siblings(tokens: list[int]) -> TokenTree:
    """A one-level tree: every token is a child of the root."""
    return TokenTree(torch.tensor(tokens), torch.full((len(tokens),), -1))


def first_tokens(tree_of, q_of, p: torch.Tensor, seed: int, verify=verify_sampling) -> torch.Tensor:
    """Histogram of the first emitted token over N verifications of freshly drafted trees."""
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(p.shape[-1], dtype=torch.long)
    for _ in range(N):
        tree = tree_of(gen)
        verdict = verify(tree, q_of(tree), p.expand(len(tree) + 1, -1), gen)
        counts[int(tree.tokens[verdict.path[0]]) if verdict.path else verdict.token] += 1
    return counts


P5 = torch.tensor([0.05, 0.45, 0.3, 0.2, 0.0])
Q5 = torch.tensor([0.4, 0.1, 0.1, 0.2, 0.2])


@pytest.mark.parametrize("width", [2, 3])
def test_verify_sampling_over_iid_siblings_from_q_emits_tokens_distributed_as_p(width):
    """Recursive rejection sampling: siblings drawn independently from q, tried in turn with p
    replaced by norm(max(0, p - q)) after each rejection: the first token follows p."""
    counts = first_tokens(lambda g: siblings(sample(Q5.expand(width, -1), g).tolist()),
                          lambda tree: Q5.expand(len(tree), -1), P5, seed=width)
    assert_follows(counts, P5)


def test_verify_sampling_over_deterministic_distinct_siblings_emits_tokens_distributed_as_p():
    """Top-k drafts without replacement (q = None): each sibling accepted with the p left after
    the earlier ones were removed."""
    counts = first_tokens(lambda g: siblings([3, 1, 0]), lambda tree: None, P5, seed=7)
    assert_follows(counts, P5)


def verify_sampling_without_sibling_residual(tree, q, p, generator) -> Verdict:
    """BROKEN on purpose: tries each sibling against the original p, never the residual."""
    for child in tree.children[0]:
        x = int(tree.tokens[child])
        q_x = 1.0 if q is None else float(q[child, x])
        if float(torch.rand(1, generator=generator)) * q_x < float(p[0, x]):
            return Verdict((child,), 0)
    return Verdict((), int(sample(p[0], generator)))


def test_tree_test_detects_a_verifier_that_skips_the_sibling_residual():
    """Power check for the two tests above (same N, same significance level)."""
    counts = first_tokens(lambda g: siblings([3, 1, 0]), lambda tree: None, P5, seed=7,
                          verify=verify_sampling_without_sibling_residual)
    with pytest.raises(AssertionError):
        assert_follows(counts, P5)


def test_verify_sampling_accepts_a_sibling_after_an_earlier_one_was_rejected():
    p = torch.tensor([[0.0, 0.0, 1.0]] * 3)  # the target always emits token 2
    for seed in range(50):
        verdict = verify_sampling(siblings([0, 2]), None, p, torch.Generator().manual_seed(seed))
        assert verdict.path == (1,)
