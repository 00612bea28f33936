import pytest
import torch

from specdecode import kernels
from specdecode.models import linear as linear_module
from specdecode.models.linear import Linear


@pytest.fixture(params=["kernel", "torch"])
def path(request, monkeypatch):
    if request.param == "kernel" and not kernels.enabled():
        pytest.skip("no AVX-512 CPU or C compiler")
    if request.param == "torch":
        monkeypatch.setattr(linear_module.kernels, "enabled", lambda dtype=None: False)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 9])
def test_linear_is_x_times_w_transposed_plus_bias_in_fp32_on_either_path(path, dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    w, b = torch.randn(21, 12, generator=gen).to(dtype), torch.randn(21, generator=gen)
    x = torch.randn(rows, 12, generator=gen)
    layer = Linear(w, b)
    assert (layer._panels is not None) == (path == "kernel")
    y = layer(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, x @ w.float().T + b, rtol=1e-5, atol=1e-5)
