"""Gemma 3 (text): four norms a layer (before and after attention and the MLP) and q/k head
norms, each multiplying by 1 + w (llama.cpp's converter stores 1 + w); GeGLU; embeddings times
sqrt(hidden); local layers with a sliding window and their own rotary base, every sixth layer
global (the config's layer_types); scores scaled by 1/sqrt(query_pre_attn_scalar); tied output."""

from . import Family

FAMILY = Family("gemma3", model_types=("gemma3_text",), gguf_architectures=("gemma3",), norms={
    "input_norm": "input_layernorm", "attention_out_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "ffn_out_norm": "post_feedforward_layernorm",
    "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
    norm_shift=1.0, scales_embedding=True)
