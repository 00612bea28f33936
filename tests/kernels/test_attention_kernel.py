"""`Kernels.attention` on every kernel path: rotary, cache write and attention against torch, tree
masks, and a row's result bitwise independent of the rows that share its call."""

import pytest
import torch
import torch.nn.functional as F

from specdecode.kernels import ROW_INVARIANT_ROWS
from specdecode.rope import rotate, tables

H, G, D, CAPACITY = 6, 2, 32, 128
TREE = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
# a root and three nodes: 1 and 2 children of the root, 3 a child of 1


def _case(T: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(T, (H + 2 * G) * D, generator=gen)
    keys = torch.randn(G, CAPACITY, D, generator=gen)  # positions >= start are stale garbage
    values = torch.randn(G, CAPACITY, D, generator=gen)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    cos, sin = tables(inv_freq, 1.0, CAPACITY)
    return qkv, keys, values, cos, sin


def _reference(qkv, keys, values, cos, sin, positions, mask, start):
    """torch: rotate, write the cache, scaled_dot_product_attention."""
    T = qkv.shape[0]
    heads = qkv.view(T, -1, D).transpose(0, 1)
    qk = rotate(heads[: H + G], cos[positions], sin[positions])
    keys, values = keys.clone(), values.clone()
    keys[:, start : start + T], values[:, start : start + T] = qk[H:], heads[H + G :]
    if mask is None:
        mask = torch.arange(start + T)[None, :] <= torch.arange(start, start + T)[:, None]
    o = F.scaled_dot_product_attention(qk[:H][None], keys[None, :, : start + T],
                                       values[None, :, : start + T], attn_mask=mask,
                                       enable_gqa=True)[0]
    return o.transpose(0, 1).reshape(T, H * D), keys, values


@pytest.mark.parametrize("T, start", [(1, 0), (1, 20), (5, 0), (8, 17), (20, 3),
                                      (ROW_INVARIANT_ROWS + 3, 10)])  # the last: a long prefill
def test_attention_kernel_equals_rotary_cache_write_and_sdpa_causal(kernel_path, T, start):
    qkv, keys, values, cos, sin = _case(T, seed=T * 100 + start)
    positions = torch.arange(start, start + T)
    want, want_keys, want_values = _reference(qkv, keys, values, cos, sin, positions, None, start)
    got = kernel_path.attention(qkv, keys, values, cos, sin, positions, None, start, H)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(keys, want_keys, rtol=1e-6, atol=1e-6)
    assert torch.equal(values, want_values)


def test_attention_kernel_follows_a_tree_mask_and_its_positions(kernel_path):
    T, start = 4, 10
    qkv, keys, values, cos, sin = _case(T, seed=7)
    positions = torch.tensor([10, 11, 11, 12])
    mask = torch.ones(T, start + T, dtype=torch.bool)
    mask[:, start:] = TREE
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, mask, start)
    got = kernel_path.attention(qkv, keys, values, cos, sin, positions, mask, start, H)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_tree_node_computes_bitwise_what_its_path_computes_as_a_chain(kernel_path):
    start = 10
    qkv, keys, values, cos, sin = _case(4, seed=8)
    mask = torch.ones(4, start + 4, dtype=torch.bool)
    mask[:, start:] = TREE
    tree = kernel_path.attention(qkv.clone(), keys.clone(), values.clone(), cos, sin,
                                 torch.tensor([10, 11, 11, 12]), mask, start, H)
    path = [0, 1, 3]  # root -> node 1 -> node 3
    chain = kernel_path.attention(qkv[path].clone(), keys.clone(), values.clone(), cos, sin,
                                  torch.arange(start, start + 3), None, start, H)
    assert torch.equal(tree[path], chain)


def test_a_rows_attention_is_bitwise_the_same_scored_alone_or_with_later_rows(kernel_path):
    T, start = 6, 12
    qkv, keys, values, cos, sin = _case(T, seed=3)
    together = kernel_path.attention(qkv.clone(), keys.clone(), values.clone(), cos, sin,
                                     torch.arange(start, start + T), None, start, H)
    for t in range(T):  # rows 0..t-1 first, then row t on its own
        k, v = keys.clone(), values.clone()
        if t:
            kernel_path.attention(qkv[:t].clone(), k, v, cos, sin, torch.arange(start, start + t),
                                  None, start, H)
        alone = kernel_path.attention(qkv[t : t + 1].clone(), k, v, cos, sin,
                                      torch.tensor([start + t]), None, start + t, H)
        assert torch.equal(alone[0], together[t])
