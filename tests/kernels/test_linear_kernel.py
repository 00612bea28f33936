"""`Kernels.linear` and `pack` on every kernel path (the `kernel_path` fixture)."""

import os
import subprocess
import sys

import pytest
import torch

from specdecode import kernels

DTYPES = [torch.float32, torch.bfloat16]


def test_pack_puts_a_vectors_width_of_output_rows_side_by_side_and_pads_with_zeros(kernel_path):
    w = torch.arange(20 * 3, dtype=torch.float32).view(20, 3)
    panels = kernel_path.pack(w)
    if kernel_path.name == "torch":
        assert panels is w  # torch reads weights as stored
        return
    lanes = kernel_path.lanes
    assert lanes == {"avx512amx": 16, "avx512vnni": 16, "avx512": 16, "avx2vnni": 8, "avx2": 8,
                     "neondot": 4, "neon": 4, "generic": 8}[kernel_path.name]
    P = -(-20 // lanes)
    assert panels.shape == (P, 3, lanes)
    flat = panels.transpose(1, 2).reshape(P * lanes, 3)
    assert torch.equal(flat[:20], w) and not flat[20:].any()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 7, 8, 9, 16, 17, 40])  # tiles of 8 and remainders
@pytest.mark.parametrize("outputs", [16, 37, 200])  # 37: a last panel partly filled
def test_linear_equals_matmul_for_every_row_count(kernel_path, rows, outputs, dtype):
    gen = torch.Generator().manual_seed(rows * outputs)
    x = torch.randn(rows, 40, generator=gen)
    w = torch.randn(outputs, 40, generator=gen).to(dtype)
    y = kernel_path.linear(x, kernel_path.pack(w), outputs)
    assert y.dtype == torch.float32 and y.shape == (rows, outputs)
    # bf16 weights are widened to fp32: the same arithmetic as fp32 weights of those values
    torch.testing.assert_close(y, x @ w.float().T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_rows_result_is_bitwise_the_same_whatever_rows_share_the_call(kernel_path, dtype):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(30, 576, generator=gen), torch.randn(300, 576, generator=gen)
    panels = kernel_path.pack(w.to(dtype))
    together = kernel_path.linear(x, panels, 300)
    for t in range(30):
        assert torch.equal(kernel_path.linear(x[t : t + 1], panels, 300)[0], together[t])
        assert torch.equal(kernel_path.linear(x[: t + 1], panels, 300), together[: t + 1])


def test_a_rows_result_does_not_depend_on_the_thread_count(kernel_path):
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 64, generator=gen), torch.randn(100, 64, generator=gen)
    panels = kernel_path.pack(w)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(kernel_path.linear(x, panels, 100))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(r, results[0]) for r in results)


def test_builds_with_and_without_openmp_compute_bitwise_the_same():
    best = kernels.runnable()[0]
    if best == "torch":
        pytest.skip("no C compiler here")
    with_openmp, without = kernels.load(best), kernels.load(best, openmp=False)
    assert without.threading == "pthreads"
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(9, 128, generator=gen), torch.randn(250, 128, generator=gen)
    torch.set_num_threads(2)
    assert torch.equal(with_openmp.linear(x, with_openmp.pack(w), 250),
                       without.linear(x, without.pack(w), 250))


def _active_in_subprocess(env: dict) -> tuple[int, str, str]:
    code = "from specdecode import kernels; print(kernels.describe(kernels.active()))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env})
    return result.returncode, result.stdout.strip(), result.stderr.strip()


@pytest.mark.parametrize("path", kernels.PATHS)
def test_the_environment_variable_forces_a_path_or_fails_in_one_line(path):
    status, out, err = _active_in_subprocess({"SPECDECODE_ISA": path})
    if path in kernels.runnable():
        assert status == 0 and out.startswith(f"{path} kernels"), (out, err)
    else:  # a library error: the CLI shows its one line (tests/test_cli.py)
        assert status != 0 and f"SPECDECODE_ISA={path}: the {path} kernels cannot run here" in err


def test_without_a_working_compiler_the_torch_path_runs_with_a_one_line_warning(tmp_path):
    status, out, err = _active_in_subprocess({"CC": "false", "SPECDECODE_CACHE": str(tmp_path)})
    assert status == 0 and out.startswith("torch kernels")
    assert len(err.splitlines()) == 1 and "torch path" in err
    assert not list(tmp_path.rglob("*.so"))
