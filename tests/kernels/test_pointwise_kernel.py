import pytest
import torch
import torch.nn.functional as F

from specdecode import kernels

pytestmark = pytest.mark.skipif(not kernels.pointwise_runs(torch.zeros(1, 16)),
                                reason="no AVX-512 CPU or C compiler")


@pytest.mark.parametrize("rows", [1, 3, 9])
def test_rms_norm_kernel_equals_its_formula(rows):
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 48, generator=gen) * 3, torch.randn(48, generator=gen)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    torch.testing.assert_close(kernels.rms_norm(x, w, 1e-5), want, rtol=1e-6, atol=1e-6)


def test_silu_mul_kernel_equals_torch_across_the_exponents_range():
    gate = torch.cat([torch.linspace(-120, 120, 63), torch.zeros(1)])  # e^-gate under/overflows
    up = torch.linspace(-2, 2, 64)
    gate_up = torch.cat([gate, up])[None].repeat(2, 1)  # [2, 2 x 64]
    want = F.silu(gate) * up
    torch.testing.assert_close(kernels.silu_mul(gate_up), want.repeat(2, 1), rtol=2e-6, atol=1e-7)


def test_pointwise_kernels_only_take_2d_fp32_rows_of_16_wide_blocks():
    assert not kernels.pointwise_runs(torch.zeros(2, 40))
    assert not kernels.pointwise_runs(torch.zeros(2, 3, 16))
    assert not kernels.pointwise_runs(torch.zeros(2, 16, dtype=torch.bfloat16))
