"""A decoder layer as the kernels run it: what `decoder_layers` (csrc/layers.c) and a model's
layer-by-layer loop both read, whatever the family (Llama's two norms, Gemma's four and its q/k
norms, a sliding window, a second set of rotary tables)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

ACTIVATIONS = ("silu", "gelu_tanh")  # SwiGLU, GeGLU (tanh form): index = the C stack's number


@dataclass(frozen=True)
class StackShape:
    """What every layer of a model shares."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inner: int  # the MLP's inner width
    activation: str  # one of ACTIVATIONS
    scale: float  # attention's score factor: head_dim ** -0.5 but for Gemma


@dataclass
class DecoderLayer:
    """One layer's weights and rules. The matrices are `models.linear.Linear`s (anything with
    `packed_parts()`, `in_features`, `out_features`, `bias` and a call); norm weights fp32, each
    None where the layer has no such norm."""

    qkv: Any  # H -> (heads + 2 kv_heads) head_dim, q, k and v stacked by rows
    out: Any  # heads head_dim -> H
    gate_up: Any  # H -> 2 inner, gate and up stacked by rows (None: a mixture of experts)
    down: Any  # inner -> H
    ffn_norm: torch.Tensor  # [H], before the MLP
    input_norm: torch.Tensor | None = None  # [H], before attention (None: an EAGLE head's layer)
    attention_out_norm: torch.Tensor | None = None  # [H], on attention's output (Gemma)
    ffn_out_norm: torch.Tensor | None = None  # [H], on the MLP's output (Gemma)
    q_norm: torch.Tensor | None = None  # [head_dim], each q head before rope (Qwen3, Gemma)
    k_norm: torch.Tensor | None = None  # [head_dim], each k head before rope
    window: int = 0  # a row sees keys less than this many positions behind it (0: all)
    rope: int = 0  # which of the model's rotary tables (Gemma: local or global)
    # a mixture of experts in place of gate_up and down: router H -> experts, and per expert its
    # (gate_up, down); each row takes the top_k experts of highest softmax probability, those
    # renormalised to sum to 1 where `normalize`
    router: Any = None
    experts: Sequence[tuple[Any, Any]] = ()
    top_k: int = 0
    normalize: bool = False

    def norms(self) -> tuple:
        """The norm weights in the C record's order (kernels.h)."""
        return (self.input_norm, self.attention_out_norm, self.ffn_norm, self.ffn_out_norm,
                self.q_norm, self.k_norm)

    def matrices(self) -> tuple:
        return (self.qkv, self.out, self.gate_up, self.down)
