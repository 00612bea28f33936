"""Linear layers on weights in GGUF's block formats (Q8_0, Q4_0, Q4_1), on every kernel path:
the kernel computes x @ w.T for w as gguf's own reader dequantizes it, and a row's result is
bitwise the same whatever rows share the call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from specdecode.quant import BLOCK, QuantTensor, blocks

FORMATS = ["Q8_0", "Q4_0", "Q4_1"]


def random_quant(qtype: str, outputs: int, inputs: int, seed: int) -> QuantTensor:
    values = np.random.default_rng(seed).standard_normal((outputs, inputs)).astype(np.float32)
    return QuantTensor(qtype, quantize(values, GGMLQuantizationType[qtype]), inputs)


@pytest.mark.parametrize("qtype", FORMATS)
def test_blocks_give_exactly_the_numbers_ggufs_reader_gives(qtype):
    t = random_quant(qtype, 5, 64, seed=1)
    q, d, m = blocks(t)
    scale = np.repeat(d.astype(np.float32), BLOCK, axis=1)
    offset = 0 if m is None else np.repeat(m.astype(np.float32), BLOCK, axis=1)
    assert np.array_equal(q * scale + offset, t.dequantize().numpy())


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])
@pytest.mark.parametrize("outputs", [16, 37])  # 37: a last panel partly filled
def test_block_format_linear_equals_matmul_with_the_dequantized_weight(kernel_path, qtype, rows,
                                                                      outputs):
    t = random_quant(qtype, outputs, 96, seed=rows * outputs)
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
    y = kernel_path.linear(x, kernel_path.pack(t), outputs)
    assert y.shape == (rows, outputs) and y.dtype == torch.float32
    torch.testing.assert_close(y, x @ t.dequantize().T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("qtype", FORMATS)
def test_a_rows_result_is_bitwise_the_same_whatever_rows_share_the_call(kernel_path, qtype):
    t = random_quant(qtype, 300, 576, seed=3)
    x = torch.randn(20, 576, generator=torch.Generator().manual_seed(4))
    panels = kernel_path.pack(t)
    together = kernel_path.linear(x, panels, 300)
    for r in range(20):
        assert torch.equal(kernel_path.linear(x[r : r + 1], panels, 300)[0], together[r])
        assert torch.equal(kernel_path.linear(x[: r + 1], panels, 300), together[: r + 1])
