"""Weight matrices in GGUF's block formats, as a file stores them (often memory-mapped).

A `QuantTensor` is a matrix's bytes, row by row, and the name of its format. `blocks` reads what
the C kernels need from the formats they compute in (each block of 32 values of a row: integer
values q and the scale d, and for Q4 an offset m, with w = d q + m); `dequantize` gives the
numbers themselves (gguf's own reader), for the kernel paths that do not compute in a format and
as the reference the kernel tests compare with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

BLOCK = 32
# GGUF formats the kernels compute in directly: their layout family and how its bytes read
KERNEL_FORMATS = {"Q8_0": "q8", "Q4_0": "q4", "Q4_1": "q4"}


@dataclass(frozen=True, eq=False)
class QuantTensor:
    qtype: str  # the GGUF format's name: "Q4_1", "Q8_0", ...
    data: np.ndarray  # [O, bytes per row] uint8, as stored
    in_features: int

    @property
    def out_features(self) -> int:
        return self.data.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[O, I] numbers, as gguf's reader computes them."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        values = dequantize(np.asarray(self.data), GGMLQuantizationType[self.qtype])
        return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)

    def take(self, rows) -> "QuantTensor":
        """These rows (indices or a slice), in this order."""
        return QuantTensor(self.qtype, self.data[rows], self.in_features)

    @staticmethod
    def concat(parts: list["QuantTensor"]) -> "QuantTensor":
        """The rows of several matrices of one format and width, one after the other."""
        assert len({(p.qtype, p.in_features) for p in parts}) == 1, [p.qtype for p in parts]
        return QuantTensor(parts[0].qtype, np.concatenate([p.data for p in parts]),
                           parts[0].in_features)


def blocks(t: QuantTensor) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For a format in KERNEL_FORMATS: q [O, I] (int8 for Q8_0, uint8 0..15 for Q4_*), d and m
    [O, I / 32] float16 (m None for Q8_0), with w = d q + m exactly as gguf dequantizes."""
    O, I = t.shape
    raw = np.asarray(t.data).reshape(O, I // BLOCK, -1)  # [O, blocks, bytes per block]
    d = raw[..., :2].copy().view(np.float16)[..., 0]
    if t.qtype == "Q8_0":
        return raw[..., 2:].copy().view(np.int8).reshape(O, I), d, None
    if t.qtype == "Q4_0":
        m, nibbles = (d.astype(np.float32) * -8).astype(np.float16), raw[..., 2:]
    elif t.qtype == "Q4_1":
        m, nibbles = raw[..., 2:4].copy().view(np.float16)[..., 0], raw[..., 4:]
    else:
        raise ValueError(f"no kernel layout for {t.qtype}")
    # a block's byte j holds value j in its low nibble and value j + 16 in its high nibble
    q = np.concatenate([nibbles & 15, nibbles >> 4], axis=-1)  # [O, blocks, 32]
    return q.reshape(O, I), d, m
