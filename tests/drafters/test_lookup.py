"""Prompt lookup: the continuation of the most recent earlier match of the context's suffix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLength, GenerationConfig
from specdecode.drafters import make_options
from specdecode.drafters.lookup import PromptLookup, draft_length, find_continuation
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError


def on(context: torch.Tensor) -> SimpleNamespace:
    """What `propose` reads of a sequence: its context."""
    return SimpleNamespace(context=context)


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


def test_draft_length_grows_with_the_match_and_never_exceeds_k():
    assert [draft_length(n, 7, 5) for n in range(1, 6)] == [3, 5, 7, 7, 7]
    assert [draft_length(n, 2, 5) for n in range(1, 6)] == [2, 2, 2, 2, 2]
    assert draft_length(2, 7, 2) == 7  # a full match drafts k whatever ngram_max is


def test_prompt_lookup_drafts_fewer_tokens_for_shorter_matches():
    # "7" (a 1-gram) matches with a long continuation; "1 2 7" (a 3-gram) does too
    one_gram = t(7, 10, 11, 12, 13, 14, 15, 7)
    assert PromptLookup(3, 1).propose(on(one_gram), 6).tokens.tolist() == [
        10, 11, 12]
    three_gram = t(1, 2, 7, 10, 11, 12, 13, 14, 15, 1, 2, 7)
    draft = PromptLookup(3, 1).propose(on(three_gram), 6)
    assert draft.tokens.tolist() == [10, 11, 12, 13, 14, 15]


def test_lookup_greedy_output_equals_plain_greedy(make_target):
    prompt = [3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1]  # repeats: the n-grams match
    config = GenerationConfig(30)
    plain = generate(make_target(), NoDrafter(), prompt, config, None)
    result = generate(make_target(), PromptLookup(3, 1), prompt, config, DraftLength(7))
    assert result.token_ids == plain.token_ids
    assert result.stats.drafted > 0
