"""Continuous batching: sequences join and leave at step boundaries, each gets the tokens it gets
alone, and results come back in request order."""

from __future__ import annotations

from mock_target import MockTarget

from specdecode.core.batch import Batch, Request, generate_batch
from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter


def requests(count: int) -> list[Request]:
    out = []
    for i in range(count):
        drafter, length = (PromptLookup(3, 1), DraftLimit(4, 4)) if i % 2 else (NoDrafter(), None)
        out.append(Request([1 + i % 5, 2, 3, 1, 2, 3, 4 + i % 3], GenerationConfig(6 + i % 4),
                           drafter, length))
    return out


def test_more_requests_than_the_batch_holds_all_finish_in_request_order():
    target = MockTarget(vocab=16, layers=2, max_length=128, seed=3)
    reqs = requests(7)
    alone = [generate(target, r.drafter, r.prompt, r.config, r.limit) for r in reqs]
    together = generate_batch(target, reqs, max_batch=3)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert [r.finish_reason for r in together] == [r.finish_reason for r in alone]
    assert all(r.stats.wall_seconds > 0 for r in together)


def test_a_sequence_that_leaves_is_no_longer_stepped():
    target = MockTarget(vocab=16, layers=2, max_length=128, seed=3)
    batch = Batch(target)
    first, second = (batch.join(r) for r in requests(2))
    assert [seq for seq, _ in batch.step()] == [first, second]
    batch.leave(first)
    assert len(batch) == 1 and [seq for seq, _ in batch.step()] == [second]


def test_finished_sequences_leave_the_batch_with_their_last_chunk():
    target = MockTarget(vocab=16, layers=2, max_length=128, seed=3)
    batch = Batch(target)
    short = batch.join(Request([1, 2, 3], GenerationConfig(1, SamplingParams()), NoDrafter(),
                               None))
    long = batch.join(Request([1, 2, 3], GenerationConfig(3), NoDrafter(), None))
    chunks = dict((id(seq), chunk) for seq, chunk in batch.step())
    assert chunks[id(short)].finish_reason == "length" and chunks[id(short)].stats is not None
    assert chunks[id(long)].finish_reason is None
    assert [seq for _, seq, _ in batch.active] == [long]
