"""Continuous batching: sequences join and leave at step boundaries, long prompts are prefilled in
chunks beside the others' steps, each sequence gets the tokens it gets alone, and the draft rows
are chosen for the whole batch."""

from __future__ import annotations

import pytest
from mock_target import MockTarget

from specdecode.core.batch import Batch, Request, generate_batch
from specdecode.core.cost import StepCost
from specdecode.core.engine import PREFILL_CHUNK, collect, generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter


def target() -> MockTarget:
    return MockTarget(vocab=16, layers=2, max_length=512, seed=3)


def requests(count: int, prompt_length: int = 7) -> list[Request]:
    out = []
    for i in range(count):
        drafter, limit = (PromptLookup(3, 1), DraftLimit(4, 4)) if i % 2 else (NoDrafter(), None)
        prompt = ([1 + i % 5, 2, 3, 1, 2, 3, 4 + i % 3] * prompt_length)[:prompt_length]
        out.append(Request(prompt, GenerationConfig(6 + i % 4), drafter, limit))
    return out


def alone(t, reqs, cost=None):
    return [generate(t, r.drafter, r.prompt, r.config,
                     r.limit and DraftLimit(r.limit.nodes, r.limit.depth), cost=cost)
            for r in reqs]


def test_more_requests_than_the_batch_holds_all_finish_in_request_order():
    t, reqs = target(), requests(7)
    expected = alone(t, reqs)
    together = generate_batch(t, reqs, max_batch=3)
    assert [r.token_ids for r in together] == [r.token_ids for r in expected]
    assert [r.finish_reason for r in together] == [r.finish_reason for r in expected]
    assert all(r.stats.wall_seconds > 0 for r in together)


