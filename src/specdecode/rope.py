"""Rotary position embedding (RoPE, Su et al. 2021) as transformers' Llama computes it: one module
for the native model, its C and torch kernels, the EAGLE head's training layer and the tests."""

from __future__ import annotations

import torch


def head_dim(config) -> int:
    """The width of an attention head of a transformers config: its `head_dim`, else the hidden
    size over the heads. Rotary tables, KV caches, scales and layer shapes all read it here."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def frequencies(config, factors: torch.Tensor | None = None,
                layer_type: str | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [d / 2] and the cos/sin scale of a transformers config:
    1 / theta^(2i/d) for the default type, transformers' own function for scaled types; for
    the layers of `layer_type` where the config has rotary parameters per layer type (Gemma 3's
    local and global layers).

    factors: [d / 2] divisors of the frequencies, as llama.cpp stores rope scaling in a GGUF file
    (its `rope_freqs` tensor for Llama-3.1 and later: frequency i turns at inv_freq[i] /
    factors[i]), for a config read from such a file, which says nothing of the scaling."""
    rope = getattr(config, "rope_parameters", None) or {}
    rope = rope.get(layer_type, rope)
    rope_type = rope.get("rope_type", "default")
    if rope_type == "default":
        dim = head_dim(config)
        exponents = torch.arange(0, dim, 2, dtype=torch.float) / dim
        inv_freq, scale = 1.0 / (rope["rope_theta"] ** exponents), 1.0
    else:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        by_type = {} if layer_type is None else {"layer_type": layer_type}
        inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](config, **by_type)
    if factors is not None:
        assert factors.shape == inv_freq.shape, (factors.shape, inv_freq.shape)
        inv_freq = inv_freq / factors.float()
    return inv_freq.float(), float(scale)


def tables(inv_freq: torch.Tensor, scale: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [length, d] of positions 0..length-1 (the halves layout of HF Llama)."""
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos() * scale, angles.sin() * scale


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin. x: [..., T, d]; cos, sin: [T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
