"""`Kernels.attention` on every kernel path and both cache dtypes (fp32, fp16): rotary, cache write
and attention against torch, tree masks, and a row's result bitwise independent of the rows that
share its call."""

import sys

import pytest
import torch
import torch.nn.functional as F

from specdecode.kernels import ROW_INVARIANT_ROWS, CacheRows
from specdecode.rope import rotate, tables

H, G, D, CAPACITY = 6, 2, 32, 128
TREE = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
# a root and three nodes: 1 and 2 children of the root, 3 a child of 1


@pytest.fixture(params=[torch.float32, torch.float16], ids=["fp32-cache", "fp16-cache"])
def kv(request) -> torch.dtype:
    return request.param


def _case(T: int, seed: int, kv: torch.dtype):
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(T, (H + 2 * G) * D, generator=gen)
    keys = torch.randn(G, CAPACITY, D, generator=gen).to(kv)  # past start: stale garbage
    values = torch.randn(G, CAPACITY, D, generator=gen).to(kv)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    cos, sin = tables(inv_freq, 1.0, CAPACITY)
    return qkv, keys, values, cos, sin


def attend(kernel_path, qkv, keys, values, cos, sin, positions, mask, start, window=0,
           scale=D ** -0.5):
    """One sequence's rows through `Kernels.attention` (keys, values: one layer's cache)."""
    return together(kernel_path, qkv, [CacheRows(keys, values, start, qkv.shape[0], mask)], cos,
                    sin, positions, window, scale)


def together(kernel_path, qkv, caches, cos, sin, positions, window=0, scale=D ** -0.5):
    """Several sequences' rows in one call; each cache ([G, capacity, d]) as layer 1 of three."""
    stacked = [CacheRows(torch.stack([torch.zeros_like(c.keys), c.keys, torch.zeros_like(c.keys)]),
                         torch.stack([torch.zeros_like(c.values), c.values,
                                      torch.zeros_like(c.values)]), c.start, c.rows, c.mask)
               for c in caches]
    out = kernel_path.attention(qkv, kernel_path.attention_inputs(stacked), 1, cos, sin,
                                positions, H, window, scale)
    for c, s in zip(caches, stacked):  # what the kernel wrote, back into the one-layer caches
        c.keys.copy_(s.keys[1])
        c.values.copy_(s.values[1])
        assert not s.keys[0].any() and not s.keys[2].any()  # other layers untouched
    return out


def _reference(qkv, keys, values, cos, sin, positions, mask, start, window=0, scale=None):
    """torch: rotate, write the cache (rounding to its dtype), scaled_dot_product_attention;
    with a window, keys `window` or more positions behind a row's are masked (transformers'
    sliding_window_overlay: key position > query position - window)."""
    T = qkv.shape[0]
    heads = qkv.view(T, -1, D).transpose(0, 1)
    qk = rotate(heads[: H + G], cos[positions], sin[positions])
    keys, values = keys.clone(), values.clone()
    keys[:, start : start + T], values[:, start : start + T] = qk[H:], heads[H + G :]
    if mask is None:
        mask = torch.arange(start + T)[None, :] <= torch.arange(start, start + T)[:, None]
    if window:
        key_positions = torch.cat([torch.arange(start), positions])
        mask = mask & (key_positions[None, :] > positions[:, None] - window)
    o = F.scaled_dot_product_attention(qk[:H][None], keys[None, :, : start + T].float(),
                                       values[None, :, : start + T].float(), attn_mask=mask,
                                       scale=scale, enable_gqa=True)[0]
    return o.transpose(0, 1).reshape(T, H * D), keys, values


@pytest.mark.parametrize("T, start", [(1, 0), (1, 20), (5, 0), (8, 17), (20, 3),
                                      (ROW_INVARIANT_ROWS + 3, 10)])  # the last: a long prefill
def test_attention_kernel_equals_rotary_cache_write_and_sdpa_causal(kernel_path, T, start, kv):
    qkv, keys, values, cos, sin = _case(T, seed=T * 100 + start, kv=kv)
    positions = torch.arange(start, start + T)
    want, want_keys, want_values = _reference(qkv, keys, values, cos, sin, positions, None, start)
    got = attend(kernel_path, qkv, keys, values, cos, sin, positions, None, start)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(keys, want_keys, rtol=1e-6, atol=1e-6)
    assert torch.equal(values, want_values)