def test_long_prompts_are_prefilled_in_chunks_while_others_decode():
    t = target()
    batch = Batch(t, prefill_rows=PREFILL_CHUNK)
    short = batch.join(requests(1)[0])
    long = batch.join(Request([1, 2, 3, 4] * 60, GenerationConfig(4), NoDrafter(), None))
    steps = 0
    while long.to_prefill:
        stepped = [seq for seq, _ in batch.step()]
        steps += 1
        assert batch.last_step.prefill_rows <= PREFILL_CHUNK
        if steps > 1:  # the short prompt (prefilled in the first step) decodes meanwhile
            assert short in stepped or short.finish_reason is not None
    assert steps == -(-(240 - 1) // PREFILL_CHUNK) and long.stats.prefill_seconds > 0


def test_a_prompt_prefilled_in_chunks_beside_other_sequences_decodes_as_alone():
    t = target()
    reqs = requests(4) + [Request([3, 1, 2] * 70, GenerationConfig(12), PromptLookup(3, 1),
                                  DraftLimit(4, 4))]
    expected = alone(t, reqs, StepCost.linear(0.1))
    together = generate_batch(t, reqs, max_batch=5, cost=StepCost.linear(0.1))
    assert [r.token_ids for r in together] == [r.token_ids for r in expected]


def test_a_sequence_that_leaves_is_no_longer_stepped():
    batch = Batch(target())
    first, second = (batch.join(r) for r in requests(2))
    batch.step()  # both prompts prefilled
    assert [seq for seq, _ in batch.step()] == [first, second]
    batch.leave(first)
    assert len(batch) == 1 and [seq for seq, _ in batch.step()] == [second]


def test_a_sequence_can_leave_while_its_prompt_is_prefilled():
    batch = Batch(target())
    long = batch.join(Request([1, 2] * 100, GenerationConfig(3), NoDrafter(), None))
    batch.step()
    assert long.to_prefill > 0
    batch.leave(long)
    assert len(batch) == 0 and batch.step() == []


def test_finished_sequences_leave_the_batch_with_their_last_chunk():
    batch = Batch(target())
    short = batch.join(Request([1, 2, 3], GenerationConfig(1, SamplingParams()), NoDrafter(),
                               None))
    long = batch.join(Request([1, 2, 3], GenerationConfig(3), NoDrafter(), None))
    batch.step()  # prefill
    chunks = dict((id(seq), chunk) for seq, chunk in batch.step())
    assert chunks[id(short)].finish_reason == "length" and chunks[id(short)].stats is not None
    assert chunks[id(long)].finish_reason is None
    assert [e.seq for e in batch.decoding] == [long]


def drafted(speculation: str, sequences: int) -> float:
    """Draft rows per sequence and step of lookup on a repetitive prompt, rows costing 0.1."""
    t = target()
    reqs = [Request([5, 6, 7, 8] * 8, GenerationConfig(24), PromptLookup(3, 1), DraftLimit(8, 8))
            for _ in range(sequences)]
    results = generate_batch(t, reqs, sequences, StepCost.linear(0.1), speculation=speculation)
    return sum(r.stats.drafted for r in results) / sum(r.stats.target_forwards for r in results)


def test_adaptive_speculation_shrinks_as_the_batch_grows_and_always_does_not():
    assert drafted("adaptive", 1) == drafted("always", 1) > 0
    assert drafted("adaptive", 8) < drafted("adaptive", 1)
    assert drafted("always", 8) == pytest.approx(drafted("always", 1))
    assert drafted("off", 4) == 0


def test_every_sequence_is_prepared_once_its_prompt_is_prefilled_and_before_its_first_draft():
    events: list[tuple[str, int, int]] = []  # (what, sequence, tokens in its cache)

    class Watching(PromptLookup):
        def prepare(self, seq):
            events.append(("prepare", id(seq), seq.cache.length))

        def propose(self, seq, budget):
            events.append(("propose", id(seq), seq.cache.length))
            return super().propose(seq, budget)

    reqs = [Request(prompt, GenerationConfig(4), Watching(3, 1), DraftLimit(4, 4))
            for prompt in ([5], [1, 2, 3] * 30)]  # a one-token prompt has nothing to prefill
    generate_batch(target(), reqs, max_batch=2, cost=StepCost.linear(0.1))
    for seq in {s for _, s, _ in events}:
        mine = [(what, length) for what, s, length in events if s == seq]
        assert mine[0][0] == "prepare" and [w for w, _ in mine].count("prepare") == 1
        assert mine[0][1] in (0, 89)  # the whole prompt but its pending token is in the cache
    assert sorted(length for what, _, length in events if what == "prepare") == [0, 89]


# --- forks: the choices of one request share its prompt's prefill -----------------------------


def _counting(t, monkeypatch) -> list[int]:
    """Rows each forward of `t` scores."""
    rows: list[int] = []
    real = t.hidden_batch
    monkeypatch.setattr(t, "hidden_batch", lambda steps: rows.append(
        sum(len(tokens) for _, tokens, _ in steps)) or real(steps))
    return rows


@pytest.mark.parametrize("drafter, limit", [(NoDrafter(), None),
                                            (PromptLookup(3, 1), DraftLimit(6, 6))],
                         ids=["plain", "lookup"])
def test_forks_read_the_prompt_once_and_each_equals_its_own_seeded_run(monkeypatch, drafter,
                                                                       limit):
    t = MockTarget(vocab=16, layers=2, max_length=256, seed=5)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 12  # 96 tokens: two prefill chunks
    configs = [GenerationConfig(20, SamplingParams(0.8), seed=s) for s in (1, 2, 3, 4)]
    alone = [generate(t, drafter, prompt, c, limit and DraftLimit(6, 6)) for c in configs]
    rows = _counting(t, monkeypatch)
    batch = Batch(t)
    first = batch.join(Request(prompt, configs[0], drafter, limit and DraftLimit(6, 6)))
    seqs = [first] + [batch.fork(first, Request(prompt, c, drafter, limit and DraftLimit(6, 6)))
                      for c in configs[1:]]
    parts: dict = {id(s): [] for s in seqs}
    while len(batch):
        for seq, chunk in batch.step():
            parts[id(seq)].append(chunk)
    got = [collect(parts[id(s)]) for s in seqs]
    assert [r.token_ids for r in got] == [r.token_ids for r in alone]
    assert len({tuple(r.token_ids) for r in got}) > 1  # the seeds differ
    prefilled = sum(rows) - sum(r.stats.target_forwards + r.stats.drafted for r in got)
    assert prefilled == len(prompt) - 1  # the prompt, less its pending token, once


def test_a_fork_of_a_one_token_prompt_simply_joins():
    t = MockTarget(vocab=16, layers=2, max_length=256, seed=5)
    batch = Batch(t)
    config = GenerationConfig(5)
    first = batch.join(Request([7], config, NoDrafter(), None))
    second = batch.fork(first, Request([7], config, NoDrafter(), None))
    results = {id(first): [], id(second): []}
    while len(batch):
        for seq, chunk in batch.step():
            results[id(seq)].append(chunk)
    assert collect(results[id(first)]).token_ids == collect(results[id(second)]).token_ids


def test_a_fork_of_a_prompt_kept_whole_shares_its_cache_and_each_equals_its_seeded_run():
    # the server's n > 1 on a prompt asked before: the first choice needs no prefill (all of its
    # prompt is kept), and the others used to be refused with a 500
    from specdecode.core.prefix_cache import PrefixCache

    t = MockTarget(vocab=16, layers=2, max_length=256, seed=5)
    t.row_invariant = True  # kept caches: here only the same prompt's, read in the same chunks
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 4
    configs = [GenerationConfig(12, SamplingParams(0.8), seed=s) for s in (1, 2, 3)]
    alone = [generate(t, NoDrafter(), prompt, c, None) for c in configs]
    batch = Batch(t, prefixes=PrefixCache(1 << 30))
    batch.join(Request(prompt, configs[0], NoDrafter(), None))
    while len(batch):
        batch.step()
    first = batch.join(Request(prompt, configs[0], NoDrafter(), None))
    assert first.stats.cached_prompt_tokens == len(prompt) - 1
    seqs = [first] + [batch.fork(first, Request(prompt, c, NoDrafter(), None))
                      for c in configs[1:]]
    parts: dict = {id(s): [] for s in seqs}
    while len(batch):
        for seq, chunk in batch.step():
            parts[id(seq)].append(chunk)
    assert [collect(parts[id(s)]).token_ids for s in seqs] == [r.token_ids for r in alone]


def test_a_fork_of_another_prompt_or_after_its_sequence_decoded_is_refused():
    t = MockTarget(vocab=16, layers=2, max_length=256, seed=5)
    batch = Batch(t)
    first = batch.join(Request([1, 2, 3], GenerationConfig(5), NoDrafter(), None))
    with pytest.raises(ValueError, match="prompt must be"):
        batch.fork(first, Request([1, 2, 4], GenerationConfig(5), NoDrafter(), None))
    batch.step()  # the prompt is read: a fork still shares it
    batch.fork(first, Request([1, 2, 3], GenerationConfig(5), NoDrafter(), None))
    batch.step()  # both decode
    with pytest.raises(ValueError, match="before its sequence decodes"):
        batch.fork(first, Request([1, 2, 3], GenerationConfig(5), NoDrafter(), None))


def test_leaving_drops_the_forks_waiting_for_the_prompt():
    t = MockTarget(vocab=16, layers=2, max_length=256, seed=5)
    batch = Batch(t)
    first = batch.join(Request([1, 2, 3], GenerationConfig(5), NoDrafter(), None))
    batch.fork(first, Request([1, 2, 3], GenerationConfig(5), NoDrafter(), None))
    batch.leave(first)
    assert batch.step() == [] and len(batch) == 0
