"""Log-probabilities: each confirmed token's is the model's own (raw log_softmax at the row that
chose it), equal to one teacher-forced forward over the whole text, speculative or not, chains,
trees and batched; they cost no forward; a prompt's come from its prefill, and a request for no
new tokens scores its prompt and stops."""

from __future__ import annotations

import math

import pytest
import torch
from mock_target import MockTarget
from test_distribution import suffix_drafter

from specdecode.core.batch import Request, generate_batch
from specdecode.core.engine import Batch, collect, stream
from specdecode.core.logprobs import token_logprobs
from specdecode.core.penalties import Penalties
from specdecode.core.sampling import SamplingParams, probabilities
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError

VOCAB = 16
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [1, 2, 3] * 8, [7, 7, 8, 9, 3, 1, 3, 1] * 2]
TOP = 5


def target() -> MockTarget:
    return MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)


def teacher_forced(t: MockTarget, tokens: list[int]) -> torch.Tensor:
    """[len(tokens) - 1, V]: log_softmax of the logits that score tokens 1.. in one forward."""
    hidden = t.hidden(t.new_cache(), torch.tensor(tokens[:-1]))
    return torch.log_softmax(t.logits(hidden).float(), -1)


def run(t, prompt, drafter, limit, **config):
    chunks = list(stream(t, drafter, prompt, GenerationConfig(30, **config), limit))
    return collect(chunks), [lp for c in chunks for lp in c.logprobs or []], chunks


def test_token_logprobs_are_log_softmax_at_the_token_and_the_rows_top():
    logits = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    first, second = token_logprobs(logits, [0, 2], top=2)
    z = math.log(math.e + math.e ** 2 + 1)
    assert first.token == 0 and math.isclose(first.logprob, 1 - z, rel_tol=1e-6)
    assert [t for t, _ in first.top] == [1, 0]
    assert math.isclose(first.top[0][1], 2 - z, rel_tol=1e-6)
    assert [t for t, _ in second.top] == [2, 0] and second.top[0][1] == second.logprob
    assert token_logprobs(logits, [0, 2], top=0)[0].top == ()


@pytest.mark.parametrize("drafter, limit", [
    (NoDrafter(), None),
    (PromptLookup(3, 1), DraftLimit(6, 6)),
    (suffix_drafter(), DraftLimit(8, 4)),
], ids=["plain", "lookup-chain", "suffix-tree"])
@pytest.mark.parametrize("config", [
    {}, {"sampling": SamplingParams(0.7, top_k=4), "seed": 3,
         "penalties": Penalties(frequency=0.5)},
], ids=["greedy", "sampled-with-penalties"])
def test_each_tokens_logprob_is_the_models_own_at_its_position(drafter, limit, config):
    """Raw: temperature, truncation and penalties do not enter; one teacher-forced forward over
    prompt and output gives the same values (1e-4) and the same alternatives."""
    t = target()
    for prompt in PROMPTS:
        result, logprobs, _ = run(t, prompt, drafter, limit, logprobs=TOP, **config)
        assert [lp.token for lp in logprobs] == result.token_ids
        reference = teacher_forced(t, prompt + result.token_ids)[len(prompt) - 1:]
        got = torch.tensor([lp.logprob for lp in logprobs])
        want = reference.gather(-1, torch.tensor(result.token_ids)[:, None]).flatten()
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
        top = torch.topk(reference, TOP, -1)
        assert [[i for i, _ in lp.top] for lp in logprobs] == top.indices.tolist()
        torch.testing.assert_close(torch.tensor([[v for _, v in lp.top] for lp in logprobs]),
                                   top.values, atol=1e-4, rtol=0)


@pytest.mark.parametrize("drafter, limit", [
    (NoDrafter(), None), (suffix_drafter(), DraftLimit(8, 4)),
], ids=["plain", "suffix-tree"])
def test_sampled_logprobs_are_the_distribution_each_token_was_drawn_from(drafter, limit):
    """sampled_logprobs: the teacher-forced row after penalties, temperature and top-k, as the
    sampler sees it (greedy: all on the token); only alternatives with a chance, speculative or
    not."""
    t, sampling, penalties = target(), SamplingParams(0.7, top_k=4), Penalties(frequency=0.5)
    for prompt in PROMPTS:
        result, logprobs, _ = run(t, prompt, drafter, limit, logprobs=TOP, seed=3,
                                  sampling=sampling, penalties=penalties, sampled_logprobs=True)
        assert [lp.token for lp in logprobs] == result.token_ids
        raw = t.logits(t.hidden(t.new_cache(), torch.tensor((prompt + result.token_ids)[:-1])))
        for k, lp in enumerate(logprobs):
            counts = torch.bincount(torch.tensor(result.token_ids[:k], dtype=torch.long),
                                    minlength=VOCAB).float()  # the frequency penalty's
            row = raw[len(prompt) + k - 1] - penalties.frequency * counts
            want = torch.log(probabilities(row[None], sampling))[0]
            assert lp.logprob == pytest.approx(float(want[lp.token]), abs=1e-4)
            assert len(lp.top) == 4 and all(v > -math.inf for _, v in lp.top)
            assert sum(math.exp(v) for _, v in lp.top) == pytest.approx(1.0, abs=1e-4)
        greedy = run(t, prompt, drafter, limit, logprobs=TOP, sampled_logprobs=True)[1]
        assert all(lp.logprob == 0.0 and lp.top == ((lp.token, 0.0),) for lp in greedy)


