"""`drafters/chain.py`: autoregressive drafting with any causal model."""

from __future__ import annotations

import torch

from specdecode.core.sampling import SamplingParams, keyed_uniform, probabilities, sample, sample_at
from specdecode.drafters.chain import draft_chain


class Counting:
    """A fake causal model: logits favour (last token + 1) % V; records what it was fed."""

    def __init__(self, vocab: int = 7) -> None:
        self.vocab, self.fed = vocab, []

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.fed.append(tokens.tolist())
        logits = torch.zeros(tokens.shape[0], self.vocab)
        logits[torch.arange(tokens.shape[0]), (tokens + 1) % self.vocab] = 3.0
        return logits


def _draws(seed: int):
    """A request's draws as `SequenceState.draw` makes them without a seed."""
    generator = torch.Generator().manual_seed(seed)
    return lambda q, depth: sample(q, generator)


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
    draft = draft_chain(model, torch.tensor([2]), 3, params, _draws(0))
    assert draft.q.shape == (3, 7)
    last = torch.tensor([2] + draft.tokens.tolist()[:-1])
    logits = torch.zeros(3, 7)
    logits[torch.arange(3), (last + 1) % 7] = 3.0
    torch.testing.assert_close(draft.q, probabilities(logits, params))
    assert all(draft.q[i, x] > 0 for i, x in enumerate(draft.tokens.tolist()))


def test_draft_chain_chances_multiply_and_it_stops_before_a_path_below_the_bar():
    p = float(torch.softmax(torch.tensor([3.0] + [0.0] * 6), -1)[0])  # Counting's confidence
    model = Counting()
    draft = draft_chain(model, torch.tensor([1]), 6, SamplingParams(), None, stop_below=p**3.5)
    assert draft.tokens.tolist() == [2, 3, 4]
    torch.testing.assert_close(draft.chances, torch.tensor([p, p**2, p**3]))
    # it looked at the fourth token (its chance p**4 < the bar) and fed nothing after it
    assert draft.forwards == 4 and model.fed == [[1], [2], [3], [4]]
    empty = draft_chain(Counting(), torch.tensor([1]), 6, SamplingParams(), None, stop_below=1.0)
    assert len(empty) == 0 and empty.forwards == 1


def test_draft_chain_over_a_reduced_vocabulary_proposes_ids_and_scatters_q():
    model = Counting(vocab=3)  # columns 0..2 stand for ids 10, 11, 12 of 16
    vocabulary = torch.tensor([10, 11, 12])
    params = SamplingParams(temperature=1.0)
    draft = draft_chain(lambda t: model(t - 10 if t.max() >= 10 else t), torch.tensor([0]), 2,
                        params, _draws(0), vocabulary, 16)
    assert set(draft.tokens.tolist()) <= {10, 11, 12} and draft.q.shape == (2, 16)
    assert float(draft.q[:, :10].abs().sum() + draft.q[:, 13:].abs().sum()) == 0.0
    torch.testing.assert_close(draft.q.sum(-1), torch.ones(2))


def test_draft_chain_draws_each_token_where_the_draw_function_says_for_its_depth():
    """A seeded drafter inverts q at the uniform of the position it drafts (the verifier's draw
    there looks at the same one): the i-th token is q's inverse at the i-th position's."""
    model = Counting()
    params = SamplingParams(temperature=2.0)
    draft = draft_chain(model, torch.tensor([2]), 4, params,
                        lambda q, depth: sample_at(q, keyed_uniform(7, 100 + depth)))
    assert draft.tokens.tolist() == [int(sample_at(draft.q[i], keyed_uniform(7, 100 + i)))
                                     for i in range(4)]
