import pytest
import torch
import torch.nn.functional as F

from specdecode import kernels
from specdecode.models.llama import _rotate, rope_tables

pytestmark = pytest.mark.skipif(not kernels.attention_runs(16),
                                reason="no AVX-512 CPU or C compiler")

H, G, D, CAPACITY = 6, 2, 32, 64


def _case(T: int, start: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(T, (H + 2 * G) * D, generator=gen)
    keys = torch.randn(G, CAPACITY, D, generator=gen)  # positions >= start are stale garbage
    values = torch.randn(G, CAPACITY, D, generator=gen)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    cos, sin = rope_tables(inv_freq, 1.0, CAPACITY)
    return qkv, keys, values, cos, sin


def _reference(qkv, keys, values, cos, sin, positions, mask, start):
    """torch: rotate, write the cache, scaled_dot_product_attention."""
    T = qkv.shape[0]
    heads = qkv.view(T, -1, D).transpose(0, 1)
    qk = _rotate(heads[: H + G], cos[positions], sin[positions])
    keys, values = keys.clone(), values.clone()
    keys[:, start : start + T], values[:, start : start + T] = qk[H:], heads[H + G :]
    if mask is None:
        mask = torch.arange(start + T)[None, :] <= torch.arange(start, start + T)[:, None]
    o = F.scaled_dot_product_attention(qk[:H][None], keys[None, :, : start + T],
                                       values[None, :, : start + T], attn_mask=mask,
                                       enable_gqa=True)[0]
    return o.transpose(0, 1).reshape(T, H * D), keys, values


@pytest.mark.parametrize("T, start", [(1, 0), (1, 20), (5, 0), (8, 17), (20, 3)])
def test_attention_kernel_equals_rotary_cache_write_and_sdpa_causal(T, start):
    qkv, keys, values, cos, sin = _case(T, start, seed=T * 100 + start)
    positions = torch.arange(start, start + T)
    want, want_keys, want_values = _reference(qkv, keys, values, cos, sin, positions, None, start)
    got = kernels.attention(qkv, keys, values, cos, sin, positions, None, start, H)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(keys, want_keys, rtol=1e-6, atol=1e-6)
    assert torch.equal(values, want_values)


def test_attention_kernel_follows_a_tree_mask_and_its_positions():
    T, start = 4, 10  # a root and three nodes: 1 and 2 children of the root, 3 a child of 1
    qkv, keys, values, cos, sin = _case(T, start, seed=7)
    positions = torch.tensor([10, 11, 11, 12])
    mask = torch.ones(T, start + T, dtype=torch.bool)
    mask[:, start:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]])
    want, _, _ = _reference(qkv, keys, values, cos, sin, positions, mask, start)
    got = kernels.attention(qkv, keys, values, cos, sin, positions, mask, start, H)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_rows_attention_is_bitwise_the_same_scored_alone_or_with_later_rows():
    T, start = 6, 12
    qkv, keys, values, cos, sin = _case(T, start, seed=3)
    together = kernels.attention(qkv.clone(), keys.clone(), values.clone(), cos, sin,
                                 torch.arange(start, start + T), None, start, H)
    for t in range(T):  # rows 0..t-1 first, then row t on its own
        k, v = keys.clone(), values.clone()
        if t:
            kernels.attention(qkv[:t].clone(), k, v, cos, sin, torch.arange(start, start + t),
                              None, start, H)
        alone = kernels.attention(qkv[t : t + 1].clone(), k, v, cos, sin,
                                  torch.tensor([start + t]), None, start + t, H)
        assert torch.equal(alone[0], together[t])
