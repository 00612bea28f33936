"""`Kernels.rms_norm`, `head_norm`, `silu_mul` and `gelu_mul` on every kernel path."""

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("rows", [1, 3, 9])
def test_rms_norm_kernel_equals_its_formula(kernel_path, rows):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 48, generator=gen) * 3, torch.randn(48, generator=gen)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    torch.testing.assert_close(kernel_path.rms_norm(x, w, 1e-5), want, rtol=1e-6, atol=1e-6)


def test_silu_mul_kernel_equals_torch_across_the_exponents_range(kernel_path):
    gate = torch.cat([torch.linspace(-120, 120, 63), torch.zeros(1)])  # e^-gate under/overflows
    up = torch.linspace(-2, 2, 64)
    gate_up = torch.cat([gate, up])[None].repeat(2, 1)  # [2, 2 x 64]
    want = F.silu(gate) * up
    torch.testing.assert_close(kernel_path.silu_mul(gate_up), want.repeat(2, 1), rtol=2e-6,
                               atol=1e-7)


def test_gelu_mul_kernel_equals_torchs_tanh_gelu(kernel_path):
    gate = torch.cat([torch.linspace(-12, 12, 63), torch.zeros(1)])  # tanh saturates both ways
    up = torch.linspace(-2, 2, 64)
    gate_up = torch.cat([gate, up])[None].repeat(2, 1)
    want = F.gelu(gate, approximate="tanh") * up
    torch.testing.assert_close(kernel_path.gelu_mul(gate_up), want.repeat(2, 1), rtol=1e-5,
                               atol=1e-6)


def test_head_norm_norms_each_q_and_k_head_and_leaves_v(kernel_path):
    H, G, d, T = 4, 2, 32, 3
    gen = torch.Generator().manual_seed(9)
    qkv = torch.randn(T, (H + 2 * G) * d, generator=gen) * 4
    q_w, k_w = torch.randn(d, generator=gen), torch.randn(d, generator=gen)
    heads = qkv.view(T, H + 2 * G, d)
    weight = torch.cat([q_w.expand(H, d), k_w.expand(G, d), torch.ones(G, d)])
    normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    want = torch.cat([normed[:, : H + G], heads[:, H + G :]], dim=1).reshape(T, -1)
    got = kernel_path.head_norm(qkv, q_w, k_w, H, G, 1e-6)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[:, (H + G) * d :], qkv[:, (H + G) * d :])


def test_pointwise_results_of_a_row_do_not_depend_on_the_other_rows(kernel_path):
    gen = torch.Generator().manual_seed(5)
    x, w = torch.randn(11, 96, generator=gen), torch.randn(96, generator=gen)
    norms, acts = kernel_path.rms_norm(x, w, 1e-6), kernel_path.silu_mul(x)
    gelus = kernel_path.gelu_mul(x)
    heads = kernel_path.head_norm(x, w[:16], w[16:32], 2, 2, 1e-6)  # 2 + 2 x 2 heads of 16
    for t in range(11):
        assert torch.equal(kernel_path.rms_norm(x[t : t + 1], w, 1e-6)[0], norms[t])
        assert torch.equal(kernel_path.silu_mul(x[t : t + 1])[0], acts[t])
        assert torch.equal(kernel_path.gelu_mul(x[t : t + 1])[0], gelus[t])
        assert torch.equal(kernel_path.head_norm(x[t : t + 1], w[:16], w[16:32], 2, 2, 1e-6)[0],
                           heads[t])


def test_c_paths_take_models_whose_widths_are_multiples_of_16(kernel_path):
    assert kernel_path.fits(64, (576, 1536))
    assert kernel_path.fits(8, (40,)) == (kernel_path.name == "torch")
