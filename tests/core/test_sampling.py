"""`sampling.probabilities`: temperature, then min-p, top-k and top-p, on hand-built logits."""

from __future__ import annotations

import math

import pytest
import torch

from specdecode.core.sampling import SamplingParams, probabilities, sample
from specdecode.errors import InvalidParameterError


def logits_of(probs) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log().float()


def kept(probs: torch.Tensor) -> list[int]:
    return (probs > 0).nonzero().flatten().tolist()


def test_greedy_gives_one_hot_of_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.9], [5.0, -3.0, 4.9, 0.0], [-1.0, -2.0, -3.0, -0.5]])
    probs = probabilities(logits, SamplingParams(temperature=0.0))
    expected = torch.zeros(3, 4)
    expected[0, 1] = expected[1, 0] = expected[2, 3] = 1.0
    assert probs.dtype == torch.float32
    assert torch.equal(probs, expected)


def test_greedy_ignores_top_k_and_top_p():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    probs = probabilities(logits, SamplingParams(temperature=0.0, top_k=2, top_p=0.3))
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 1.5, 4.0])
def test_temperature_scaling_matches_softmax_of_logits_over_t(temperature):
    torch.manual_seed(0)
    logits = torch.randn(3, 17) * 3
    probs = probabilities(logits, SamplingParams(temperature=temperature))
    torch.testing.assert_close(probs, torch.softmax(logits / temperature, -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(probs.sum(-1), torch.ones(3))


def test_probabilities_accepts_half_precision_logits_and_returns_float32():
    logits = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    probs = probabilities(logits, SamplingParams(temperature=1.0))
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, torch.softmax(logits.float(), -1))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 9])
def test_top_k_keeps_exactly_k_largest_and_renormalises(k):
    torch.manual_seed(1)
    logits = torch.randn(10)
    probs = probabilities(logits, SamplingParams(temperature=1.0, top_k=k))
    top = torch.topk(logits, k).indices
    assert sorted(kept(probs)) == sorted(top.tolist())
    expected = torch.zeros(10)
    expected[top] = torch.softmax(logits[top], -1)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=0)
    assert math.isclose(float(probs.sum()), 1.0, abs_tol=1e-6)


@pytest.mark.parametrize("k", [0, 10, 50])
def test_top_k_zero_or_at_least_vocab_size_disables_the_filter(k):
    torch.manual_seed(2)
    logits = torch.randn(10)
    probs = probabilities(logits, SamplingParams(temperature=1.0, top_k=k))
    torch.testing.assert_close(probs, torch.softmax(logits, -1))


def test_top_k_is_applied_per_row():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    probs = probabilities(logits, SamplingParams(temperature=1.0, top_k=2))
    assert kept(probs[0]) == [0, 1]
    assert kept(probs[1]) == [2, 3]


HAND = [0.5, 0.3, 0.15, 0.05]


@pytest.mark.parametrize(
    "top_p, n_kept",
    [(0.8, 2), (0.5, 1), (0.01, 1), (0.45, 1), (0.55, 2), (0.79, 2), (0.81, 3), (0.9, 3),
     (0.96, 4), (1.0, 4)],
)
def test_top_p_keeps_smallest_set_reaching_the_mass(top_p, n_kept):
    probs = probabilities(logits_of(HAND), SamplingParams(temperature=1.0, top_p=top_p))
    assert kept(probs) == list(range(n_kept))
    head = torch.tensor(HAND[:n_kept])
    torch.testing.assert_close(probs[:n_kept], head / head.sum(), atol=1e-6, rtol=0)


def test_top_p_works_on_unsorted_vocabulary_order():
    # the same distribution, permuted: the kept set follows the tokens, not the positions
    order = [2, 0, 3, 1]  # token ids holding 0.5, 0.3, 0.15, 0.05
    probs_in = [0.0] * 4
    for p, token in zip(HAND, order):
        probs_in[token] = p
    probs = probabilities(logits_of(probs_in), SamplingParams(temperature=1.0, top_p=0.7))
    assert sorted(kept(probs)) == sorted(order[:2])
    torch.testing.assert_close(probs[2], torch.tensor(0.625))
    torch.testing.assert_close(probs[0], torch.tensor(0.375))


def test_top_p_always_keeps_at_least_the_most_likely_token():
    probs = probabilities(torch.tensor([0.0, 10.0, 0.0]), SamplingParams(temperature=1.0,
                                                                        top_p=1e-6))
    assert probs.tolist() == [0.0, 1.0, 0.0]


def test_temperature_is_applied_before_top_p():
    # T=1: [0.5, 0.3, ...] -> top_p=0.45 keeps one token; T=2 flattens to [0.38, 0.29, ...] so
    # the first token alone no longer reaches 0.45 and two are kept
    logits = logits_of(HAND)
    assert kept(probabilities(logits, SamplingParams(temperature=1.0, top_p=0.45))) == [0]
    assert kept(probabilities(logits, SamplingParams(temperature=2.0, top_p=0.45))) == [0, 1]


