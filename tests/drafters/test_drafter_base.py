"""`drafters/base.py`: the adaptive draft length, autoregressive drafting and the registry."""

from __future__ import annotations

import pytest
import torch

from specdecode.drafters import DRAFTERS, DrafterOptions, create_drafter
from specdecode.drafters.base import DraftLength, draft_chain
from specdecode.errors import InvalidParameterError
from specdecode.sampling import SamplingParams, probabilities


def test_fixed_draft_length_never_changes():
    length = DraftLength(4)
    for drafted, accepted in [(4, 4), (4, 0), (3, 1)]:
        length.update(drafted, accepted)
        assert length.k == 4


def test_adaptive_draft_length_adds_two_after_full_acceptance_and_drops_one_after_rejection():
    length = DraftLength(4, adaptive=True, k_min=2, k_max=9)
    steps = [((4, 4), 6), ((6, 6), 8), ((8, 8), 9), ((9, 9), 9), ((9, 3), 8), ((8, 0), 7)]
    for (drafted, accepted), k in steps:
        length.update(drafted, accepted)
        assert length.k == k
    for _ in range(10):
        length.update(length.k, 0)
    assert length.k == 2


def test_adaptive_draft_length_ignores_steps_without_a_draft():
    length = DraftLength(4, adaptive=True)
    length.update(0, 0)
    assert length.k == 4


def test_adaptive_draft_length_clamps_initial_k():
    assert DraftLength(20, adaptive=True, k_max=16).k == 16
    assert DraftLength(1, adaptive=True, k_min=3, k_max=5).k == 3


class Counting:
    """A fake causal model: logits favour (last token + 1) % V; records what it was fed."""

    def __init__(self, vocab: int = 7) -> None:
        self.vocab, self.fed = vocab, []

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.fed.append(tokens.tolist())
        logits = torch.zeros(tokens.shape[0], self.vocab)
        logits[torch.arange(tokens.shape[0]), (tokens + 1) % self.vocab] = 3.0
        return logits


def test_draft_chain_greedy_feeds_each_token_and_returns_no_q():
    model = Counting()
    draft = draft_chain(model, torch.tensor([1, 2, 3]), 4, SamplingParams(), None)
    assert draft.tokens.tolist() == [4, 5, 6, 0]
    assert draft.tokens.dtype == torch.long
    assert draft.q is None and draft.forwards == 4
    assert model.fed == [[1, 2, 3], [4], [5], [6]]  # the last draft token is not fed


def test_draft_chain_sampling_returns_the_distributions_it_sampled_from():
    model = Counting()
    params = SamplingParams(temperature=1.0, top_k=3)
    draft = draft_chain(model, torch.tensor([2]), 3, params, torch.Generator().manual_seed(0))
    assert draft.q.shape == (3, 7)
    last = torch.tensor([2] + draft.tokens.tolist()[:-1])
    logits = torch.zeros(3, 7)
    logits[torch.arange(3), (last + 1) % 7] = 3.0
    torch.testing.assert_close(draft.q, probabilities(logits, params))
    assert all(draft.q[i, x] > 0 for i, x in enumerate(draft.tokens.tolist()))


def test_every_drafter_is_registered_and_unknown_names_raise():
    assert {"ar", "lookup", "draft", "layerskip"} <= set(DRAFTERS)
    with pytest.raises(InvalidParameterError):
        create_drafter("no-such-method", None, DrafterOptions())


def test_create_drafter_builds_lookup_from_options():
    drafter = create_drafter("lookup", None, DrafterOptions(ngram_max=5, ngram_min=2))
    assert (drafter.ngram_max, drafter.ngram_min) == (5, 2)


def test_draft_method_without_a_draft_model_raises():
    with pytest.raises(InvalidParameterError):
        create_drafter("draft", None, DrafterOptions())
