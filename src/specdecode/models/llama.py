"""Native forward for the Llama family (Llama 2/3, SmolLM2, Mistral without sliding window, Qwen2).

Built from the weights of a loaded transformers model (no download, no extra conversion): q/k/v and
gate/up projections are fused into one matrix each, so a decoder layer is four matrix products.
The KV cache is static (`cache.StaticKVCache`): rollback moves a length, nothing is freed.
One code path scores 1..K+1 new tokens with a causal mask over the cached prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from ..cache import StaticKVCache

SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}


def supports(config) -> bool:
    """True when `NativeLlama` reproduces this architecture exactly."""
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    # sliding-window attention would need a banded mask; leave it to transformers
    sliding = getattr(config, "sliding_window", None)
    uses_sliding = getattr(config, "use_sliding_window", sliding is not None)
    return not (sliding and uses_sliding)


@dataclass
class _Layer:
    input_norm: torch.Tensor  # [H]
    qkv: torch.Tensor  # [(n_heads + 2 n_kv) d, H]
    qkv_bias: torch.Tensor | None  # [(n_heads + 2 n_kv) d]
    out: torch.Tensor  # [H, n_heads d]
    out_bias: torch.Tensor | None  # [H] (Llama with attention_bias=True)
    post_norm: torch.Tensor  # [H]
    gate_up: torch.Tensor  # [2 I, H]
    down: torch.Tensor  # [H, I]


class NativeLlama:
    """A `Target` for Llama-family models, with a static KV cache."""

    def __init__(self, hf_model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
        config = hf_model.config
        assert supports(config), config.model_type
        base = hf_model.model
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.eps = config.rms_norm_eps
        self.max_length = config.max_position_embeddings
        self.num_layers = config.num_hidden_layers
        cast = lambda t: t.detach().to(dtype)  # noqa: E731
        self.embed = cast(base.embed_tokens.weight)  # [V, H]
        self.norm = cast(base.norm.weight)
        self.lm_head = cast(hf_model.get_output_embeddings().weight)  # [V, H], tied or not
        self.vocab_size = self.lm_head.shape[0]
        self.layers = []
        for layer in base.layers:
            attn, mlp = layer.self_attn, layer.mlp
            projections = (attn.q_proj, attn.k_proj, attn.v_proj)
            bias = None
            if attn.q_proj.bias is not None:
                bias = cast(torch.cat([p.bias for p in projections]))
            out_bias = None if attn.o_proj.bias is None else cast(attn.o_proj.bias)
            self.layers.append(
                _Layer(
                    input_norm=cast(layer.input_layernorm.weight),
                    qkv=cast(torch.cat([p.weight for p in projections])),
                    qkv_bias=bias,
                    out=cast(attn.o_proj.weight),
                    out_bias=out_bias,
                    post_norm=cast(layer.post_attention_layernorm.weight),
                    gate_up=cast(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
                    down=cast(mlp.down_proj.weight),
                )
            )
        rotary = base.rotary_emb
        self._inv_freq = rotary.inv_freq.float()  # [d / 2], already adjusted for rope scaling
        self._rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.cache = StaticKVCache(
            self.num_layers, self.num_kv_heads, self.head_dim, 1024, self.max_length, dtype
        )
        self._rope_cache(self.cache.capacity)

    @property
    def length(self) -> int:
        return self.cache.length

    def reset(self) -> None:
        self.cache.rollback(0)

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)

    def _rope_cache(self, capacity: int) -> None:
        freqs = torch.outer(torch.arange(capacity, dtype=torch.float32), self._inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)  # [capacity, d], halves layout as in HF Llama
        self._cos = (angles.cos() * self._rope_scale).to(self.embed.dtype)
        self._sin = (angles.sin() * self._rope_scale).to(self.embed.dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, layers: Sequence[int] | None = None) -> torch.Tensor:
        """tokens: [T] int64 -> logits [T, V]; appends T positions to the cache."""
        x = self._hidden(tokens, layers)
        return _linear(x, self.lm_head).float()

    def prefill(self, tokens: torch.Tensor) -> None:
        """Append tokens without the LM head (20% of a long prompt's prefill on SmolLM2)."""
        self._hidden(tokens, None)

    @torch.inference_mode()
    def _hidden(self, tokens: torch.Tensor, layers: Sequence[int] | None) -> torch.Tensor:
        """Run the decoder layers over tokens ([T]); returns the final-normed hidden states [T, H]."""
        T, start = tokens.shape[0], self.cache.length
        self.cache.reserve(T)
        if self._cos.shape[0] < self.cache.capacity:
            self._rope_cache(self.cache.capacity)
        end = start + T
        cos, sin = self._cos[start:end], self._sin[start:end]  # [T, d]
        mask = None
        if T > 1 and start > 0:  # new token i sees the cached prefix and new tokens 0..i
            mask = torch.arange(end)[None, :] <= torch.arange(start, end)[:, None]  # [T, end]
        x = self.embed[tokens]  # [T, H]
        for i in range(self.num_layers) if layers is None else layers:
            x = x + self._attention(i, x, start, cos, sin, mask)
            w = self.layers[i]
            h = F.rms_norm(x, w.post_norm.shape, w.post_norm, self.eps)
            gate, up = _linear(h, w.gate_up).chunk(2, dim=-1)
            x = x + _linear(F.silu(gate) * up, w.down)
        self.cache.length = end
        return F.rms_norm(x, self.norm.shape, self.norm, self.eps)

    def _attention(self, i, x, start, cos, sin, mask) -> torch.Tensor:
        w = self.layers[i]
        T, d, n_kv = x.shape[0], self.head_dim, self.num_kv_heads
        h = F.rms_norm(x, w.input_norm.shape, w.input_norm, self.eps)
        qkv = _linear(h, w.qkv, w.qkv_bias).view(T, -1, d).transpose(0, 1)  # [heads, T, d]
        q, k, v = qkv.split([self.num_heads, n_kv, n_kv])
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        keys, values = self.cache.write(i, start, k, v)  # [n_kv, start + T, d]
        # 4-D inputs with enable_gqa take torch's CPU flash kernel (3-D inputs take the math path:
        # 40% of an 800-token prefill, and 3x slower per decode step at 800 cached tokens)
        o = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask,
                                           is_causal=T > 1 and start == 0, enable_gqa=True)[0]
        o = o.reshape(self.num_heads, T, d).transpose(0, 1).reshape(T, self.num_heads * d)
        return _linear(o, w.out, w.out_bias)


def _linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T for x: [T, in], w: [out, in] -> [T, out].

    Measured on AVX-512 CPUs with torch's MKL kernels: `F.linear` on few rows takes a GEMV-like
    path that reaches about half the memory bandwidth, while `w @ x.T` with at least two columns
    takes a GEMM path at the bandwidth floor (SmolLM2-135M fp32 step: 51 ms -> 23 ms). A single
    row is therefore duplicated; the wasted column costs nothing measurable.
    """
    T = x.shape[0]
    columns = torch.cat([x, x]).t() if T == 1 else x.t()  # [in, max(T, 2)]
    y = (w @ columns)[:, :T].t().contiguous()
    return y if bias is None else y + bias


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, x·cos + rotate_half(x)·sin. x: [heads, T, d]; cos, sin: [T, d]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
