"""Weight matrices in GGUF's block formats, as a file stores them (often memory-mapped).

A `QuantTensor` is a matrix's bytes, row by row, and the name of its format. `decode` reads its
integers and scales in one form for every format the C kernels compute in (`FORMATS`): each
weight is w = D u + w0, u an unsigned integer of the format's bits, D and w0 per block of 32 (16
for Q6_K) from the format's scale fields. `dequantize` gives the numbers themselves (gguf's own
reader), for the paths that do not compute in a format and as the reference tests compare with.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

BLOCK = 32  # values per scale of x in the kernels, and per block of the simple formats
SUPER = 256  # values per super-block of the K formats


# the scale fields a header of each kind holds, in the order the kernels' panels keep them:
# (name, numpy dtype, count); the kinds are qformats.h's `enum scales`
SCALE_FIELDS = {
    "SCALES_D": (("d", "float16", 1),),
    "SCALES_DM": (("d", "float16", 1), ("m", "float16", 1)),
    "SCALES_K": (("d", "float16", 1), ("dmin", "float16", 1), ("sc", "uint8", 8),
                 ("mn", "uint8", 8)),
    "SCALES_K16": (("d", "float16", 1), ("sc", "int8", 16)),
}


@dataclass(frozen=True)
class Format:
    """A block format's facts, as the kernels' table states them (`BLOCK_FORMATS` in
    kernels/csrc/qformats.h): bytes per GGUF block of `values` weights, u's bits, u's offset
    (u = the stored signed value + offset; 0 where the format has a w0 field), values per scale D
    (32, or 16), and the scale fields a block (or super-block) carries (`SCALE_FIELDS`)."""

    block_bytes: int
    values: int
    bits: int
    offset: int
    per_scale: int
    scales: str  # a kind of SCALE_FIELDS

    @property
    def fields(self) -> tuple[tuple[str, str, int], ...]:
        """(name, numpy dtype, count) of each scale field, each [rows, blocks, count]."""
        return SCALE_FIELDS[self.scales]


def _format_table() -> dict[str, Format]:
    """The formats of the kernels' table: one `X(...)` line each."""
    text = (Path(__file__).parent / "kernels" / "csrc" / "qformats.h").read_text()
    lines = re.findall(r"\bX\((\w+), (\d+), (\d+), (\d+), (\d+), (\d+), (SCALES_\w+)\)", text)
    return {name: Format(*map(int, numbers), scales) for name, *numbers, scales in lines}


FORMATS = _format_table()


def panel_bytes(qtype: str, in_features: int, rows: int) -> int:
    """Bytes of `rows` output rows (a multiple of the panel width) packed for the kernels: per
    super-block the scale fields, then per block of 32 the integers (4 bits in 16 bytes, each
    further bit in 4 more; 8 bits in 32)."""
    fmt = FORMATS[qtype]
    header = sum(np.dtype(dtype).itemsize * count for _, dtype, count in fmt.fields)
    payload = 32 if fmt.bits == 8 else 16 + 4 * (fmt.bits - 4)
    return rows * in_features // fmt.values * (header + fmt.values // BLOCK * payload)


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
        values = _gguf_rows(self.qtype, False, np.asarray(self.data))
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