@pytest.mark.parametrize("T, start", [(1, 30), (6, 20), (ROW_INVARIANT_ROWS + 3, 10)])
def test_attention_kernel_with_a_window_sees_only_the_keys_within_it(kernel_path, T, start, kv):
    """Mistral's and Gemma's local layers: a sliding window of 8 over a prefix of 10 or more,
    and Gemma's score scale (1/sqrt(query_pre_attn_scalar), not 1/sqrt(d))."""
    qkv, keys, values, cos, sin = _case(T, seed=T + start, kv=kv)
    positions = torch.arange(start, start + T)
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, None, start, window=8,
                            scale=0.1)
    got = attend(kernel_path, qkv, keys, values, cos, sin, positions, None, start, window=8,
                 scale=0.1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    unwindowed, _, _ = _reference(qkv, keys, values, cos, sin, positions, None, start, scale=0.1)
    assert (got - unwindowed).abs().max() > 1e-3  # the window changed what the rows saw


def test_a_window_applies_to_a_tree_by_its_nodes_positions(kernel_path, kv):
    T, start = 4, 10
    qkv, keys, values, cos, sin = _case(T, seed=17, kv=kv)
    positions = torch.tensor([10, 11, 11, 12])
    mask = torch.ones(T, start + T, dtype=torch.bool)
    mask[:, start:] = TREE
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, mask, start, window=3)
    got = attend(kernel_path, qkv, keys, values, cos, sin, positions, mask, start, window=3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_attention_kernel_follows_a_tree_mask_and_its_positions(kernel_path, kv):
    T, start = 4, 10
    qkv, keys, values, cos, sin = _case(T, seed=7, kv=kv)
    positions = torch.tensor([10, 11, 11, 12])
    mask = torch.ones(T, start + T, dtype=torch.bool)
    mask[:, start:] = TREE
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, mask, start)
    got = attend(kernel_path, qkv, keys, values, cos, sin, positions, mask, start)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_tree_node_computes_bitwise_what_its_path_computes_as_a_chain(kernel_path, kv):
    start = 10
    qkv, keys, values, cos, sin = _case(4, seed=8, kv=kv)
    mask = torch.ones(4, start + 4, dtype=torch.bool)
    mask[:, start:] = TREE
    tree = attend(kernel_path, qkv.clone(), keys.clone(), values.clone(), cos, sin,
                                 torch.tensor([10, 11, 11, 12]), mask, start)
    path = [0, 1, 3]  # root -> node 1 -> node 3
    chain = attend(kernel_path, qkv[path].clone(), keys.clone(), values.clone(), cos, sin,
                                  torch.arange(start, start + 3), None, start)
    assert torch.equal(tree[path], chain)


def test_a_rows_attention_is_bitwise_the_same_scored_alone_or_with_later_rows(kernel_path, kv):
    T, start = 6, 12
    qkv, keys, values, cos, sin = _case(T, seed=3, kv=kv)
    together = attend(kernel_path, qkv.clone(), keys.clone(), values.clone(), cos, sin,
                                     torch.arange(start, start + T), None, start)
    for t in range(T):  # rows 0..t-1 first, then row t on its own
        k, v = keys.clone(), values.clone()
        if t:
            attend(kernel_path, qkv[:t].clone(), k, v, cos, sin, torch.arange(start, start + t),
                                  None, start)
        alone = attend(kernel_path, qkv[t : t + 1].clone(), k, v, cos, sin,
                                      torch.tensor([start + t]), None, start + t)
        assert torch.equal(alone[0], together[t])


def test_several_sequences_in_one_call_each_get_what_they_get_alone(kernel_path, kv):
    """Three sequences (a causal step of 3 rows, one row, a tree) with their own caches and
    starts in one call: each sequence's rows, cache writes included, are bitwise those of its own
    call."""
    cases = [_case(3, seed=11, kv=kv), _case(1, seed=12, kv=kv), _case(4, seed=13, kv=kv)]
    starts = [5, 40, 10]
    mask = torch.ones(4, 14, dtype=torch.bool)
    mask[:, 10:] = TREE
    masks = [None, None, mask]
    positions = [torch.arange(5, 8), torch.tensor([40]), torch.tensor([10, 11, 11, 12])]
    cos, sin = cases[0][3], cases[0][4]
    alone, caches = [], []
    for (qkv, keys, values, _, _), start, m, pos in zip(cases, starts, masks, positions):
        k, v = keys.clone(), values.clone()
        alone.append((attend(kernel_path, qkv.clone(), k, v, cos, sin, pos, m, start), k, v))
        caches.append(CacheRows(keys, values, start, qkv.shape[0], m))
    both = together(kernel_path, torch.cat([c[0] for c in cases]), caches, cos, sin,
                    torch.cat(positions))
    assert torch.equal(both, torch.cat([a[0] for a in alone]))
    for (_, k, v), c in zip(alone, caches):
        assert torch.equal(c.keys, k) and torch.equal(c.values, v)


