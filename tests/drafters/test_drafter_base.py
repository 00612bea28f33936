"""`drafters/base.py`: autoregressive drafting, the registry and drafters' options."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from mock_target import MockTarget

from specdecode.core.budget import DraftBudget
from specdecode.core.sampling import SamplingParams, probabilities
from specdecode.drafters import DRAFTERS, create_drafter, make_options, option
from specdecode.drafters.base import Drafter, draft_chain, drafter_class, option_fields, register
from specdecode.errors import InvalidParameterError


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
                        params, torch.Generator().manual_seed(0), vocabulary, 16)
    assert set(draft.tokens.tolist()) <= {10, 11, 12} and draft.q.shape == (2, 16)
    assert float(draft.q[:, :10].abs().sum() + draft.q[:, 13:].abs().sum()) == 0.0
    torch.testing.assert_close(draft.q.sum(-1), torch.ones(2))


def test_a_forward_clock_averages_its_forwards_but_not_a_prompts_reading():
    from specdecode.drafters.base import ForwardClock

    clock = ForwardClock()
    clock.record(1, 0.010, 1)
    assert clock.seconds == pytest.approx(0.010)
    clock.record(2, 0.220, 2)  # 110 ms each: a tenth of the way
    assert clock.seconds == pytest.approx(0.020)
    clock.record(ForwardClock.CATCH_UP + 1, 1.0, 1)  # a prompt's reading is not timed
    assert clock.seconds == pytest.approx(0.020)


def test_a_forward_clock_that_prices_the_forwards_out_still_lets_a_short_one_run_every_probe():
    from specdecode.drafters.base import ForwardClock

    clock, budget = ForwardClock(), DraftBudget(4, 4, min_chance=0.1, token_seconds=0.02)
    short, long = 2, ForwardClock.CATCH_UP + 1  # tokens a call would feed
    clock.record(1, 0.030, 1)  # 30 ms a forward against a 20 ms token
    verdicts = [clock.priced_out(budget, short) for _ in range(2 * ForwardClock.PROBE)]
    assert verdicts[: ForwardClock.PROBE] == [True] * ForwardClock.PROBE
    assert verdicts[ForwardClock.PROBE :] == [False] * ForwardClock.PROBE  # until one is timed
    # a sequence far behind is not the probe: its catch-up would cost much and time nothing
    assert clock.priced_out(budget, long)
    clock.record(short, 0.080, 2)  # the probe, timed at 40 ms: it replaces the estimate
    assert clock.seconds == pytest.approx(0.040)
    assert all(clock.priced_out(budget, short) for _ in range(ForwardClock.PROBE))
    assert not clock.priced_out(budget, short)  # the next probe
    clock.record(1, 0.005, 1)
    assert not clock.priced_out(budget, short) and clock.cost(budget) == pytest.approx(0.25)


def test_every_drafter_is_registered_and_unknown_names_raise():
    assert {"ar", "lookup", "draft", "layerskip", "eagle", "medusa"} <= set(DRAFTERS)
    with pytest.raises(InvalidParameterError, match="unknown method"):
        create_drafter("no-such-method", None)


def test_create_drafter_builds_lookup_from_its_options():
    model = SimpleNamespace(target=MockTarget(vocab=32, layers=2, max_length=256, seed=1),
                            key="mock", weights="float64", kernels="torch")
    drafter = create_drafter("lookup", model, make_options("lookup", {"ngram_max": 5,
                                                                      "ngram_min": 2}))
    assert (drafter.ngram_max, drafter.ngram_min) == (5, 2)
    assert drafter.default_budget == DraftBudget(10, 10)


def test_draft_method_without_a_draft_model_raises():
    with pytest.raises(InvalidParameterError, match="needs --draft-model.*mock has no default"):
        create_drafter("draft", SimpleNamespace(name="mock", drafter=None))


def test_draft_method_takes_the_targets_own_drafter_by_default():
    cls = drafter_class("draft")
    options = make_options("draft", {})
    assert cls.unavailable(SimpleNamespace(name="q", drafter="small-alias"), options) is None
    assert [c["draft_model"] for c in cls.tune_candidates(
        SimpleNamespace(name="q", drafter="small-alias"), None)] == ["small-alias"] * 3


def test_options_take_their_own_fields_parse_text_and_validate_in_one_line():
    options = make_options("layerskip", {"layers": "0,2,1", "ngram_max": 3})  # ngram: lookup's
    assert options.layers == (0, 2, 1)
    with pytest.raises(InvalidParameterError, match="--layers: cannot read 'x,1'"):
        make_options("layerskip", {"layers": "x,1"})
    with pytest.raises(InvalidParameterError, match="ngram-min <= ngram-max"):
        make_options("lookup", {"ngram_max": 2, "ngram_min": 3})
    with pytest.raises(InvalidParameterError, match="--tree-topk must be >= 1"):
        make_options("eagle", {"tree_topk": 0})


def test_an_option_several_drafters_declare_is_listed_once_with_each_of_them():
    fields = option_fields()
    assert [method for method, _ in fields["draft_model"]] == ["draft", "eagle", "medusa"]
    assert [method for method, _ in fields["ngram_max"]] == ["lookup", "suffix"]


def test_a_drafter_registered_later_brings_its_options(monkeypatch):
    monkeypatch.setattr("specdecode.drafters.base.DRAFTERS", dict(DRAFTERS))

    @register("later")
    class Later(Drafter):
        @dataclass(frozen=True)
        class Options:
            width: int = option(2, "how wide")

        @classmethod
        def create(cls, model, options):
            return cls()

        def propose(self, seq, budget):
            raise NotImplementedError

    assert option_fields()["width"][0][0] == "later"
    assert make_options("later", {"width": 5}).width == 5
