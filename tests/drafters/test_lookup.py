"""Prompt lookup: the continuation of the most recent earlier match of the context's suffix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLength, GenerationConfig
from specdecode.drafters import make_options
from specdecode.drafters.lookup import MatchEvidence, PromptLookup, find_continuation
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError


def on(context: torch.Tensor) -> SimpleNamespace:
    """What `propose` reads of a sequence: its context (and the drafter's state)."""
    return SimpleNamespace(context=context, drafter_state=None)


def t(*ids: int) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.long)


def test_find_continuation_proposes_tokens_after_the_most_recent_match():
    context = t(1, 2, 3, 9, 1, 2, 4, 5, 1, 2)
    assert find_continuation(context, 2, 3).tolist() == [4, 5, 1]  # latest "1 2" is at index 4
    assert find_continuation(context, 1, 2).tolist() == [4, 5]


def test_find_continuation_never_matches_the_suffix_itself():
    assert find_continuation(t(5, 6, 7), 2, 4).tolist() == []
    assert find_continuation(t(7, 7), 1, 4).tolist() == [7]


def test_find_continuation_is_cut_at_k_and_at_the_end_of_context():
    context = t(1, 2, 3, 4, 5, 1, 2)
    assert find_continuation(context, 2, 2).tolist() == [3, 4]
    assert find_continuation(context, 2, 100).tolist() == [3, 4, 5, 1, 2]


def test_find_continuation_with_context_not_longer_than_n_is_empty():
    assert find_continuation(t(1, 2), 2, 3).numel() == 0
    assert find_continuation(t(1), 1, 3).numel() == 0


def test_prompt_lookup_prefers_the_longest_ngram():
    # the 1-gram "3" last occurred before 8; the 2-gram "2 3" last occurred before 5
    context = t(2, 3, 5, 3, 8, 2, 3)
    lookup = PromptLookup(ngram_max=2, ngram_min=1)
    draft = lookup.propose(on(context), 1)
    assert draft.tokens.tolist() == [5]
    assert draft.q is None and draft.forwards == 0
    assert PromptLookup(1, 1).propose(on(context), 1).tokens.tolist() == [8]


def test_prompt_lookup_without_any_match_proposes_nothing():
    draft = PromptLookup(3, 1).propose(on(t(1, 2, 3, 4)), 4)
    assert draft.tokens.numel() == 0 and draft.tokens.dtype == torch.long


def test_prompt_lookup_respects_ngram_min():
    context = t(4, 1, 2, 3, 9, 3)  # only a 1-gram match ("3")
    assert PromptLookup(3, 2).propose(on(context), 4).tokens.numel() == 0
    assert PromptLookup(3, 1).propose(on(context), 4).tokens.tolist() == [9, 3]


@pytest.mark.parametrize("ngram_max, ngram_min", [(1, 2), (3, 0), (0, 0)])
def test_prompt_lookup_rejects_invalid_ngram_range(ngram_max, ngram_min):
    with pytest.raises(InvalidParameterError):
        make_options("lookup", {"ngram_max": ngram_max, "ngram_min": ngram_min})


def test_free_rows_draft_the_whole_match_up_to_k():
    three_gram = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)
    assert PromptLookup(3, 1, row_cost=0.0).propose(on(three_gram), 6).tokens.tolist() == [
        10, 11, 12, 13, 14, 15]
    assert PromptLookup(3, 1, row_cost=0.0).propose(on(three_gram), 2).tokens.tolist() == [10, 11]


def test_costly_rows_draft_only_tokens_whose_chance_exceeds_the_row_cost():
    # before any verdict: the prior gives 1/2, 1/4, 1/8, ... for the first 1, 2, 3, ... tokens
    three_gram = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)
    assert PromptLookup(3, 1, row_cost=0.2).propose(on(three_gram), 6).tokens.tolist() == [10, 11]
    assert PromptLookup(3, 1, row_cost=0.3).propose(on(three_gram), 6).tokens.tolist() == [10]
    assert PromptLookup(3, 1, row_cost=0.6).propose(on(three_gram), 6).tokens.numel() == 0


def test_accepted_drafts_lengthen_later_drafts_and_rejected_ones_shorten_them():
    three_gram = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)
    lookup = PromptLookup(3, 1, row_cost=0.2)
    kept, lost = on(three_gram), on(three_gram)
    lengths = {"kept": [], "lost": []}
    for _ in range(8):
        lengths["kept"].append(len(lookup.propose(kept, 6).tokens))
        lookup.observe(kept, lengths["kept"][-1])  # every draft accepted
        lengths["lost"].append(len(lookup.propose(lost, 6).tokens))
        lookup.observe(lost, 0)  # every draft rejected
    assert lengths["kept"][0] == lengths["lost"][0] == 2  # the prior's 1/2, 1/4
    assert lengths["kept"] == sorted(lengths["kept"]) and lengths["kept"][-1] == 6
    assert lengths["lost"] == sorted(lengths["lost"], reverse=True) and lengths["lost"][-1] == 0


def test_a_longer_context_makes_rows_cost_more_and_drafts_shorter():
    from specdecode.core.cost import RowCost

    three_gram = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)  # 12 tokens of context
    cheap_then_dear = RowCost(0.2, 0.3, short_context=12, long_context=24)
    assert PromptLookup(3, 1, cheap_then_dear).propose(on(three_gram), 6).tokens.tolist() == [
        10, 11]
    longer = torch.cat([t(*range(100, 112)), three_gram])  # 24 tokens: a row costs 0.3
    assert PromptLookup(3, 1, cheap_then_dear).propose(on(longer), 6).tokens.tolist() == [10]


def test_match_evidence_counts_only_the_positions_the_verifier_looked_at():
    evidence = MatchEvidence()
    evidence.pending = (3, 4)
    evidence.record(1)  # token 1 accepted, token 2 rejected: tokens 3 and 4 never judged
    assert evidence.reached[3] == [1, 1] and evidence.accepted[3] == [1, 0]
    assert evidence.chances(3, 2) == [(1 + 1) / 3, (1 + 1) / 3 * (0 + 1) / 3]


def test_lookup_greedy_output_equals_plain_greedy(make_target):
    prompt = [3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1]  # repeats: the n-grams match
    config = GenerationConfig(30)
    plain = generate(make_target(), NoDrafter(), prompt, config, None)
    result = generate(make_target(), PromptLookup(3, 1, row_cost=0.1), prompt, config,
                      DraftLength(7))
    assert result.token_ids == plain.token_ids
    assert result.stats.drafted > 0