@dataclass(frozen=True)
class Decoded:
    """A matrix of a block format, read: u [O, I] uint8 and the scale fields by name, each
    [O, blocks, count] (blocks of the format's `values`)."""

    qtype: str
    u: np.ndarray
    fields: dict[str, np.ndarray]

    def values(self) -> np.ndarray:
        """w = D u + w0, [O, I] fp32, computed as gguf's reader computes it."""
        f, (O, I) = self.fields, self.u.shape
        fmt = FORMATS[self.qtype]
        u = self.u.astype(np.float32).reshape(O, I // fmt.per_scale, fmt.per_scale)
        d = f["d"].astype(np.float32)
        if fmt.scales == "SCALES_K":
            D = d * f["sc"].astype(np.float32)  # [O, supers, 8]
            w0 = -(f["dmin"].astype(np.float32) * f["mn"].astype(np.float32))
            w = D.reshape(O, -1, 1) * u + w0.reshape(O, -1, 1)
        elif fmt.scales == "SCALES_K16":  # a signed scale per 16 values
            w = (d * f["sc"].astype(np.float32)).reshape(O, -1, 1) * (u - fmt.offset)
        elif "m" in f:
            w = d * u + f["m"].astype(np.float32)
        else:
            w = d * (u - fmt.offset)
        return w.reshape(O, I)


def decode(t: QuantTensor) -> Decoded:
    """u and the scale fields of a matrix in one of FORMATS."""
    fmt = FORMATS[t.qtype]
    O, I = t.shape
    raw = np.asarray(t.data).reshape(O, I // fmt.values, fmt.block_bytes)  # [O, blocks, bytes]

    def take(start: int, count: int, dtype: str = "uint8") -> np.ndarray:
        return np.ascontiguousarray(raw[..., start : start + count]).view(dtype)

    def nibbles(qs: np.ndarray) -> np.ndarray:  # [..., 16] -> values j (low) then j + 16 (high)
        return np.concatenate([qs & 15, qs >> 4], axis=-1)

    def fifth_bits(qh: np.ndarray) -> np.ndarray:  # 4 bytes, bit j for value j -> [..., 32]
        word = qh.view("<u4")
        return ((word >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)

    name, fields = t.qtype, {}
    if name == "Q8_0":
        fields["d"] = take(0, 2, "float16")
        u = (take(2, 32, "int8").astype(np.int16) + 128).astype(np.uint8)
    elif name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        fields["d"] = take(0, 2, "float16")
        at = 2
        if name.endswith("_1"):
            fields["m"], at = take(2, 2, "float16"), 4
        if name.startswith("Q5"):
            high, at = fifth_bits(take(at, 4)), at + 4
        else:
            high = 0
        u = nibbles(take(at, 16)) | (high << 4)
    elif name in ("Q4_K", "Q5_K"):
        fields["d"], fields["dmin"] = take(0, 2, "float16"), take(2, 2, "float16")
        fields["sc"], fields["mn"] = k_scales(take(4, 12))
        qs = take(16 + 32 * (name == "Q5_K"), 128).reshape(O, -1, 4, 32)  # 4 chunks of 64 values
        u = np.stack([qs & 15, qs >> 4], axis=3)  # [O, supers, chunk, low/high, 32]
        if name == "Q5_K":  # bit s of qh[l]: the fifth bit of value l of sub-block s
            qh = take(16, 32)[:, :, None, :] >> np.arange(8, dtype=np.uint8)[:, None]
            u = u | ((qh & 1) << 4).reshape(u.shape)
    elif name == "Q3_K":  # hmask[32], qs[64], scales[12], d
        fields["d"], fields["sc"] = take(108, 2, "float16"), q3_scales(take(96, 12))
        # value 128 c + 32 i + l: bits 2i, 2i + 1 of qs[32 c + l], and bit 2 from bit
        # 4 c + i of hmask[l] (gguf stores it set where the value is not offset by -4)
        ql = take(32, 64).reshape(O, -1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
        qh = take(0, 32).reshape(O, -1, 1, 32) >> np.arange(8, dtype=np.uint8)[:, None]
        u = (ql & 3).reshape(O, -1, SUPER) | ((qh & 1) << 2).reshape(O, -1, SUPER)
    else:  # Q6_K: ql[128], qh[64], sc[16], d
        fields["d"], fields["sc"] = take(208, 2, "float16"), take(192, 16, "int8")
        ql = take(0, 128).reshape(O, -1, 2, 1, 64) >> np.array([0, 4], np.uint8)[:, None]
        qh = take(128, 64).reshape(O, -1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
        # per half of 128: low nibbles of ql[0:64], then high; bits 4, 5 from qh pair by pair
        u = (ql & 15).reshape(O, -1, 2, 4, 32) | ((qh & 3) << 4)
    return Decoded(name, u.reshape(O, I).astype(np.uint8), fields)


def q3_scales(scales: np.ndarray) -> np.ndarray:
    """Q3_K's 12 bytes of sixteen 6-bit scales -> sc [..., 16] int8 (the stored value - 32):
    scale s has its low 4 bits in byte s % 8 (from bit 4 (s // 8)), its top 2 in byte
    8 + s % 4 (from bit 2 (s // 4))."""
    s = scales.astype(np.uint8)
    low = np.concatenate([s[..., 0:8] & 15, s[..., 0:8] >> 4], axis=-1)
    high = np.concatenate([(s[..., 8:12] >> (2 * i)) & 3 for i in range(4)], axis=-1)
    return ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8)


def k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's and Q5_K's 12 bytes of 6-bit scales and mins -> sc, mn [..., 8] uint8."""
    s = scales.astype(np.uint8)
    low, mid, high = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = np.concatenate([low & 63, (high & 15) | ((low >> 6) << 4)], axis=-1)
    mn = np.concatenate([mid & 63, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    return sc, mn


def quantize(w: torch.Tensor, qtype: str) -> QuantTensor:
    """w: [O, I] numbers -> the matrix in `qtype` (gguf's own quantizer: Q8_0, Q4_0, Q4_1,
    Q5_0, Q5_1)."""
    values = w.detach().float().numpy()
    return QuantTensor(qtype, _gguf_rows(qtype, True, values), w.shape[1])


# rows converted at a time, a chunk per thread: gguf's own quantize and dequantize go 16 rows at a
# time, mostly in Python under the GIL (a 0.5B model's conversion to Q4_0 on load took 20 s on 2
# cores); each block comes out the same however the rows are grouped
CONVERT_ROWS = 1024


def _gguf_rows(qtype: str, quantizing: bool, data: np.ndarray) -> np.ndarray:
    """gguf's quantization of fp32 rows [O, I] to `qtype` (bytes [O, bytes per row]), or its
    dequantization of such bytes to fp32 [O, I]: its own block functions, over chunks of rows
    on every core."""
    from gguf import GGMLQuantizationType, quants

    kind = GGMLQuantizationType[qtype]
    traits = getattr(quants, qtype, None)  # the format's class, where gguf has one
    if not isinstance(traits, type):
        return (quants.quantize if quantizing else quants.dequantize)(data, kind)
    if not quantizing:
        traits.init_grid()  # (the formats with a lookup grid build it first, as gguf does)
    convert = traits.quantize_rows if quantizing else traits.dequantize_rows
    return in_row_chunks(lambda start, stop: convert(data[start:stop]), len(data), CONVERT_ROWS)


def in_row_chunks(convert: Callable[[int, int], np.ndarray], rows: int,
                  chunk: int) -> np.ndarray:
    """convert(start, stop) of rows start..stop-1, for chunks of `chunk` rows side by side on
    every core (numpy's work releases the GIL), concatenated in order."""
    starts = range(0, rows, chunk)
    if len(starts) == 1:
        return convert(0, rows)
    with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1)) as pool:
        return np.concatenate(list(pool.map(lambda r: convert(r, min(r + chunk, rows)), starts)))


def random_blocks(qtype: str, rows: int, columns: int, rng: np.random.Generator,
                  scale: float = 1.0) -> np.ndarray:
    """[rows, bytes per row] of random blocks in any of FORMATS, numbers of about `scale`:
    random integers and 6-bit scales, the fp16 scale fields set to sane values (gguf's Python
    side quantizes only the simple formats)."""
    fmt = FORMATS[qtype]
    blocks = rng.integers(0, 256, (rows, columns // fmt.values, fmt.block_bytes), dtype=np.uint8)

    def put(at: int, values: np.ndarray) -> None:
        blocks[..., at : at + 2] = values.astype(np.float16)[..., None].view(np.uint8)

    size = blocks.shape[:2]
    unit = scale / 2 ** (fmt.bits - 1)
    if qtype in ("Q4_K", "Q5_K"):  # sc, mn up to 63: d and dmin of a 63rd of the range
        put(0, rng.uniform(0.5, 1.5, size) * unit / 32)
        put(2, rng.uniform(0.5, 1.5, size) * scale / 63)
    elif qtype == "Q6_K":  # sc signed bytes: keep them small and positive
        blocks[..., 192:208] = rng.integers(1, 32, (*size, 16), dtype=np.uint8)
        put(208, rng.uniform(0.5, 1.5, size) * unit / 16)
    elif qtype == "Q3_K":  # random 6-bit scales (-32..31): d of a 32nd of the range
        put(108, rng.uniform(0.5, 1.5, size) * unit / 32)
    else:
        put(0, rng.uniform(0.5, 1.5, size) * unit)
        if qtype.endswith("_1"):
            put(2, -scale * rng.uniform(0.5, 1.5, size))
    return blocks.reshape(rows, -1)
