"""The C kernels of one instruction-set path, behind the `Kernels` interface."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..quant import BLOCK, KERNEL_FORMATS, QuantTensor, blocks
from .torch_path import ROW_INVARIANT_ROWS, long_attention

_LINEAR = {torch.float32: "linear_f32", torch.bfloat16: "linear_bf16"}


@dataclass(frozen=True, eq=False)
class BlockPanels:
    """A weight in one of the kernels' block layouts (`csrc/linear.c`): "q8" or "q4"."""

    layout: str
    data: torch.Tensor  # uint8: the panels' blocks, one after the other
    in_features: int


def pack_blocks(t: QuantTensor, lanes: int) -> BlockPanels:
    """A GGUF matrix in a format of KERNEL_FORMATS -> its panels of `lanes` output rows."""
    layout = KERNEL_FORMATS[t.qtype]
    q, d, m = blocks(t)
    O, I = q.shape
    P, nb = -(-O // lanes), I // BLOCK
    rows = ((0, P * lanes - O), (0, 0))
    q = np.pad(q, rows).reshape(P, lanes, nb, BLOCK).transpose(0, 2, 3, 1)  # [P, nb, 32, lanes]

    def per_block(scales: np.ndarray) -> np.ndarray:  # [O, nb] fp16 -> [P, nb, 2 lanes] bytes
        scales = np.pad(scales, rows).reshape(P, lanes, nb).transpose(0, 2, 1)
        return np.ascontiguousarray(scales).view(np.uint8)

    if layout == "q8":
        parts = [per_block(d), np.ascontiguousarray(q).view(np.uint8).reshape(P, nb, -1)]
    else:  # a byte holds value 2j in its low and 2j + 1 in its high nibble, for each lane
        pairs = q[:, :, 0::2] | (q[:, :, 1::2] << 4)  # [P, nb, 16, lanes]
        parts = [per_block(d), per_block(m), np.ascontiguousarray(pairs).reshape(P, nb, -1)]
    packed = np.ascontiguousarray(np.concatenate(parts, axis=-1)).reshape(-1)
    return BlockPanels(layout, torch.from_numpy(packed), I)


class CKernels:
    """Kernels from a library built by `build` (or anything with its functions and signatures).

    Weights are packed in panels of `lanes` output rows (the vector width of the path)."""

    def __init__(self, library) -> None:
        self._library = library
        self.name: str = library.kernel_isa().decode()
        self.threading: str = library.kernel_threading().decode()
        self.lanes: int = library.kernel_lanes()

    def fits(self, head_dim: int, widths: tuple[int, ...]) -> bool:
        """True when a model with these head and row widths runs on this path (multiples of 16)."""
        return head_dim % 16 == 0 and all(w % 16 == 0 for w in widths)

    def pack(self, w: torch.Tensor | QuantTensor) -> torch.Tensor | BlockPanels:
        """w: [O, I] fp32 or bf16 -> panels [ceil(O / lanes), I, lanes] (panel p, column k holds
        w[lanes p .. lanes p + lanes - 1, k]), the rows past O zero: the layout `linear` reads.
        A GGUF matrix in a format the kernels compute in -> `BlockPanels`; in another format, its
        numbers in fp32."""
        if isinstance(w, QuantTensor):
            return (pack_blocks(w, self.lanes) if w.qtype in KERNEL_FORMATS
                    else self.pack(w.dequantize()))
        assert w.dtype in _LINEAR, w.dtype
        O, I = w.shape
        padded = w.new_zeros(-(-O // self.lanes) * self.lanes, I)
        padded[:O] = w
        return padded.view(-1, self.lanes, I).transpose(1, 2).contiguous()

    def linear(self, x: torch.Tensor, panels: torch.Tensor | BlockPanels,
               out_features: int) -> torch.Tensor:
        """x: [T, I] fp32, panels: `pack(w)` of w [out_features, I] -> x @ w.T: [T, O] fp32."""
        T, I = x.shape
        if isinstance(panels, BlockPanels):
            assert panels.in_features == I, (x.shape, panels.in_features)
            function, data = f"linear_{panels.layout}", panels.data
        else:
            assert panels.shape[1:] == (I, self.lanes), (x.shape, panels.shape)
            function, data = _LINEAR[panels.dtype], panels
        assert x.dtype == torch.float32, x.dtype
        x = x.contiguous()
        y = torch.empty(T, out_features, dtype=torch.float32)
        if T:
            status = getattr(self._library, function)(
                x.data_ptr(), data.data_ptr(), y.data_ptr(), T, I, out_features,
                torch.get_num_threads())
            assert status == 0, status
        return y

    def attention(self, qkv: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                  mask: torch.Tensor | None, start: int, num_heads: int) -> torch.Tensor:
        """One layer's attention for T new rows (see `Kernels.attention`)."""
        T, G, capacity, d = qkv.shape[0], keys.shape[0], keys.shape[1], keys.shape[2]
        if T > ROW_INVARIANT_ROWS:
            return long_attention(qkv, keys, values, cos, sin, positions, mask, start, num_heads)
        assert qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous()
        assert qkv.shape[1] == (num_heads + 2 * G) * d, (qkv.shape, num_heads, G, d)
        out = torch.empty(T, num_heads * d, dtype=torch.float32)
        mask = None if mask is None else mask.contiguous()  # held: the kernel reads its memory
        status = self._library.attention(
            qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), cos.data_ptr(), sin.data_ptr(),
            positions.data_ptr(), None if mask is None else mask.data_ptr(),
            out.data_ptr(), T, start, num_heads, G, d, capacity, torch.get_num_threads())
        assert status == 0, status
        return out

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x: [T, H], weight: [H] fp32 -> x / sqrt(mean(x²) + eps) · weight per row, [T, H]."""
        x, weight = x.contiguous(), weight.contiguous()
        out = torch.empty_like(x)
        status = self._library.rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(),
                                        x.shape[0], x.shape[1], eps)
        assert status == 0, status
        return out

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: [T, 2 I] = [gate; up] per row -> silu(gate) · up, [T, I]."""
        gate_up = gate_up.contiguous()
        T, width = gate_up.shape
        out = torch.empty(T, width // 2, dtype=torch.float32)
        status = self._library.silu_mul(gate_up.data_ptr(), out.data_ptr(), T, width // 2)
        assert status == 0, status
        return out
