"""`quant`: conversions to and from GGUF's block formats give gguf's own bytes and numbers, however
the rows are split among threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize, quantize as gguf_quantize

from specdecode import quant
from specdecode.quant import FORMATS, QuantTensor, quantize, random_blocks


@pytest.mark.parametrize("qtype", FORMATS)
def test_the_kernels_format_table_agrees_with_ggufs_block_sizes_and_scale_fields(qtype):
    fmt = FORMATS[qtype]
    assert GGML_QUANT_SIZES[GGMLQuantizationType[qtype]] == (fmt.values, fmt.block_bytes)
    assert fmt.fields[0][0] == "d" and fmt.values % fmt.per_scale == 0
    assert (fmt.offset == 0) == any(name in ("m", "dmin") for name, _, _ in fmt.fields)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 8 rows, so that a small matrix is split as a model's large ones are."""
    monkeypatch.setattr(quant, "CONVERT_ROWS", 8)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_quantizing_in_row_chunks_gives_ggufs_bytes(small_chunks, qtype):
    values = np.random.default_rng(0).standard_normal((37, 96)).astype(np.float32)
    ours = quantize(torch.from_numpy(values), qtype)
    assert ours.shape == (37, 96)
    assert np.array_equal(ours.data, gguf_quantize(values, GGMLQuantizationType[qtype]))


@pytest.mark.parametrize("qtype", FORMATS)
def test_dequantizing_in_row_chunks_gives_ggufs_numbers(small_chunks, qtype):
    data = random_blocks(qtype, 37, 512, np.random.default_rng(1))
    ours = QuantTensor(qtype, data, 512).dequantize().numpy()
    theirs = dequantize(data, GGMLQuantizationType[qtype])
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