def test_speculative_logprobs_equal_plain_decodings():
    t = target()
    accepted = 0
    for prompt in PROMPTS:
        plain = run(t, prompt, NoDrafter(), None, logprobs=TOP)[1]
        result, spec, _ = run(t, prompt, PromptLookup(3, 1), DraftLimit(6, 6), logprobs=TOP)
        accepted += result.stats.accepted
        assert [lp.token for lp in spec] == [lp.token for lp in plain]
        torch.testing.assert_close([lp.logprob for lp in spec], [lp.logprob for lp in plain],
                                   atol=1e-4, rtol=0)
    assert accepted > 0


def test_a_final_eos_has_its_logprob_though_not_its_text():
    t = target()
    result, logprobs, _ = run(t, PROMPTS[0], NoDrafter(), None, logprobs=0)
    k = next(k for k, t in enumerate(result.token_ids) if k and t not in result.token_ids[:k])
    eos = result.token_ids[k]
    chunks = list(stream(t, PromptLookup(3, 1), PROMPTS[0], GenerationConfig(30, logprobs=0),
                         DraftLimit(6, 6), frozenset({eos})))
    ended = collect(chunks)
    assert ended.finish_reason == "stop" and ended.token_ids == result.token_ids[:k]
    assert [lp.token for c in chunks for lp in c.logprobs] == result.token_ids[: k + 1]
    assert [lp.logprob for c in chunks for lp in c.logprobs] == pytest.approx(
        [lp.logprob for lp in logprobs[: k + 1]], abs=1e-4)


def test_batched_logprobs_equal_each_sequence_alone():
    t = target()
    alone = [run(t, p, PromptLookup(3, 1), DraftLimit(6, 6), logprobs=2)[1] for p in PROMPTS]
    reqs = [Request(p, GenerationConfig(30, logprobs=2), PromptLookup(3, 1), DraftLimit(6, 6))
            for p in PROMPTS]
    batch = Batch(t)
    seqs = [batch.join(r) for r in reqs]
    got: dict = {id(s): [] for s in seqs}
    while len(batch):
        for seq, chunk in batch.step():
            got[id(seq)] += chunk.logprobs
    assert [[(lp.token, lp.logprob, lp.top) for lp in got[id(s)]] for s in seqs] == [
        [(lp.token, lp.logprob, lp.top) for lp in a] for a in alone]


def test_logprobs_cost_no_forward(monkeypatch):
    t = target()
    calls = []
    real = t.hidden_batch
    monkeypatch.setattr(t, "hidden_batch", lambda steps: calls.append(1) or real(steps))
    without = run(t, PROMPTS[0], PromptLookup(3, 1), DraftLimit(6, 6))[0]
    forwards, calls[:] = len(calls), []
    with_them = run(t, PROMPTS[0], PromptLookup(3, 1), DraftLimit(6, 6), logprobs=TOP)[0]
    assert len(calls) == forwards == with_them.stats.target_forwards + 1  # + the prefill
    assert with_them.token_ids == without.token_ids


def test_prompt_logprobs_come_from_the_prefill_and_equal_a_teacher_forced_forward():
    t = target()
    prompt = PROMPTS[0] * 3  # 72 tokens: a prefill of two chunks
    result, _, chunks = run(t, prompt, PromptLookup(3, 1), DraftLimit(6, 6), prompt_logprobs=3)
    scored = chunks[0].prompt_logprobs
    assert scored[0] is None and [lp.token for lp in scored[1:]] == prompt[1:]
    assert all(c.prompt_logprobs is None for c in chunks[1:])
    want = teacher_forced(t, prompt).gather(-1, torch.tensor(prompt[1:])[:, None]).flatten()
    torch.testing.assert_close(torch.tensor([lp.logprob for lp in scored[1:]]), want,
                               atol=1e-4, rtol=0)
    assert all(len(lp.top) == 3 for lp in scored[1:])


def test_a_request_for_no_new_tokens_scores_its_prompt_and_stops(monkeypatch):
    t = target()
    calls = []
    real = t.hidden_batch
    monkeypatch.setattr(t, "hidden_batch", lambda steps: calls.append(1) or real(steps))
    chunks = list(stream(t, NoDrafter(), PROMPTS[1], GenerationConfig(0, prompt_logprobs=0),
                         None))
    assert len(chunks) == 1 and chunks[0].token_ids == [] and chunks[0].finish_reason == "length"
    assert [lp.token for lp in chunks[0].prompt_logprobs[1:]] == PROMPTS[1][1:]
    assert len(calls) == 1  # the prefill only: 23 rows
    one = list(stream(t, NoDrafter(), [5], GenerationConfig(0, prompt_logprobs=0), None))
    assert one[0].prompt_logprobs == [None] and one[0].finish_reason == "length"
    results = generate_batch(t, [Request(p, GenerationConfig(0, prompt_logprobs=0), NoDrafter(),
                                         None) for p in PROMPTS], max_batch=2)
    assert [r.token_ids for r in results] == [[]] * 3


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "0 only to score the prompt"),
    ({"logprobs": 21}, r"logprobs must be in \[0, 20\]"),
    ({"prompt_logprobs": -1}, r"prompt logprobs must be in \[0, 20\]"),
])
def test_bad_logprob_settings_are_refused_in_one_line(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        GenerationConfig(**kwargs)