def test_top_k_and_top_p_compose_top_k_first():
    # top_k=3 renormalises [0.4, 0.3, 0.2] to [4/9, 3/9, 2/9]; then top_p=0.75 keeps two tokens
    # (4/9 + 3/9 >= 0.75). top-p alone would keep three (0.4 + 0.3 < 0.75).
    logits = logits_of([0.4, 0.3, 0.2, 0.1])
    alone = probabilities(logits, SamplingParams(temperature=1.0, top_p=0.75))
    assert kept(alone) == [0, 1, 2]
    both = probabilities(logits, SamplingParams(temperature=1.0, top_k=3, top_p=0.75))
    assert kept(both) == [0, 1]
    torch.testing.assert_close(both, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0]), atol=1e-6, rtol=0)
    # and top_k smaller than the top-p set: top-k decides
    assert kept(probabilities(logits, SamplingParams(temperature=1.0, top_k=1, top_p=0.9))) == [0]


@pytest.mark.parametrize("min_p, expected", [(0.0, [0, 1, 2, 3]), (0.2, [0, 1, 2, 3]),
                                              (0.3, [1, 2, 3]), (0.6, [1, 3]), (0.8, [1]),
                                              (1.0, [1])])
def test_min_p_keeps_tokens_at_least_min_p_times_as_likely_as_the_most_likely(min_p, expected):
    probs = probabilities(logits_of([0.1, 0.4, 0.2, 0.3]),  # ratios to the top: 1/4, 1, 1/2, 3/4
                          SamplingParams(temperature=1.0, min_p=min_p))
    assert kept(probs) == expected
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6)


def test_min_p_is_applied_after_temperature():
    """At T = 2 the ratio 1/4 becomes 1/2: min_p 0.4 keeps token 0 only then."""
    logits = logits_of([0.2, 0.8])
    assert kept(probabilities(logits, SamplingParams(temperature=1.0, min_p=0.4))) == [1]
    assert kept(probabilities(logits, SamplingParams(temperature=2.0, min_p=0.4))) == [0, 1]


def test_filters_never_produce_nan_with_extreme_logits():
    logits = torch.tensor([[1e4, -1e4, 0.0, 1e4 - 1], [-1e30, 0.0, -1e30, -1e30]])
    for params in [SamplingParams(1.0), SamplingParams(0.1, top_k=2),
                   SamplingParams(1.0, top_p=0.5), SamplingParams(0.5, top_k=3, top_p=0.9)]:
        probs = probabilities(logits, params)
        assert torch.isfinite(probs).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(2))


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-0.1), dict(temperature=-1e-9), dict(temperature=float("nan")),
     dict(top_k=-1), dict(top_p=0.0), dict(top_p=-0.5), dict(top_p=1.0001), dict(top_p=2.0),
     dict(top_p=float("nan")), dict(min_p=-0.1), dict(min_p=1.5), dict(min_p=float("nan"))],
)
def test_invalid_sampling_params_raise_invalid_parameter_error(kwargs):
    with pytest.raises(InvalidParameterError):
        SamplingParams(**kwargs)


def test_valid_sampling_params_boundaries_are_accepted():
    assert SamplingParams(temperature=0.0).greedy
    assert not SamplingParams(temperature=1e-6).greedy
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0)
    SamplingParams(temperature=1.0, top_k=1, top_p=1e-9)


def test_sample_returns_one_id_per_row_from_the_support():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    for _ in range(50):
        ids = sample(probs, gen)
        assert ids.shape == (2,)
        assert ids[0] == 1 and ids[1] in (0, 2)
    assert sample(torch.tensor([0.0, 0.0, 1.0]), gen).shape == ()


def test_sample_is_reproducible_for_a_seeded_generator():
    probs = torch.softmax(torch.randn(5, 11), -1)
    a = sample(probs, torch.Generator().manual_seed(7))
    b = sample(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_sample_draws_each_token_with_its_probability_and_never_an_impossible_one():
    """A goodness-of-fit test of 40k draws (rows of one batched call and calls of one row), with
    its power check: the same test rejects the draws against a distribution 2 points away."""
    from scipy.stats import chisquare

    probs = torch.tensor([0.05, 0.0, 0.4, 0.25, 0.0, 0.3])
    gen = torch.Generator().manual_seed(3)
    draws = torch.cat([sample(probs.expand(1000, 6), gen) for _ in range(30)]
                      + [sample(probs, gen).reshape(1) for _ in range(10000)])
    counts = torch.bincount(draws, minlength=6)
    assert counts[1] == 0 and counts[4] == 0
    support = probs > 0
    observed = counts[support].double().numpy()

    def fit(p: list[float]) -> float:
        expected = torch.tensor(p, dtype=torch.float64)
        return chisquare(observed, (expected / expected.sum() * len(draws)).numpy()).pvalue

    assert fit([0.05, 0.4, 0.25, 0.3]) > 1e-3
    assert fit([0.07, 0.38, 0.25, 0.3]) < 1e-6


def test_greedy_tokens_are_each_rows_first_maximum():
    from specdecode.core.sampling import greedy_tokens

    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0], [-1.0, -2.0, -0.5, -3.0]])
    assert greedy_tokens(logits) == [1, 2]
    wide = torch.randn(5, 49152, generator=torch.Generator().manual_seed(4))
    assert greedy_tokens(wide) == wide.argmax(-1).tolist()
