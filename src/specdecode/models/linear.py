"""A linear layer's weight, held in the layout its kernel path reads."""

from __future__ import annotations

import torch

from .. import kernels as kernel_paths
from ..kernels import Kernels
from ..quant import QuantTensor

Weight = torch.Tensor | QuantTensor


class Linear:
    """y = x @ wᵀ + b for fp32 activations x: [T, in]; w: [out, in] in fp32 or bf16, or a GGUF
    matrix as stored (`quant.QuantTensor`), or such matrices of one width stacked by rows in
    different formats (a list: q, k and v of a mixed-format file), b: [out].

    The weight is kept only as `kernels.pack` lays it out (packed panels on the C paths), so every
    row count takes one path and a token's output does not depend on how many tokens share the
    step. All arithmetic is fp32 whatever the weight dtype."""

    def __init__(self, weight: Weight | list[Weight], bias: torch.Tensor | None = None,
                 kernels: Kernels | None = None) -> None:
        self.kernels = kernels or kernel_paths.active()
        parts = weight if isinstance(weight, list) else [weight]
        self.in_features = parts[0].shape[1]
        self._rows = [p.shape[0] for p in parts]
        self.out_features = sum(self._rows)
        # as stored: a torch dtype, or the GGUF format's name ("+"-joined for mixed parts)
        self._kinds = [p.qtype if isinstance(p, QuantTensor) else p.dtype for p in parts]
        kinds = sorted({str(k) for k in self._kinds})
        self.dtype = self._kinds[0] if len(kinds) == 1 else "+".join(kinds)
        self.bias = None if bias is None else bias.float()  # [out]
        self._packed = [self.kernels.pack(p if isinstance(p, QuantTensor) else p.detach())
                        for p in parts]

    @property
    def nbytes(self) -> int:
        """Bytes of the weight as held (packed or stored)."""
        data = [p if isinstance(p, torch.Tensor) else p.data for p in self._packed]
        return sum(d.numel() * d.element_size() for d in data)

    def parts(self) -> list[tuple[object, int]]:
        """(dtype, output rows) of each stacked part."""
        return list(zip(self._kinds, self._rows))

    def packed_parts(self) -> list[tuple[object, int]]:
        """(the weight as `kernels.pack` laid it out, output rows) of each stacked part."""
        return list(zip(self._packed, self._rows))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, in] fp32 -> [T, out] fp32."""
        ys = [self.kernels.linear(x, p, rows) for p, rows in zip(self._packed, self._rows)]
        y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=1)
        return y if self.bias is None else y + self.bias
