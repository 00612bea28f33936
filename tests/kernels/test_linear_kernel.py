import os
import subprocess
import sys

import pytest
import torch

from specdecode import kernels

needs_kernel = pytest.mark.skipif(not kernels.enabled(), reason="no AVX-512 CPU or C compiler")


DTYPES = [torch.float32, torch.bfloat16]


def test_pack_puts_16_output_rows_side_by_side_and_pads_with_zeros():
    w = torch.arange(20 * 3, dtype=torch.float32).view(20, 3)  # 20 outputs: 2 panels, 12 padding
    panels = kernels.pack(w)
    assert panels.shape == (2, 3, 16)
    assert torch.equal(panels[1, 2, :4], w[16:, 2]) and not panels[1, :, 4:].any()
    assert torch.equal(panels.transpose(1, 2).reshape(32, 3)[:20], w)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [*range(1, 18), 40])  # tiles of 8 rows, and their remainders
@pytest.mark.parametrize("outputs", [16, 37, 200])  # 37: a last panel with 5 outputs
def test_linear_equals_matmul_for_every_row_count(rows, outputs, dtype):
    gen = torch.Generator().manual_seed(rows * outputs)
    x = torch.randn(rows, 40, generator=gen)
    w = torch.randn(outputs, 40, generator=gen).to(dtype)
    y = kernels.linear(x, kernels.pack(w), outputs)
    assert y.dtype == torch.float32 and y.shape == (rows, outputs)
    # bf16 weights are widened to fp32: the same arithmetic as fp32 weights of those values
    torch.testing.assert_close(y, x @ w.float().T, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_rows_result_is_bitwise_the_same_whatever_rows_share_the_call(dtype):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(30, 576, generator=gen), torch.randn(300, 576, generator=gen)
    panels = kernels.pack(w.to(dtype))
    together = kernels.linear(x, panels, 300)
    for t in range(30):
        assert torch.equal(kernels.linear(x[t : t + 1], panels, 300)[0], together[t])
        assert torch.equal(kernels.linear(x[: t + 1], panels, 300), together[: t + 1])


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_thread_count():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 64, generator=gen), torch.randn(100, 64, generator=gen)
    panels = kernels.pack(w)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = kernels.linear(x, panels, 100)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(alone, kernels.linear(x, panels, 100))


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
