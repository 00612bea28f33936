"""The C kernels of one instruction-set path, behind the `Kernels` interface."""

from __future__ import annotations

import torch

from .torch_path import ROW_INVARIANT_ROWS, long_attention

_LINEAR = {torch.float32: "linear_f32", torch.bfloat16: "linear_bf16"}


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

    def pack(self, w: torch.Tensor) -> torch.Tensor:
        """w: [O, I] fp32 or bf16 -> panels [ceil(O / lanes), I, lanes] (panel p, column k holds
        w[lanes p .. lanes p + lanes - 1, k]), the rows past O zero: the layout `linear` reads."""
        assert w.dtype in _LINEAR, w.dtype
        O, I = w.shape
        padded = w.new_zeros(-(-O // self.lanes) * self.lanes, I)
        padded[:O] = w
        return padded.view(-1, self.lanes, I).transpose(1, 2).contiguous()

    def linear(self, x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
        """x: [T, I] fp32, panels: `pack(w)` of w [out_features, I] -> x @ w.T: [T, O] fp32."""
        T, I = x.shape
        assert x.dtype == torch.float32 and panels.shape[1:] == (I, self.lanes), (x.shape,
                                                                                   panels.shape)
        x = x.contiguous()
        y = torch.empty(T, out_features, dtype=torch.float32)
        if T:
            status = getattr(self._library, _LINEAR[panels.dtype])(
                x.data_ptr(), panels.data_ptr(), y.data_ptr(), T, I, out_features,
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
