"""Prompt lookup: the continuation of the most recent earlier match of the context's suffix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from drafter_helpers import scored

from specdecode.core.budget import DraftBudget
from specdecode.core.cost import StepCost
from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters import make_options
from specdecode.drafters.lookup import MatchEvidence, PromptLookup
from specdecode.drafters.ngrams import NgramIndex
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError


def on(context: torch.Tensor) -> SimpleNamespace:
    """What `propose` reads of a sequence: its context (and the drafter's state)."""
    return SimpleNamespace(config=GenerationConfig(), context=context, drafter_state=None)


def t(*ids: int) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.long)


def test_prompt_lookup_prefers_the_longest_ngram():
    # the 1-gram "3" last occurred before 8; the 2-gram "2 3" last occurred before 5
    context = t(2, 3, 5, 3, 8, 2, 3)
    lookup = PromptLookup(ngram_max=2, ngram_min=1)
    draft = lookup.propose(on(context), DraftBudget(1, 1))
    assert draft.tokens.tolist() == [5]
    assert draft.q is None and draft.forwards == 0
    assert PromptLookup(1, 1).propose(on(context), DraftBudget(1, 1)).tokens.tolist() == [8]


def test_prompt_lookup_without_any_match_proposes_nothing():
    draft = PromptLookup(3, 1).propose(on(t(1, 2, 3, 4)), DraftBudget(4, 4))
    assert draft.tokens.numel() == 0 and draft.tokens.dtype == torch.long


def test_prompt_lookup_respects_ngram_min():
    context = t(4, 1, 2, 3, 9, 3)  # only a 1-gram match ("3")
    assert PromptLookup(3, 2).propose(on(context), DraftBudget(4, 4)).tokens.numel() == 0
    assert PromptLookup(3, 1).propose(on(context), DraftBudget(4, 4)).tokens.tolist() == [9, 3]


@pytest.mark.parametrize("ngram_max, ngram_min", [(1, 2), (3, 0), (0, 0)])
def test_prompt_lookup_rejects_invalid_ngram_range(ngram_max, ngram_min):
    with pytest.raises(InvalidParameterError):
        make_options("lookup", {"ngram_max": ngram_max, "ngram_min": ngram_min})


THREE_GRAM = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)


def test_the_whole_match_is_proposed_up_to_the_smaller_cap():
    assert PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(6, 6)).tokens.tolist() == [
        10, 11, 12, 13, 14, 15]
    assert PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(10, 2)).tokens.tolist() == [
        10, 11]
    assert PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(3, 10)).tokens.tolist() == [
        10, 11, 12]


def test_before_any_verdict_the_chances_are_the_priors():
    draft = PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(4, 4))
    assert draft.chances.tolist() == [0.5, 0.25, 0.125, 0.0625]


def test_tokens_below_the_steps_price_are_not_proposed():
    draft = PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(6, 6, min_chance=0.2))
    assert draft.tokens.tolist() == [10, 11] and draft.chances.tolist() == [0.5, 0.25]
    assert not len(PromptLookup(3, 1).propose(on(THREE_GRAM), DraftBudget(6, 6, min_chance=0.6)))


def test_costly_rows_score_only_tokens_that_pay_for_their_rows():
    sizes = {cost: len(scored(PromptLookup(3, 1), on(THREE_GRAM), DraftBudget(6, 6), cost))
             for cost in (0.0, 0.1, 0.3, 0.6)}
    assert sizes == {0.0: 6, 0.1: 2, 0.3: 1, 0.6: 0}


def test_accepted_drafts_lengthen_later_drafts_and_rejected_ones_shorten_them():
    lookup = PromptLookup(3, 1)
    kept, lost = on(THREE_GRAM), on(THREE_GRAM)
    lengths = {"kept": [], "lost": []}
    for _ in range(8):
        lengths["kept"].append(len(scored(lookup, kept, DraftBudget(6, 6), 0.2)))
        lookup.observe(kept, lengths["kept"][-1], lengths["kept"][-1])  # every draft accepted
        lengths["lost"].append(len(scored(lookup, lost, DraftBudget(6, 6), 0.2)))
        lookup.observe(lost, lengths["lost"][-1], 0)  # every draft rejected
    assert lengths["kept"][0] == lengths["lost"][0] == 1  # the prior's 1/2, 1/4
    assert lengths["kept"] == sorted(lengths["kept"]) and lengths["kept"][-1] == 6
    assert lengths["lost"] == sorted(lengths["lost"], reverse=True) and lengths["lost"][-1] == 0


def test_match_evidence_counts_only_the_positions_the_verifier_looked_at():
    evidence = MatchEvidence(NgramIndex(3))
    evidence.pending = 3
    evidence.record(4, 1)  # token 1 accepted, token 2 rejected: tokens 3 and 4 never judged
    assert evidence.verdicts.tried == {(3, 0): 1, (3, 1): 1}
    assert evidence.verdicts.accepted == {(3, 0): 1}
    first = (1 + 2 * 0.5) / 3  # one hit in one look, prior 1/2 worth two looks
    second = (0 + 2 * first) / 3  # no hit in one look, the first position's rate as its prior
    assert evidence.chances(3, 3) == pytest.approx([first, first * second,
                                                    first * second * second])


def test_tokens_the_step_did_not_score_are_not_counted_as_rejected():
    lookup = PromptLookup(3, 1)
    seq = on(THREE_GRAM)
    lookup.propose(seq, DraftBudget(6, 6))
    lookup.observe(seq, 1, 1)  # one of six scored, and accepted
    verdicts = seq.drafter_state.verdicts
    assert verdicts.tried == {(3, 0): 1} and verdicts.accepted == {(3, 0): 1}


def test_a_prediction_of_the_output_is_drafted_from_and_changes_nothing(make_target):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    plain = generate(make_target(), NoDrafter(), prompt, GenerationConfig(30), None)
    runs = {}
    for name, prediction in (("none", ()), ("the output", tuple(plain.token_ids))):
        runs[name] = generate(make_target(), PromptLookup(3, 1), prompt,
                              GenerationConfig(30, reference=prediction), DraftLimit(7, 7),
                              cost=StepCost.linear(0.1))
        assert runs[name].token_ids == plain.token_ids
    assert runs["the output"].stats.accepted > runs["none"].stats.accepted
    assert runs["the output"].stats.target_forwards < runs["none"].stats.target_forwards


def test_lookup_greedy_output_equals_plain_greedy(make_target):
    prompt = [3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1]  # repeats: the n-grams match
    config = GenerationConfig(30)
    plain = generate(make_target(), NoDrafter(), prompt, config, None)
    result = generate(make_target(), PromptLookup(3, 1), prompt, config, DraftLimit(7, 7),
                      cost=StepCost.linear(0.1))
    assert result.token_ids == plain.token_ids
    assert result.stats.drafted > 0
