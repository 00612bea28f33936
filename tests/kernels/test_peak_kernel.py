"""`kernel_peak` (csrc/peak.c): the instruction peak `bench --floor` divides by."""

import pytest

from specdecode.kernels.torch_path import TorchKernels


def test_peak_loop_reports_every_multiply_add_it_ran(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch: no instruction of its own to measure")
    library = kernel_path._library
    # 8 chains of vdot4, each VL lanes of 4 products, per iteration and thread
    assert library.kernel_peak(100, 1) == 100 * 8 * 4 * kernel_path.lanes
    assert library.kernel_peak(100, 2) == 2 * library.kernel_peak(100, 1)


def test_peak_loop_refuses_arguments_it_cannot_run(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch: no instruction of its own to measure")
    for iterations, threads in ((0, 1), (10, 0), (10, 257)):
        assert kernel_path._library.kernel_peak(iterations, threads) == 0


def test_instruction_peak_is_a_positive_rate_on_c_paths_and_none_on_torch(kernel_path):
    peak = kernel_path.instruction_peak(seconds=0.02)
    assert (peak is None) == isinstance(kernel_path, TorchKernels)
    assert peak is None or peak > 0
