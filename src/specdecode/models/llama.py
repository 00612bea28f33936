"""Native forward for the Llama family (Llama 2/3, SmolLM2, Mistral without sliding window, Qwen2).

Built from the weights of a loaded transformers model (no download, no extra conversion): q/k/v and
gate/up projections are fused into one matrix each, so a decoder layer is four matrix products.
The KV cache is static (`cache.StaticKVCache`): rollback moves a length, nothing is freed.
One code path scores 1..K+1 new tokens with a causal mask over the cached prefix; every operation
of a step runs on one kernel path (`kernels`), which computes a token the same way whatever the
number of tokens in the step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from .. import kernels as kernel_paths
from ..cache import StaticKVCache
from ..kernels import Kernels
from ..rope import frequencies, tables
from ..tree import TokenTree
from .linear import Linear

SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}


def supports(config) -> bool:
    """True when `NativeLlama` reproduces this architecture exactly."""
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        return False
    # these rotary types change with the sequence length; a static cos/sin table cannot follow
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") in ("dynamic", "longrope"):
        return False
    # sliding-window attention would need a banded mask; leave it to transformers
    sliding = getattr(config, "sliding_window", None)
    uses_sliding = getattr(config, "use_sliding_window", sliding is not None)
    return not (sliding and uses_sliding)


@dataclass
class _Layer:
    input_norm: torch.Tensor | None  # [H]; None: the layer reads its input unnormalised (EAGLE)
    qkv: Linear  # H -> (n_heads + 2 n_kv) d, with a bias on Qwen2
    out: Linear  # n_heads d -> H, with a bias on Llama with attention_bias=True
    post_norm: torch.Tensor  # [H]
    gate_up: Linear  # H -> 2 I
    down: Linear  # I -> H


class NativeLlama:
    """A `Target` for Llama-family models, with a static KV cache.

    Built from a transformers config and the checkpoint's tensors by their transformers names
    (`model.layers.0.self_attn.q_proj.weight`, ...), so the loader need not build the transformers
    model at all (that costs ~1.5 s of imports and initialisation per load); `from_hf` takes a
    transformers model instead."""

    def __init__(self, config, weights: Mapping[str, torch.Tensor],
                 dtype: torch.dtype = torch.float32, kernels: Kernels | None = None) -> None:
        assert supports(config), config.model_type
        self.config = config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.kernels = kernels or kernel_paths.active()
        if not self.kernels.fits(self.head_dim, (config.hidden_size, config.intermediate_size)):
            logging.getLogger("specdecode").warning(
                "specdecode: the %s kernels need head and row widths in multiples of 16; this "
                "model runs on the torch path", self.kernels.name)
            self.kernels = kernel_paths.load("torch")
        self.eps = config.rms_norm_eps
        self.max_length = config.max_position_embeddings
        self.num_layers = config.num_hidden_layers

        # matrices in `dtype`; norm weights, biases, activations, the KV cache and all arithmetic
        # in fp32: a bf16 step saves its time in reading weights, and fp32 activations keep the
        # tiny differences between a 1-token and a K-token step (torch's attention is not
        # batch-invariant) from being rounded up into different greedy tokens
        self.dtype = dtype

        def get(name: str, dtype: torch.dtype = dtype) -> torch.Tensor:
            return weights[name].detach().to(dtype)

        def optional(name: str, dtype: torch.dtype = dtype) -> torch.Tensor | None:
            return get(name, dtype) if name in weights else None

        f32 = torch.float32
        self.embed = get("model.embed_tokens.weight")  # [V, H]
        self.norm = optional("model.norm.weight", f32)  # None: no final norm (an EAGLE head's layer)
        # tied embeddings are saved once, under the input embedding's name
        self.lm_head = optional("lm_head.weight")  # [V, H], for drafters and training to read
        if self.lm_head is None:
            self.lm_head = self.embed
        self.vocab_size = self.lm_head.shape[0]
        self._lm_head = self._linear(self.lm_head)
        self.layers = []
        for i in range(self.num_layers):
            attn, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            qkv = [f"{attn}{p}_proj" for p in "qkv"]
            bias = None
            if f"{qkv[0]}.bias" in weights:  # Qwen2
                bias = torch.cat([get(f"{p}.bias", f32) for p in qkv])
            self.layers.append(
                _Layer(
                    input_norm=optional(f"model.layers.{i}.input_layernorm.weight", f32),
                    qkv=self._linear(torch.cat([get(f"{p}.weight") for p in qkv]), bias),
                    out=self._linear(get(f"{attn}o_proj.weight"),
                                     optional(f"{attn}o_proj.bias", f32)),
                    post_norm=get(f"model.layers.{i}.post_attention_layernorm.weight", f32),
                    gate_up=self._linear(torch.cat([get(f"{mlp}gate_proj.weight"),
                                                    get(f"{mlp}up_proj.weight")])),
                    down=self._linear(get(f"{mlp}down_proj.weight")),
                )
            )
        self._inv_freq, self._rope_scale = frequencies(config)
        self.cache = StaticKVCache(
            self.num_layers, self.num_kv_heads, self.head_dim, 1024, self.max_length, f32
        )
        self._rope_cache(self.cache.capacity)

    def _linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
        return Linear(weight, bias, self.kernels)

    @classmethod
    def from_hf(cls, hf_model: torch.nn.Module, dtype: torch.dtype = torch.float32,
                kernels: Kernels | None = None) -> "NativeLlama":
        weights = dict(hf_model.state_dict())
        weights["lm_head.weight"] = hf_model.get_output_embeddings().weight  # tied or not
        return cls(hf_model.config, weights, dtype, kernels)

    @property
    def length(self) -> int:
        return self.cache.length

    def reset(self) -> None:
        self.cache.rollback(0)

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)

    def _rope_cache(self, capacity: int) -> None:
        self._cos, self._sin = tables(self._inv_freq, self._rope_scale, capacity)

    def forward(self, tokens: torch.Tensor, layers: Sequence[int] | None = None) -> torch.Tensor:
        """tokens: [T] int64 -> logits [T, V]; appends T positions to the cache."""
        return self.logits(self.run_layers(self.embedding(tokens), layers=layers))

    def hidden(self, tokens: torch.Tensor, tree: TokenTree | None = None) -> torch.Tensor:
        """tokens: [T] int64 -> final-normed hidden states [T, H]; appends T positions to the cache.

        With a tree, tokens are its rows [root, nodes] (T = N + 1) and each row attends to the
        cache and its own ancestors only, at position start + depth (`tree.TokenTree`)."""
        if tree is None or tree.is_chain:
            return self.run_layers(self.embedding(tokens))
        assert tokens.shape[0] == len(tree) + 1, (tokens.shape, len(tree))
        positions, mask = tree.attention(self.cache.length)
        return self.run_layers(self.embedding(tokens), positions, mask)

    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: [T] int64 -> their input vectors [T, H] (fp32)."""
        return self.embed[tokens].float()

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [T, H] -> logits [T, V] (float32)."""
        return self._lm_head(hidden)

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append tokens without the LM head (20% of a long prompt's prefill on SmolLM2); returns
        their hidden states [T, H]."""
        return self.run_layers(self.embedding(tokens))

    def compact(self, base: int, positions: Sequence[int]) -> None:
        """Keep the cached entries at `positions` (ascending, all >= base), moved to base, base + 1,
        ..; drop everything else past base. A tree's accepted path is packed this way."""
        self.cache.compact(base, positions)

    @torch.inference_mode()
    def run_layers(self, x: torch.Tensor, positions: torch.Tensor | None = None,
                   mask: torch.Tensor | None = None,
                   layers: Sequence[int] | None = None) -> torch.Tensor:
        """The decoder stack on input vectors x: [T, H] (token embeddings, or an EAGLE head's fused
        features), appended to the cache at start = cache length; returns [T, H] after the final
        norm (if there is one).

        positions: [T] rotary positions (default start..start+T-1); mask: [T, start + T] bool, True
        where a row may attend (default causal over the cache and the new rows)."""
        T, start = x.shape[0], self.cache.length
        self.cache.reserve(T)
        if self._cos.shape[0] < self.cache.capacity:
            self._rope_cache(self.cache.capacity)
        if positions is None:
            positions = torch.arange(start, start + T)
        assert mask is None or mask.shape == (T, start + T), (mask.shape, T, start)
        k = self.kernels
        for i in range(self.num_layers) if layers is None else layers:
            w = self.layers[i]
            h = x if w.input_norm is None else k.rms_norm(x, w.input_norm, self.eps)
            o = k.attention(w.qkv(h), self.cache.keys[i], self.cache.values[i], self._cos,
                            self._sin, positions, mask, start, self.num_heads)  # [T, heads d]
            x = x + w.out(o)
            x = x + w.down(k.silu_mul(w.gate_up(k.rms_norm(x, w.post_norm, self.eps))))
        self.cache.length = start + T
        return x if self.norm is None else k.rms_norm(x, self.norm, self.eps)
