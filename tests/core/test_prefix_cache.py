"""Kept prompt caches (`core.prefix_cache`): which kept prompt a new one takes its prefix from and
what is kept, and, on a native target, that a kept prefix and a prefill of the rest make the cache
a whole prefill makes, bit for bit, so that no output changes."""

from __future__ import annotations

import pytest
import torch
from mock_target import MockTarget

from specdecode.core.engine import Batch, Request, collect
from specdecode.core.prefix_cache import PrefixCache
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter
from specdecode.models import load_model


class _Cache:
    """A KV cache's bookkeeping: which tokens' entries it holds."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = list(tokens)
        self.length = len(tokens)
        self.nbytes = len(tokens)  # a byte a position, so the bound reads as positions

    def copy(self) -> "_Cache":
        return _Cache(self.tokens[: self.length])

    def rollback(self, length: int) -> None:
        self.length = length


def _keep(prefixes: PrefixCache, tokens: list[int]) -> None:
    prefixes.keep(torch.tensor(tokens), _Cache(tokens))


def _lookup(prefixes: PrefixCache, tokens: list[int]) -> tuple[int, list[int] | None]:
    n, cache = prefixes.lookup(torch.tensor(tokens))
    return n, None if cache is None else cache.tokens[: cache.length]


def test_a_prompt_takes_the_longest_common_prefix_of_the_kept_prompts():
    prefixes = PrefixCache(100)
    _keep(prefixes, [1, 2, 3, 4, 5])
    _keep(prefixes, [1, 2, 7, 8])
    assert _lookup(prefixes, [1, 2, 3, 4, 9, 9]) == (4, [1, 2, 3, 4])
    assert _lookup(prefixes, [1, 2, 7, 8, 8]) == (4, [1, 2, 7, 8])
    assert _lookup(prefixes, [1, 2, 3]) == (3, [1, 2, 3])  # a kept prompt longer than the new
    assert _lookup(prefixes, [5, 1, 2]) == (0, None)


def test_a_kept_cache_is_never_changed_by_what_its_copies_go_through():
    prefixes = PrefixCache(100)
    _keep(prefixes, [1, 2, 3, 4])
    n, cache = prefixes.lookup(torch.tensor([1, 2, 9]))
    cache.tokens[:] = [0, 0]
    assert n == 2 and _lookup(prefixes, [1, 2, 3, 4, 5]) == (4, [1, 2, 3, 4])


def test_a_kept_prefix_of_a_new_prompt_is_replaced_and_a_prefix_of_a_kept_one_adds_nothing():
    prefixes = PrefixCache(100)
    _keep(prefixes, [1, 2, 3])
    _keep(prefixes, [1, 2, 3, 4, 5])  # holds everything the first did
    _keep(prefixes, [1, 2])  # already held
    assert [k.tolist() for k, _ in prefixes.kept.values()] == [[1, 2, 3, 4, 5]]
    assert prefixes.held == 5


def test_the_least_recently_used_go_first_beyond_the_bound():
    prefixes = PrefixCache(10)
    _keep(prefixes, [1, 1, 1, 1])
    _keep(prefixes, [2, 2, 2, 2])
    _lookup(prefixes, [1, 1, 5])  # used: now the most recent
    _keep(prefixes, [3, 3, 3, 3])  # 12 > 10: the least recently used goes
    assert sorted(k.tolist()[0] for k, _ in prefixes.kept.values()) == [1, 3]
    assert prefixes.held == 8
    _keep(prefixes, list(range(11)))  # larger than the bound: not kept
    assert prefixes.held == 8


def test_a_target_whose_rows_depend_on_the_call_keeps_nothing():
    assert Batch(MockTarget(), prefixes=PrefixCache(100)).prefixes is None


@pytest.fixture(scope="module")
def native(tiny_real_vocab_model):
    return load_model(str(tiny_real_vocab_model))


def _prefilled(batch: Batch, prompt: list[int], **config) -> torch.Tensor:
    """Join `prompt`, step until it is read; its cache's keys and values then."""
    seq = batch.join(Request(prompt, GenerationConfig(1, **config), NoDrafter(), None))
    while seq.to_prefill:
        batch.step()
    n = seq.cache.length
    return seq, torch.cat([seq.cache.keys[:, :, :n], seq.cache.values[:, :, :n]])


def _prompt(seed: int, n: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_a_kept_prefix_and_a_prefill_of_the_rest_make_a_whole_prefills_cache(native):
    vocab = native.target.vocab_size
    first = _prompt(0, 70, vocab)
    second = first[:50] + _prompt(1, 40, vocab)  # shares 50 tokens, not on a chunk boundary
    batch = Batch(native.target, prefixes=PrefixCache(1 << 30))
    _prefilled(batch, first)
    seq, kept = _prefilled(batch, second)
    _, whole = _prefilled(Batch(native.target), second)
    assert seq.stats.cached_prompt_tokens == 50
    assert torch.equal(kept, whole)


def _conversation(target, drafter_limit, prefixes: PrefixCache | None, vocab: int) -> list:
    """Four turns, each prompt the last prompt, its answer and a new message (greedy)."""
    batch = Batch(target, prefixes=prefixes)
    prompt, out = _prompt(2, 20, vocab), []
    for turn in range(4):
        drafter, limit = drafter_limit()
        seq = batch.join(Request(prompt, GenerationConfig(8), drafter, limit))
        chunks = []
        while seq.finish_reason is None:
            chunks += [chunk for s, chunk in batch.step() if s is seq]
        result = collect(chunks)
        out.append((result.token_ids, result.stats.cached_prompt_tokens))
        prompt = prompt + result.token_ids + _prompt(10 + turn, 5, vocab)
    return out


@pytest.mark.parametrize("drafter_limit", [lambda: (NoDrafter(), None),
                                           lambda: (PromptLookup(3, 1), DraftLimit(4, 4))],
                         ids=["plain", "lookup"])
def test_a_conversations_answers_are_the_same_with_kept_prefixes(native, drafter_limit):
    vocab = native.target.vocab_size
    kept = _conversation(native.target, drafter_limit, PrefixCache(1 << 30), vocab)
    fresh = _conversation(native.target, drafter_limit, None, vocab)
    assert [ids for ids, _ in kept] == [ids for ids, _ in fresh]
    assert [cached for _, cached in fresh] == [0, 0, 0, 0]
    # each turn after the first copies the last turn's prompt (all but its pending token)
    assert [cached for _, cached in kept[1:]] == [19, 19 + 8 + 5, 19 + 2 * 13]


def test_a_request_for_prompt_logprobs_reads_its_whole_prompt(native):
    vocab = native.target.vocab_size
    prompt = _prompt(3, 30, vocab)
    batch = Batch(native.target, prefixes=PrefixCache(1 << 30))
    _prefilled(batch, prompt)
    seq, _ = _prefilled(batch, prompt + [5], prompt_logprobs=0)
    assert seq.stats.cached_prompt_tokens == 0 and len(seq.prompt_logprobs) == len(prompt) + 1
