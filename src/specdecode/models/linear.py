"""A linear layer's weight, held in the layout the step's fastest path reads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import kernels


class Linear:
    """y = x @ wᵀ + b for fp32 activations x: [T, in]; w: [out, in] in fp32 or bf16, b: [out].

    Where the C kernel runs (`kernels`: an AVX-512 CPU with a C compiler) the weight is kept only
    in its packed panels: every row count takes that one path, so a token's output does not depend
    on how many tokens share the step. Elsewhere torch multiplies, in fp32 whatever the weight
    dtype (a bf16 GEMM would round the activations; such a difference grows into different greedy
    tokens between a prefill and a step)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.out_features = weight.shape[0]
        self.dtype = weight.dtype  # of the weight as stored
        self.bias = None if bias is None else bias.float()  # [out]
        fast = weight.device.type == "cpu" and kernels.enabled(weight.dtype)
        self._panels = kernels.pack(weight.detach()) if fast else None
        self._weight = None if fast else weight.detach()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, in] fp32 -> [T, out] fp32."""
        if self._panels is not None:
            y = kernels.linear(x, self._panels, self.out_features)
        elif x.device.type == "cpu":
            # measured with MKL: `F.linear` on one row takes a GEMV path at about half the memory
            # bandwidth, `w @ x.T` with two columns a GEMM path at the floor: duplicate the row
            T = x.shape[0]
            columns = torch.cat([x, x]).t() if T == 1 else x.t()  # [in, max(T, 2)]
            y = (self._weight.float() @ columns)[:, :T].t()
        else:
            y = F.linear(x, self._weight.float())
        return y if self.bias is None else y + self.bias
