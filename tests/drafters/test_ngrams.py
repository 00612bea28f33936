"""`drafters/ngrams.py`: the n-gram index lookup and suffix draft from (the latest occurrence of
a stream's n-grams, and every continuation by count and recency), and the acceptance record."""

from __future__ import annotations

import pytest
import torch

from specdecode.drafters.ngrams import PRIOR_WEIGHT, AcceptanceRecord, NgramIndex


def t(*ids: int) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.long)


def find_continuation(context: list[int], n: int, k: int) -> list[int]:
    """The reference: at most k tokens after the most recent earlier match of the last n."""
    L = len(context)
    for start in range(L - n - 1, -1, -1):
        if context[start : start + n] == context[L - n :]:
            return context[start + n : start + n + k]
    return []


def index_of(*ids: int, n_max: int = 3) -> NgramIndex:
    index = NgramIndex(n_max)
    index.extend(t(*ids))
    return index


def test_the_index_gives_the_tokens_after_the_most_recent_match():
    index = index_of(1, 2, 3, 9, 1, 2, 4, 5, 1, 2)
    assert index.continuation(2, 3) == [4, 5, 1]  # the latest "1 2" before the last is at 4
    assert index.continuation(1, 2) == [4, 5]


def test_the_index_never_matches_the_suffix_itself():
    assert index_of(5, 6, 7).continuation(2, 4) == []
    assert index_of(7, 7).continuation(1, 4) == [7]
    assert index_of(1, 2).continuation(2, 3) == [] and index_of(1).continuation(1, 3) == []


def test_the_index_is_cut_at_k_and_at_the_end_of_context():
    index = index_of(1, 2, 3, 4, 5, 1, 2)
    assert index.continuation(2, 2) == [3, 4] and index.continuation(2, 100) == [3, 4, 5, 1, 2]


def test_a_reference_before_the_stream_is_matched_to_its_end_where_the_stream_has_no_match():
    index = NgramIndex(3, before=[7, 8, 9, 4])
    index.extend(t(1, 7, 8))
    assert index.continuation(2, 5) == [9, 4]  # the reference's continuation, cut at its end
    index.extend(t(1, 7, 8, 5, 7, 8))
    assert index.continuation(2, 5) == [5, 7, 8]  # the stream's own later match wins


def test_the_index_grown_step_by_step_agrees_with_a_scan_of_the_whole_context():
    import random

    rng = random.Random(0)
    context = [rng.randrange(4) for _ in range(5)]
    index = NgramIndex(4)
    for _ in range(200):
        context += [rng.randrange(4) for _ in range(rng.randint(1, 3))]
        index.extend(torch.tensor(context))
        for n in range(1, 5):
            assert index.continuation(n, 6) == find_continuation(context, n, 6)


def test_the_index_ranks_continuations_by_count_then_recency():
    table = NgramIndex(2)
    table.count([1, 5, 1, 6, 1, 6, 1, 7])
    assert table.continuations((1,)) == (1, [6, 7, 5])  # 6 twice; 7 more recent than 5


def test_the_index_prefers_the_longest_suffix_seen():
    table = NgramIndex(3)
    table.count([2, 3, 4, 9, 3, 5])
    assert table.continuations((2, 3)) == (2, [4])  # not the 1-gram "3", which also saw 5
    assert table.continuations((8, 3)) == (1, [5, 4])  # equal counts: the latest first
    assert table.continuations((8,)) == (0, [])


def test_the_index_forgets_what_it_is_told_to_remove():
    table = NgramIndex(2)
    table.count([1, 2, 3])
    table.count([1, 4])
    table.count([1, 2, 3], sign=-1)
    assert table.continuations((1,)) == (1, [4])
    assert (1, 2) not in table.next and (2,) not in table.next


def test_the_grown_stream_and_counted_streams_give_the_same_continuations():
    grown, counted = NgramIndex(3), NgramIndex(3)
    tokens = [1, 2, 3, 1, 2, 4, 1, 2, 3, 5]
    grown.extend(t(*tokens[:4]))
    grown.extend(t(*tokens))
    counted.count(tokens)
    assert grown.next == counted.next
    assert counted.latest == {} and grown.latest[(1, 2)] == 6  # only the stream has positions


def test_the_acceptance_rate_weighs_the_prior_as_two_verdicts():
    record = AcceptanceRecord()
    assert record.rate("a", 0.5) == 0.5
    record.add("a", True)
    record.add("a", False)
    record.add("b", True)
    assert record.rate("a", 0.5) == pytest.approx((1 + PRIOR_WEIGHT * 0.5) / (2 + PRIOR_WEIGHT))
    assert record.rate("b", 0.0) == pytest.approx(1 / (1 + PRIOR_WEIGHT))
