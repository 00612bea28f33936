import pytest
import torch

from specdecode.models.linear import Linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 9])
def test_linear_is_x_times_w_transposed_plus_bias_in_fp32_on_every_path(kernel_path, dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    w, b = torch.randn(21, 12, generator=gen).to(dtype), torch.randn(21, generator=gen)
    x = torch.randn(rows, 12, generator=gen)
    layer = Linear(w, b, kernel_path)
    y = layer(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, x @ w.float().T + b, rtol=1e-5, atol=1e-5)