def test_a_long_prefill_and_a_step_in_one_call_each_get_what_they_get_alone(kernel_path, kv):
    T = ROW_INVARIANT_ROWS + 6
    (qkv, keys, values, cos, sin) = _case(T, 21, kv=kv)
    qkv2, keys2, values2, _, _ = _case(2, 22, kv=kv)
    k, v, k2, v2 = keys.clone(), values.clone(), keys2.clone(), values2.clone()
    long = attend(kernel_path, qkv.clone(), k, v, cos, sin, torch.arange(T), None, 0)
    step = attend(kernel_path, qkv2.clone(), k2, v2, cos, sin, torch.arange(7, 9), None, 7)
    both = together(kernel_path, torch.cat([qkv2, qkv]),
                    [CacheRows(keys2, values2, 7, 2), CacheRows(keys, values, 0, T)], cos, sin,
                    torch.cat([torch.arange(7, 9), torch.arange(T)]))
    assert torch.equal(both, torch.cat([step, long]))
    assert torch.equal(keys, k) and torch.equal(keys2, k2)


def test_an_fp16_cache_holds_each_value_rounded_to_nearest_even_as_torch_rounds_it(kernel_path):
    """v is written unrotated: the cache must hold torch's fp16 rounding of each value, ties,
    subnormals, overflow and signed zeros included (the torch path writes the cache that way)."""
    edge = torch.tensor([0.0, -0.0, 1.0, 65504.0, 65519.0, 65520.0, -70000.0, float("inf"),
                         2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -26,
                         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 3 * 2.0 ** -25, 1e-5, -3.3e-6])
    gen = torch.Generator().manual_seed(5)
    spread = torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-30, 17, (4096,),
                                                                         generator=gen).float())
    numbers = torch.cat([edge, spread])
    T = -(-numbers.numel() // (G * D))
    qkv, keys, values, cos, sin = _case(T, seed=9, kv=torch.float16)
    v = torch.zeros(T * G * D)
    v[: numbers.numel()] = numbers
    qkv.view(T, -1, D)[:, H + G :] = v.view(T, G, D)
    attend(kernel_path, qkv, keys, values, cos, sin, torch.arange(T), None, 0)
    written = values[:, :T].transpose(0, 1).reshape(-1)[: numbers.numel()]
    assert torch.equal(written.view(torch.int16), numbers.half().view(torch.int16))


@pytest.mark.parametrize("heads", [12, 14, 16])
def test_a_kv_group_of_six_to_eight_heads_equals_sdpa_and_a_row_alone(kernel_path, kv, heads,
                                                                      monkeypatch):
    """Groups of 6, 7 and 8 query heads (Qwen2.5-Coder-1.5B's 12 heads over 2 KV heads, the
    0.5B's 14): paths weigh their values in one pass of up to 8 heads, 2 vectors each."""
    monkeypatch.setattr(sys.modules[__name__], "H", heads)
    T, start = 9, 20
    qkv, keys, values, cos, sin = _case(T, seed=heads, kv=kv)
    positions = torch.arange(start, start + T)
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, None, start)
    got = attend(kernel_path, qkv.clone(), keys.clone(), values.clone(), cos, sin, positions, None,
                 start)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    k, v = keys.clone(), values.clone()
    attend(kernel_path, qkv[: T - 1].clone(), k, v, cos, sin, positions[: T - 1], None, start)
    alone = attend(kernel_path, qkv[T - 1 :].clone(), k, v, cos, sin, positions[T - 1 :], None,
                   start + T - 1)
    assert torch.equal(alone[0], got[T - 1])


def test_rows_behind_more_keys_than_one_block_each_equal_sdpa_and_themselves_alone(kernel_path,
                                                                                   kv, monkeypatch):
    """12 rows (a block of 8 and one of 4) behind 600 cached keys: the blocks take their keys 256
    at a time (a row's sums carried from one part to the next), and each row still gets what it
    gets alone and what sdpa gives."""
    monkeypatch.setattr(sys.modules[__name__], "CAPACITY", 640)
    T, start = 12, 600
    qkv, keys, values, cos, sin = _case(T, seed=7, kv=kv)
    positions = torch.arange(start, start + T)
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, None, start)
    got = attend(kernel_path, qkv.clone(), keys.clone(), values.clone(), cos, sin, positions, None,
                 start)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for t in (0, 7, 8, T - 1):
        k, v = keys.clone(), values.clone()
        if t:
            attend(kernel_path, qkv[:t].clone(), k, v, cos, sin, positions[:t], None, start)
        alone = attend(kernel_path, qkv[t : t + 1].clone(), k, v, cos, sin, positions[t : t + 1],
                       None, start + t)
        assert torch.equal(alone[0], got[t])
