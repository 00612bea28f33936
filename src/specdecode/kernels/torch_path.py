"""The `torch` path: the kernels' operations in torch, for machines without a C compiler, and
the attention of long inputs, which every path shares.

Row invariance without control over the arithmetic: torch's matrix products and reductions may
pick a different algorithm (and summation order) for a different number of rows, so for calls of
up to ROW_INVARIANT_ROWS rows every row is computed by its own torch call of a shape that does not
depend on the other rows. Each token then costs what a one-token step costs: verification is
exact here but not cheap (docs/benchmarks/kernel-paths has the speed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from ..quant import QuantTensor
from ..rope import rotate
from .build import constants
from .layer import DecoderLayer, StackShape

# Calls of up to this many rows are row-invariant on every path (the rule kernels.h states):
# decoding and verification steps. Longer ones are prompt prefills, which every method computes
# in the same call, and take torch's batched routines (its flash attention is faster than a
# plain loop over the keys there).
ROW_INVARIANT_ROWS = constants()["ROW_INVARIANT_ROWS"]


@dataclass(frozen=True)
class CacheRows:
    """One sequence's new rows in a step: the cache they attend to and are written to (every
    layer's), behind `start` cached entries."""

    keys: torch.Tensor  # [layers, G, capacity, d] fp32, contiguous
    values: torch.Tensor  # [layers, G, capacity, d] fp32, contiguous
    start: int
    rows: int
    mask: torch.Tensor | None = None  # [rows, start + rows] bool, True = may attend; None: causal


def each_sequence(attend, qkv: torch.Tensor, caches: Sequence[CacheRows],
                  positions: torch.Tensor) -> torch.Tensor:
    """Attention of several sequences' rows as one call per sequence: `attend(qkv, cache,
    positions)` on each one's slice of qkv [T, ...] and positions [T]."""
    out, first = [], 0
    for c in caches:
        out.append(attend(qkv[first : first + c.rows], c, positions[first : first + c.rows]))
        first += c.rows
    return out[0] if len(out) == 1 else torch.cat(out)


def in_window(mask: torch.Tensor | None, start: int, positions: torch.Tensor,
              window: int) -> torch.Tensor | None:
    """A step's mask [T, start + T] (None: causal) narrowed to keys less than `window`
    positions behind each row (a cached key's position is its index, a new row's its entry in
    positions); None stays None without a window."""
    if not window:
        return mask
    T = positions.shape[0]
    if mask is None:
        mask = torch.arange(start + T)[None, :] <= torch.arange(start, start + T)[:, None]
    key_positions = torch.cat([torch.arange(start), positions])
    return mask & (key_positions[None, :] > positions[:, None] - window)


def long_attention(qkv: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, cos: torch.Tensor,
                   sin: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                   start: int, num_heads: int, window: int, scale: float) -> torch.Tensor:
    """`Kernels.attention` for calls of any length with torch's batched operations."""
    T, G, d = qkv.shape[0], keys.shape[0], keys.shape[2]
    end = start + T
    heads = qkv.view(T, -1, d).transpose(0, 1)  # [H + 2 G, T, d]
    qk = rotate(heads[: num_heads + G], cos[positions], sin[positions])  # q and k in one rotation
    keys[:, start:end], values[:, start:end] = qk[num_heads:], heads[num_heads + G:]
    mask = in_window(mask, start, positions, window)
    if mask is None and T > 1 and start > 0:  # new row i sees the cached prefix and rows 0..i
        mask = torch.arange(end)[None, :] <= torch.arange(start, end)[:, None]  # [T, end]
    # 4-D inputs with enable_gqa take torch's CPU flash kernel (3-D inputs take the math path)
    o = F.scaled_dot_product_attention(qk[None, :num_heads], keys[None, :, :end].float(),
                                       values[None, :, :end].float(), attn_mask=mask,
                                       is_causal=mask is None and T > 1, scale=scale,
                                       enable_gqa=True)[0]
    return o.transpose(0, 1).reshape(T, num_heads * d)


