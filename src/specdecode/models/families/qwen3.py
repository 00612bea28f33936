"""Qwen3: Qwen2's layers without the q/k/v biases, with an RMSNorm on each q and k head before
the rotary embedding; head size set apart from hidden / heads."""

from . import Family

FAMILY = Family("qwen3", model_types=("qwen3",), gguf_architectures=("qwen3",), norms={
    "input_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"})
