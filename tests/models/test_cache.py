"""KV caches: `StaticKVCache` itself, and the rollback invariant of every Target backend.

Rollback invariant: whatever sequence of appends and rollbacks led to a cached sequence S, the
logits the target returns for new tokens equal those of a fresh forward over S + new tokens.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from target_helpers import OnCache

from specdecode.core.budget import DraftBudget
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import GenerationConfig
from specdecode.drafters.draft_model import DraftModel
from specdecode.models.cache import StaticKVCache
from specdecode.models.decoder import NativeDecoder
from specdecode.models.hf_target import HFTarget

V = 64

# --- StaticKVCache ------------------------------------------------------------------------------


def kv(heads: int, T: int, dim: int, start: float) -> torch.Tensor:
    return torch.arange(heads * T * dim, dtype=torch.float32).view(heads, T, dim) + start


def write(cache: StaticKVCache, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
    """What a kernel does: k, v ([heads, T, dim]) at positions start..start+T of `layer`."""
    cache.keys[layer, :, start : start + k.shape[1]] = k
    cache.values[layer, :, start : start + k.shape[1]] = v


def test_static_cache_grows_capacity_beyond_initial_size_and_keeps_contents():
    cache = StaticKVCache(3, 2, 4, capacity=4, max_capacity=64, dtype=torch.float32)
    assert cache.capacity == 4
    written = []
    for step in range(7):  # 7 x 3 = 21 positions > 4
        T = 3
        cache.reserve(T)
        assert cache.capacity >= cache.length + T
        k, v = kv(2, T, 4, 1000 * step), kv(2, T, 4, -1000 * step)
        for layer in range(3):
            write(cache, layer, cache.length, k + layer, v + layer)
        cache.length += T
        written.append((k, v))
    assert cache.capacity > 4
    assert cache.capacity <= 64
    keys = torch.cat([k for k, _ in written], 1)
    values = torch.cat([v for _, v in written], 1)
    for layer in range(3):
        assert torch.equal(cache.keys[layer, :, : cache.length], keys + layer)
        assert torch.equal(cache.values[layer, :, : cache.length], values + layer)


def test_a_copy_holds_the_same_entries_and_is_independent():
    cache = StaticKVCache(2, 2, 4, capacity=8, max_capacity=64, dtype=torch.float32)
    cache.reserve(5)
    for layer in range(2):
        write(cache, layer, 0, kv(2, 5, 4, 10 * layer), kv(2, 5, 4, -10 * layer))
    cache.length = 5
    before = cache.keys[:, :, :5].clone()
    copy = cache.copy()
    assert copy.length == 5 and copy.max_capacity == 64
    assert torch.equal(copy.keys[:, :, :5], cache.keys[:, :, :5])
    assert torch.equal(copy.values[:, :, :5], cache.values[:, :, :5])
    write(copy, 0, 0, kv(2, 1, 4, 99), kv(2, 1, 4, 99))
    copy.rollback(2)
    assert cache.length == 5 and torch.equal(cache.keys[:, :, :5], before)
    assert not torch.equal(copy.keys[:, :, :5], before)


def test_static_cache_grows_by_doubling_at_least():
    cache = StaticKVCache(1, 1, 2, capacity=4, max_capacity=100, dtype=torch.float32)
    cache.reserve(5)
    assert cache.capacity == 8
    cache.length = 8
    cache.reserve(30)  # needs 38 > 2 x 8
    assert cache.capacity == 38
    cache.length = 38
    cache.reserve(1)
    assert cache.capacity == 76
    cache.length = 76
    cache.reserve(24)  # doubling would exceed the maximum: capped
    assert cache.capacity == 100


def test_static_cache_initial_capacity_is_capped_by_max_capacity():
    cache = StaticKVCache(1, 1, 2, capacity=1024, max_capacity=16, dtype=torch.float32)
    assert cache.capacity == 16


def test_static_cache_overflow_raises():
    cache = StaticKVCache(1, 1, 2, capacity=4, max_capacity=8, dtype=torch.float32)
    cache.reserve(8)
    cache.length = 6
    with pytest.raises(ValueError, match="overflow"):
        cache.reserve(3)


def test_padding_a_cache_keeps_its_entries_and_appends_zeros_growing_capacity():
    cache = StaticKVCache(2, 1, 2, capacity=2, max_capacity=16, dtype=torch.float32)
    cache.reserve(2)
    for layer in range(2):
        write(cache, layer, 0, kv(1, 2, 2, 1.0), kv(1, 2, 2, 5.0))
    cache.length = 2
    cache.keys[:, :, 2:] = 7.0  # what a rolled-back forward left behind
    cache.pad(10)
    assert cache.length == 10 and cache.capacity >= 10
    assert torch.equal(cache.keys[1, :, :2], kv(1, 2, 2, 1.0))
    assert torch.equal(cache.values[0, :, :2], kv(1, 2, 2, 5.0))
    assert not cache.keys[:, :, 2:10].any() and not cache.values[:, :, 2:10].any()
    with pytest.raises(ValueError, match="cannot pad a cache of 10 entries to 4"):
        cache.pad(4)
    with pytest.raises(ValueError, match="overflow"):
        cache.pad(17)


def test_static_cache_rollback_moves_length_and_rejects_growing():
    cache = StaticKVCache(1, 1, 2, capacity=4, max_capacity=8, dtype=torch.float32)
    cache.reserve(4)
    cache.length = 4
    cache.rollback(1)
    assert cache.length == 1
    cache.rollback(1)
    cache.rollback(0)
    assert cache.length == 0
    with pytest.raises(ValueError, match="cannot roll a cache of 0 entries back to 1"):
        cache.rollback(1)


# --- rollback invariant for the Target backends -------------------------------------------------


def make_target(backend: str, hf_model):
    return NativeDecoder.from_hf(hf_model) if backend == "native" else HFTarget(hf_model)


def on_cache(backend: str, hf_model) -> OnCache:
    return OnCache(make_target(backend, hf_model))


def random_walk(target, fresh, seed: int, steps: int = 25) -> None:
    """Random appends (1..5 tokens) and rollbacks; after each append compare with `fresh`."""
    rng = random.Random(seed)
    sequence: list[int] = []
    for _ in range(steps):
        if sequence and rng.random() < 0.35:
            keep = rng.randint(0, len(sequence))
            target.rollback(keep)
            sequence = sequence[:keep]
        else:
            new = [rng.randrange(V) for _ in range(rng.randint(1, 5))]
            logits = target.forward(torch.tensor(new))
            sequence += new
            fresh.reset()
            expected = fresh.forward(torch.tensor(sequence))[-len(new):]
            torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
        assert target.length == len(sequence)


@pytest.mark.parametrize("backend", ["native", "hf"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rollback_then_forward_equals_fresh_forward(backend, seed, tiny_llama):
    model = tiny_llama(seed, vocab=V, layers=3)
    random_walk(on_cache(backend, model), on_cache(backend, model), seed)


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_a_new_cache_is_empty_and_independent_of_the_others(backend, tiny_llama):
    model = tiny_llama(0, vocab=V)
    target = make_target(backend, model)
    tokens = torch.tensor([5, 9, 2, 33, 7])
    busy = OnCache(target)
    first = busy.forward(tokens)
    busy.forward(torch.tensor([1, 2, 3]))
    fresh = OnCache(target)  # the same weights, a new sequence
    assert fresh.length == 0
    torch.testing.assert_close(fresh.forward(tokens), first, atol=1e-5, rtol=0)
    assert busy.length == 8


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_rollback_to_current_length_is_a_no_op(backend, tiny_llama):
    model = tiny_llama(0, vocab=V)
    target = on_cache(backend, model)
    target.forward(torch.tensor([5, 9, 2]))
    target.rollback(3)
    assert target.length == 3
    fresh = on_cache(backend, model)
    torch.testing.assert_close(target.forward(torch.tensor([4])),
                               fresh.forward(torch.tensor([5, 9, 2, 4]))[-1:], atol=1e-4, rtol=0)


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_draft_model_cache_reuse_gives_same_greedy_draft_as_from_scratch(backend, tiny_llama):
    """DraftModel keeps its own cache between proposals and rolls it back to the longest prefix
    it shares with the new context; its draft must equal a draft computed from an empty cache."""
    model = tiny_llama(7, vocab=V, layers=2)
    drafter = DraftModel(make_target(backend, model))

    def sequence(context: list[int], drafter: DraftModel) -> SimpleNamespace:
        seq = SimpleNamespace(context=torch.tensor(context), sampling=SamplingParams(),
                              draw=None, drafter_state=None, constraint=None,
                              config=GenerationConfig())
        drafter.start(seq)
        return seq

    rng = random.Random(3)
    context = [rng.randrange(V) for _ in range(6)]
    seq = sequence(context, drafter)
    for step in range(12):
        k = rng.randint(1, 5)
        seq.context = torch.tensor(context)
        draft = drafter.propose(seq, DraftBudget(k, k))
        fresh = DraftModel(make_target(backend, model))
        scratch = fresh.propose(sequence(context, fresh), DraftBudget(k, k))
        assert draft.tokens.tolist() == scratch.tokens.tolist()
        assert draft.q is None and draft.forwards == k
        assert draft.tokens.shape == (k,)
        # the engine then keeps a prefix of the draft and adds some other token
        accepted = rng.randint(0, k)
        context += draft.tokens[:accepted].tolist() + [rng.randrange(V)]
        if step == 6:  # the same sequence's context rewritten: the cache must follow
            context = [rng.randrange(V) for _ in range(4)]


def test_compact_works_after_the_cache_grew_inside_inference_mode():
    """A forward (in inference mode) that grows the cache reallocates it as inference tensors;
    the engine compacts outside inference mode and must still be able to write."""
    cache = StaticKVCache(1, 1, 2, capacity=2, max_capacity=16, dtype=torch.float32)
    with torch.inference_mode():
        cache.reserve(6)
        for p in range(6):
            write(cache, 0, p, torch.full((1, 1, 2), float(p)), torch.full((1, 1, 2), float(p)))
        cache.length = 6
    cache.compact(2, [3, 5])
    assert cache.length == 4
    assert cache.keys[0, 0, :4, 0].tolist() == [0.0, 1.0, 3.0, 5.0]
