"""The contract between the C kernels and Python is stated once, in kernels.h: Python reads its
constants (`build.constants`) as it reads the prototypes, and what Python writes for C follows
them."""

from __future__ import annotations

import ctypes

import pytest
import torch

from specdecode.kernels import ROW_INVARIANT_ROWS
from specdecode.kernels.build import HEADER, constants


def test_constants_are_read_from_defines_and_enums(tmp_path):
    header = tmp_path / "k.h"
    header.write_text("#ifndef K_H\n#define K_H\n#define A 2 /* two */\n#define B (3 * A + 1)\n"
                      "#define C(x) ((x) + 1)\n#define D \"text\"\n"
                      "enum kind { X = 0, Y = 16 };\nenum { FIRST, SECOND };\n#endif\n")
    assert constants(header) == {"A": 2, "B": 7, "X": 0, "Y": 16}


def test_the_row_invariance_rule_python_follows_is_the_headers():
    assert ROW_INVARIANT_ROWS == constants(HEADER)["ROW_INVARIANT_ROWS"] == 64


def test_the_stack_python_writes_has_the_headers_record_layout(tiny_llama):
    """A record laid out in Python other than kernels.h says (a field added on one side) makes
    the stack's length disagree with the header's."""
    from specdecode.models.decoder import NativeDecoder

    target = NativeDecoder.from_hf(tiny_llama(1, vocab=32, layers=3))
    if target._stack is None:
        pytest.skip("these kernels have no decoder_layers")
    c = constants(HEADER)
    numbers = target._stack.numbers
    assert c["LAYER_RECORD"] == 8 + 4 * c["MATRIX_RECORD"]
    assert numbers.shape[0] == c["STACK_HEADER"] + 3 * c["LAYER_RECORD"]
    kinds = {c["PART_F32"], c["PART_BF16"], c["PART_F16"]} | {
        c["PART_BLOCKS"] + f for f in range(16)}
    for layer in range(3):
        record = numbers[c["STACK_HEADER"] + layer * c["LAYER_RECORD"]:][: c["LAYER_RECORD"]]
        for m in range(4):
            matrix = record[8 + m * c["MATRIX_RECORD"]:][: c["MATRIX_RECORD"]]
            parts = int(matrix[1])
            assert 1 <= parts <= c["MAX_PARTS"]
            assert all(int(matrix[4 + 3 * p]) in kinds for p in range(parts))


def test_decoder_layers_refuses_a_sequence_of_more_rows_than_the_rule_allows(kernel_path):
    """C checks the rule itself (no layer runs here: the stack has none, every address but the
    rows' is null)."""
    library = getattr(kernel_path, "_library", None)
    if getattr(library, "decoder_layers", None) is None:
        pytest.skip(f"{kernel_path.name}: no decoder_layers")
    stack = torch.tensor([64, 4, 2, 16, 128, 0, 0, 0], dtype=torch.int64)  # no layer records

    def call(T: int) -> int:
        x, rows = torch.zeros(T, 64), torch.tensor([T], dtype=torch.int64)
        return library.decoder_layers(x.data_ptr(), T, stack.data_ptr(), 0, 0, 0, 0, 0, 0,
                                      rows.data_ptr(), 0, 1, 0, 0, 1, 4, 0,
                                      ctypes.c_float(1e-6), 1, 1)

    assert call(ROW_INVARIANT_ROWS + 1) == 1
    assert call(ROW_INVARIANT_ROWS) == 0
