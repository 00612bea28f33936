"""Linear layers on weights in GGUF's block formats, on every kernel path: `quant.decode` reads
exactly the numbers gguf's own reader gives; the kernel computes x @ w.T for them within the
rounding of x to 8 bits per block of 32 (its arithmetic, qlinear.c); a row's result is bitwise
the same whatever rows share the call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import quantize

from specdecode.kernels import native
from specdecode.kernels.native import BlockPanels
from specdecode.quant import BLOCK, FORMATS, QuantTensor, decode, random_blocks

SIMPLE = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # gguf's Python side quantizes these


def random_quant(qtype: str, outputs: int, inputs: int, seed: int) -> QuantTensor:
    rng = np.random.default_rng(seed)
    if qtype in SIMPLE:
        values = rng.standard_normal((outputs, inputs)).astype(np.float32)
        return QuantTensor(qtype, quantize(values, GGMLQuantizationType[qtype]), inputs)
    return QuantTensor(qtype, random_blocks(qtype, outputs, inputs, rng), inputs)


def rounded(x: torch.Tensor) -> torch.Tensor:
    """x as the kernels round it: per block of 32, d q with d = max|x| / 127, q integral."""
    blocks = x.reshape(x.shape[0], -1, BLOCK)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    return (torch.round(blocks / torch.where(d > 0, d, 1)) * d).reshape(x.shape)


@pytest.mark.parametrize("qtype", FORMATS)
def test_decode_gives_exactly_the_numbers_ggufs_reader_gives(qtype):
    t = random_quant(qtype, 5, 512, seed=1)
    decoded = decode(t)
    assert decoded.u.max() < 2 ** FORMATS[qtype].bits
    assert np.array_equal(decoded.values(), t.dequantize().numpy())


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_packing_in_chunks_of_rows_gives_the_bytes_of_packing_whole(monkeypatch, qtype, lanes):
    t = random_quant(qtype, 37, 512, seed=3)  # 37: the last chunk's last panel partly filled
    whole = native._pack_panels(t, lanes)
    monkeypatch.setattr(native, "PACK_ROWS", 16)
    assert np.array_equal(native.pack_blocks(t, lanes), whole)


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])
@pytest.mark.parametrize("outputs", [16, 37])  # 37: a last panel partly filled
def test_block_format_linear_equals_matmul_with_ggufs_dequantized_weight(kernel_path, qtype, rows,
                                                                        outputs):
    inputs = 512
    t = random_quant(qtype, outputs, inputs, seed=rows * outputs)
    x = torch.randn(rows, inputs, generator=torch.Generator().manual_seed(rows))
    y = kernel_path.linear(x, kernel_path.pack(t), outputs)
    assert y.shape == (rows, outputs) and y.dtype == torch.float32
    w = t.dequantize()
    if isinstance(kernel_path.pack(t), BlockPanels):  # integer path: x rounded to 8 bits
        torch.testing.assert_close(y, rounded(x) @ w.T, rtol=1e-5, atol=1e-4 * w.abs().max())
        # and the rounding's own distance from the fp32 product: about 1% of its scale
        assert (y - x @ w.T).abs().max() < 0.02 * (x.abs() @ w.abs().T).max()
    else:
        torch.testing.assert_close(y, x @ w.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("qtype", FORMATS)
def test_a_rows_result_is_bitwise_the_same_whatever_rows_share_the_call(kernel_path, qtype):
    t = random_quant(qtype, 300, 512, seed=3)
    x = torch.randn(20, 512, generator=torch.Generator().manual_seed(4))
    panels = kernel_path.pack(t)
    together = kernel_path.linear(x, panels, 300)
    for r in range(20):
        assert torch.equal(kernel_path.linear(x[r : r + 1], panels, 300)[0], together[r])
        assert torch.equal(kernel_path.linear(x[: r + 1], panels, 300), together[: r + 1])


def test_f16_weights_are_widened_exactly(kernel_path):
    w = torch.randn(37, 64, generator=torch.Generator().manual_seed(5)).half()
    t = QuantTensor("F16", w.numpy().view(np.uint8).reshape(37, -1), 64)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(kernel_path.linear(x, kernel_path.pack(t), 37), x @ w.float().T,
                               rtol=1e-5, atol=1e-4)


def test_every_block_format_runs_in_its_blocks_on_the_c_paths(kernel_path):
    if kernel_path.name == "torch":
        pytest.skip("torch computes every format dequantized")
    assert set(kernel_path.formats) == set(FORMATS)


@pytest.mark.parametrize("qtype", FORMATS)
def test_amx_matrix_tiles_give_bitwise_what_the_vnni_vector_tiles_give(qtype):
    """avx512amx computes calls of `amx_min_rows` rows or more (64 for the K formats, 32 for the
    others) in matrix tiles: the same integer sums, the same fp32 steps, so every row equals
    avx512vnni's bit for bit, below each threshold, at it, past it and in partial tiles of 16
    rows; and below them its vector tiles of one panel and up to 8 rows equal avx512vnni's of two
    panels and 4 rows (5-8 rows: its streamed calls)."""
    from specdecode import kernels

    if "avx512amx" not in kernels.runnable():
        pytest.skip(f"avx512amx: this machine runs only {', '.join(kernels.runnable())} (AMX needs "
                    "a Sapphire Rapids or later Xeon and an OS that grants its tile state)")
    amx, vnni = kernels.load("avx512amx"), kernels.load("avx512vnni")
    t = random_quant(qtype, 75, 512, seed=9)  # 75 outputs: a last panel partly filled
    x = torch.randn(90, 512, generator=torch.Generator().manual_seed(9))
    for rows in (1, 2, 4, 5, 8, 9, 31, 32, 33, 47, 63, 64, 65, 90):
        assert torch.equal(amx.linear(x[:rows], amx.pack(t), 75),
                           vnni.linear(x[:rows], vnni.pack(t), 75))
