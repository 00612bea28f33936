"""A linear layer's weight, held in the layout its kernel path reads."""

from __future__ import annotations

import torch

from .. import kernels as kernel_paths
from ..kernels import Kernels
from ..quant import QuantTensor


class Linear:
    """y = x @ wᵀ + b for fp32 activations x: [T, in]; w: [out, in] in fp32 or bf16, or a GGUF
    matrix as stored (`quant.QuantTensor`), b: [out].

    The weight is kept only as `kernels.pack` lays it out (packed panels on the C paths), so every
    row count takes one path and a token's output does not depend on how many tokens share the
    step. All arithmetic is fp32 whatever the weight dtype."""

    def __init__(self, weight: torch.Tensor | QuantTensor, bias: torch.Tensor | None = None,
                 kernels: Kernels | None = None) -> None:
        self.kernels = kernels or kernel_paths.active()
        self.out_features = weight.shape[0]
        # of the weight as stored: a torch dtype, or the GGUF format's name
        self.dtype = weight.qtype if isinstance(weight, QuantTensor) else weight.dtype
        self.bias = None if bias is None else bias.float()  # [out]
        self._packed = self.kernels.pack(weight if isinstance(weight, QuantTensor)
                                         else weight.detach())

    @property
    def nbytes(self) -> int:
        """Bytes of the weight as held (packed or stored)."""
        packed = self._packed
        data = packed if isinstance(packed, torch.Tensor) else packed.data
        return data.numel() * data.element_size()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, in] fp32 -> [T, out] fp32."""
        y = self.kernels.linear(x, self._packed, self.out_features)
        return y if self.bias is None else y + self.bias