class TorchKernels:
    """`Kernels` in torch operations; weights stay as stored ([O, I], fp32 or bf16)."""

    name = "torch"
    threading = "torch"
    build_id = ""  # nothing compiled: torch's version is in every report
    invariant_rows = ROW_INVARIANT_ROWS  # longer calls take torch's batched routines

    def fits(self, head_dim: int, widths: tuple[int, ...]) -> bool:
        return True

    def pack(self, w: torch.Tensor | QuantTensor) -> torch.Tensor:
        return w.dequantize() if isinstance(w, QuantTensor) else w

    def linear(self, x: torch.Tensor, w: torch.Tensor, out_features: int) -> torch.Tensor:
        """x: [T, I] fp32, w: [O, I] -> x @ w.T: [T, O] fp32 (a bf16 weight is widened first: a
        bf16 product would round the activations)."""
        w = w.float()
        if x.shape[0] > ROW_INVARIANT_ROWS:
            return x @ w.T
        # one product per row, always of the same shapes and layout, [O, I] @ [2, I].T (the row
        # twice, column-major): with MKL a single column takes a GEMV path well below the memory
        # bandwidth, and a row-major [I, 2] a slow one (docs/benchmarks/kernel-paths)
        return torch.stack([(w @ torch.stack([row, row]).T)[:, 0] for row in x]) if len(x) \
            else x.new_empty(0, out_features)

    def stack(self, shape: StackShape, layers: Sequence[DecoderLayer]) -> None:
        return None  # the layers run one operation at a time

    def instruction_peak(self, seconds: float = 0.2) -> None:
        return None  # torch picks its own instructions

    def read_bandwidth(self, data: torch.Tensor) -> None:
        return None  # torch's own read is the floor's other measure

    def attention_inputs(self, caches: Sequence[CacheRows]) -> Sequence[CacheRows]:
        return caches

    def attention(self, qkv: torch.Tensor, caches: Sequence[CacheRows], layer: int,
                  cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                  num_heads: int, window: int, scale: float) -> torch.Tensor:
        return each_sequence(lambda rows, c, pos: self._attention(
            rows, c, layer, cos, sin, pos, num_heads, window, scale), qkv, caches, positions)

    def _attention(self, qkv: torch.Tensor, c: CacheRows, layer: int, cos: torch.Tensor,
                   sin: torch.Tensor, positions: torch.Tensor, num_heads: int, window: int,
                   scale: float) -> torch.Tensor:
        keys, values, start = c.keys[layer], c.values[layer], c.start
        T, G, d = qkv.shape[0], keys.shape[0], keys.shape[2]
        if T > ROW_INVARIANT_ROWS:
            return long_attention(qkv, keys, values, cos, sin, positions, c.mask, start,
                                  num_heads, window, scale)
        mask = in_window(c.mask, start, positions, window)
        end = start + T
        heads = qkv.view(T, -1, d).transpose(0, 1)  # [H + 2 G, T, d]
        # element-wise operations round each element alone: batching them changes nothing
        qk = rotate(heads[: num_heads + G], cos[positions], sin[positions])
        keys[:, start:end], values[:, start:end] = qk[num_heads:], heads[num_heads + G:]
        q = qk[:num_heads].transpose(0, 1).reshape(T, G, num_heads // G, d)  # [T, G, H / G, d]
        out = []
        for t in range(T):
            # the keys this row sees, gathered in position order: a tree node computes what the
            # same token computes in a chain, with tensors of the same shapes
            seen = (torch.arange(start + t + 1) if mask is None else mask[t].nonzero()[:, 0])
            k, v = keys[:, seen].float(), values[:, seen].float()  # [G, n, d], widened exactly
            # (a fresh copy of the query: no product's input depends on the row's offset)
            p = torch.softmax((q[t].clone() @ k.transpose(1, 2)) * scale, dim=-1)  # [G, H/G, n]
            out.append((p @ v).reshape(num_heads * d))
        return torch.stack(out)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        def norm(rows: torch.Tensor) -> torch.Tensor:
            return rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + eps) * weight

        return norm(x) if x.shape[0] > ROW_INVARIANT_ROWS else _by_row(norm, x)

    def head_norm(self, qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  num_heads: int, num_kv_heads: int, eps: float) -> torch.Tensor:
        d, kv_end = q_weight.shape[0], num_heads + num_kv_heads

        def norm(rows: torch.Tensor) -> torch.Tensor:
            heads = rows.view(rows.shape[0], -1, d)
            weight = torch.cat([q_weight.expand(num_heads, d), k_weight.expand(num_kv_heads, d)])
            qk = heads[:, :kv_end]
            qk = qk * torch.rsqrt(qk.pow(2).mean(-1, keepdim=True) + eps) * weight
            return torch.cat([qk, heads[:, kv_end:]], dim=1).reshape(rows.shape)

        return norm(qkv) if qkv.shape[0] > ROW_INVARIANT_ROWS else _by_row(norm, qkv)

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return _gated(F.silu, gate_up)

    def gelu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        return _gated(lambda gate: F.gelu(gate, approximate="tanh"), gate_up)


def _gated(activation, gate_up: torch.Tensor) -> torch.Tensor:
    """activation(gate) · up for gate_up [T, 2 I] = [gate; up] per row."""
    def gated(rows: torch.Tensor) -> torch.Tensor:
        gate, up = rows.chunk(2, dim=-1)
        return activation(gate) * up

    return gated(gate_up) if gate_up.shape[0] > ROW_INVARIANT_ROWS else _by_row(gated, gate_up)


def _by_row(fn, x: torch.Tensor) -> torch.Tensor:
    """fn applied to each row of x ([T, ...]) as a [1, ...] tensor: a reduction or a vectorised
    loop then never spans rows, whatever T."""
    return torch.cat([fn(x[t : t + 1]) for t in range(x.shape[0])]) if x.shape[0] else fn(x)
