"""csrc/peak.c: `kernel_peak`, the instruction peak `bench --floor` divides by, and `kernel_read`,
the read whose clock is its bandwidth floor."""

import numpy as np
import pytest
import torch

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


def test_read_loop_sums_every_word_of_its_buffer_on_any_number_of_threads(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch: no loop of its own to measure")
    library = kernel_path._library
    rng = np.random.default_rng(0)
    round_bytes = 4 * 4 * kernel_path.lanes  # 4 vectors of `lanes` words
    # nothing, a tail alone, whole rounds, rounds and a tail; fewer rounds than threads
    for nbytes in (0, 4, 12, round_bytes, 7 * round_bytes, 7 * round_bytes + 8, 1 << 16):
        data = torch.from_numpy(rng.integers(0, 256, nbytes, dtype=np.uint8))
        expected = int(data.numpy().view(np.uint32).sum(dtype=np.uint64)) % 2**32
        for threads in (1, 2, 3):
            assert library.kernel_read(data.data_ptr(), nbytes, threads) == expected


def test_read_loop_refuses_arguments_it_cannot_run(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch: no loop of its own to measure")
    data = torch.zeros(64, dtype=torch.uint8)
    for nbytes, threads in ((6, 1), (-4, 1), (64, 0), (64, 257)):
        assert kernel_path._library.kernel_read(data.data_ptr(), nbytes, threads) == -1


def test_read_bandwidth_is_a_positive_rate_on_c_paths_and_none_on_torch(kernel_path):
    rate = kernel_path.read_bandwidth(torch.ones(1 << 20, dtype=torch.float32))
    assert (rate is None) == isinstance(kernel_path, TorchKernels)
    assert rate is None or rate > 0
