"""Kept prompts on disk (`core.prompt_store`): a later process's prefix cache reads a saved prompt's
cache bit for bit, so a prompt after a restart makes exactly the cache a whole prefill makes; a
file that fails its checks is deleted, never used; the disk bound drops the least recently used."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.engine import Batch, Request
from specdecode.core.prefix_cache import PrefixCache
from specdecode.core.prompt_store import PromptStore
from specdecode.core.sequence import GenerationConfig
from specdecode.drafters.plain import NoDrafter
from specdecode.models import load_model

BUDGET = 1 << 30


@pytest.fixture(scope="module")
def native(tiny_real_vocab_model):
    return load_model(str(tiny_real_vocab_model))


def _prompt(seed: int, n: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _store(native, directory, identity: str | None = None, max_bytes: int = BUDGET):
    return PromptStore(directory, identity or native.identity, native.target.new_cache,
                       max_bytes)


def _read(batch: Batch, prompt: list[int]):
    """Join `prompt` and step until it is read; the sequence and its cache's entries."""
    seq = batch.join(Request(prompt, GenerationConfig(1), NoDrafter(), None))
    while seq.to_prefill:
        batch.step()
    n = seq.cache.length
    return seq, torch.cat([seq.cache.keys[:, :, :n], seq.cache.values[:, :, :n]])


def test_a_later_process_reads_a_saved_prompt_and_makes_a_whole_prefills_cache(native,
                                                                                tmp_path):
    vocab = native.target.vocab_size
    first = _prompt(0, 70, vocab)
    second = first[:50] + _prompt(1, 40, vocab)
    before = PrefixCache(BUDGET, _store(native, tmp_path))
    _read(Batch(native.target, prefixes=before), first)
    before.store.close()
    after = PrefixCache(BUDGET, _store(native, tmp_path))  # a restarted server's: memory empty
    assert len(after.store.index) == 1 and not after.kept
    seq, restored = _read(Batch(native.target, prefixes=after), second)
    _, whole = _read(Batch(native.target), second)
    assert seq.stats.cached_prompt_tokens == 50
    assert torch.equal(restored, whole)


def test_a_file_that_fails_its_checks_is_deleted_not_used(native, tmp_path):
    vocab = native.target.vocab_size
    prompt = _prompt(2, 40, vocab)
    kept = PrefixCache(BUDGET, _store(native, tmp_path))
    _read(Batch(native.target, prefixes=kept), prompt)
    kept.store.close()
    (path,) = kept.store.index
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # a bit of the entries flipped on disk
    path.write_bytes(bytes(data))
    later = PrefixCache(BUDGET, _store(native, tmp_path))
    assert later.lookup(torch.tensor(prompt + [7])) == (0, None)
    assert not path.exists() and not later.store.index
    # another model's (or kernel path's) saves are another directory's: never read
    other = _store(native, tmp_path, identity=native.identity + "|other")
    assert other.dir != kept.store.dir and not other.index


def test_the_disk_bound_drops_the_least_recently_used_and_a_longer_prompt_replaces_its_prefix(
        native, tmp_path):
    vocab = native.target.vocab_size
    a, b = _prompt(3, 30, vocab), _prompt(4, 30, vocab)
    store = _store(native, tmp_path)
    batch = Batch(native.target, prefixes=PrefixCache(BUDGET, store))
    _read(batch, a)  # kept: a prompt but its last token (pending, read by the first step)
    _read(batch, a + b)  # holds a: a's file goes
    store.flush()
    assert [t.tolist() for t in store.index.values()] == [(a + b)[:-1]]
    one_file = store.held
    small = _store(native, tmp_path, max_bytes=one_file + one_file // 2)
    batch = Batch(native.target, prefixes=PrefixCache(BUDGET, small))
    _read(batch, b)  # two files do not fit: the older (a + b) goes
    small.flush()
    assert [t.tolist() for t in small.index.values()] == [b[:-1]]
