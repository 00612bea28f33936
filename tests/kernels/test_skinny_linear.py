import os
import subprocess
import sys

import pytest
import torch

from specdecode import kernels

needs_kernel = pytest.mark.skipif(not kernels.enabled(), reason="no AVX-512 CPU or C compiler")


DTYPES = [torch.float32, torch.bfloat16]


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", range(1, kernels.MAX_ROWS + 1))
@pytest.mark.parametrize("inner", [16, 40, 576])  # 40: a row tail that is not a multiple of 16
def test_skinny_linear_equals_matmul_for_every_row_count(rows, inner, dtype):
    gen = torch.Generator().manual_seed(rows * inner)
    x, w = torch.randn(rows, inner, generator=gen), torch.randn(37, inner, generator=gen).to(dtype)
    assert kernels.available(x, w)
    y = kernels.skinny_linear(x, w)
    assert y.dtype == torch.float32
    # bf16 weights are widened to fp32: the same arithmetic as fp32 weights of those values
    torch.testing.assert_close(y, x @ w.float().T, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_rows_result_is_bitwise_the_same_whatever_rows_share_the_call(dtype):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(kernels.MAX_ROWS, 576, generator=gen), torch.randn(300, 576, generator=gen)
    w = w.to(dtype)
    together = kernels.skinny_linear(x, w)
    for t in range(kernels.MAX_ROWS):
        assert torch.equal(kernels.skinny_linear(x[t : t + 1], w)[0], together[t])
        assert torch.equal(kernels.skinny_linear(x[: t + 1], w), together[: t + 1])


def test_not_available_beyond_its_row_count_dtypes_or_layout():
    w = torch.randn(8, 32)
    assert not kernels.available(torch.randn(kernels.MAX_ROWS + 1, 32), w)
    assert not kernels.available(torch.randn(2, 32), w.half())
    assert not kernels.available(torch.randn(2, 32).bfloat16(), w.bfloat16())  # inputs are fp32
    assert not kernels.available(torch.randn(32, 2).t(), w)  # not contiguous


def _enabled_in_subprocess(env: dict) -> str:
    code = "from specdecode import kernels; print(kernels.enabled())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip() + "|" + result.stderr.strip()


def test_environment_switch_turns_the_kernel_off():
    assert _enabled_in_subprocess({"SPECDECODE_KERNELS": "0"}) == "False|"


@pytest.mark.parametrize("compiler", ["false", "/nonexistent/cc"])
def test_a_failing_compiler_falls_back_to_torch_with_a_one_line_warning(tmp_path, compiler):
    out = _enabled_in_subprocess({"CC": compiler, "SPECDECODE_CACHE": str(tmp_path)})
    enabled, warning = out.split("|")
    assert enabled == "False"
    if "compiling" in warning:  # on a CPU without AVX-512 nothing is compiled at all
        assert len(warning.splitlines()) == 1 and "using torch" in warning
    assert not list(tmp_path.rglob("*.so"))
