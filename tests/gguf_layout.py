"""A transformers model written to GGUF the way llama.cpp's converter (`convert_hf_to_gguf.py`)
writes it, in F32: its tensor names, its metadata keys, q/k rows permuted for the architectures
it permutes, and rope scaling as it stores it: Llama-3.1's as a `rope_freqs` tensor, linear
scaling as metadata.

Written here from the converter's documented behaviour, independently of the loader under test:
a loader that reads the layout wrongly gives logits that differ from the transformers model's.
The file carries a tiny byte-level BPE tokenizer (`VOCAB` tokens: the 256 bytes, 62 merges and
two specials), so models written here have that vocabulary and load in seconds.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

# transformers model_type -> (GGUF architecture, whether the converter permutes q/k rows)
ARCHITECTURES = {"llama": ("llama", True), "mistral": ("llama", True), "qwen2": ("qwen2", False),
                 "qwen3": ("qwen3", False), "gemma3_text": ("gemma3", False),
                 "qwen3_moe": ("qwen3moe", False)}
LAYER_PARTS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
# Gemma's converter (Gemma3Model): its four layer norms by llama.cpp's names, and every norm
# stored as 1 + w (transformers' Gemma3RMSNorm multiplies by 1 + w, llama.cpp's by the weight)
GEMMA_PARTS = {**LAYER_PARTS, "post_attention_layernorm": "post_attention_norm",
               "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    others = iter(range(256, 512))
    return [chr(b if b in printable else next(others)) for b in range(256)]


LETTERS = "etaoinsrhl"
MERGES = [f"{a} {b}" for a in LETTERS for b in LETTERS][:62]
TOKENS = _byte_symbols() + [m.replace(" ", "") for m in MERGES] + ["<|endoftext|>", "<|im_end|>"]
VOCAB = len(TOKENS)  # 320


def permute_like_llama_cpp(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a q or k projection from transformers' halves to llama.cpp's interleaved pairs."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2)
            .reshape(w.shape))


def llama3_rope_factors(config) -> np.ndarray:
    """The converter's `rope_freqs` for rope type "llama3": per frequency, the divisor that
    turns 1 / base^(2i/d) into Llama-3.1's scaled frequency."""
    rope = config.rope_parameters
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    base, factor = rope["rope_theta"], rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    old_context = rope["original_max_position_embeddings"]
    factors = []
    for i in range(0, dim, 2):
        wavelength = 2 * math.pi * base ** (i / dim)
        if wavelength < old_context / high:
            factors.append(1.0)
        elif wavelength > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def write_like_llama_cpp(model: torch.nn.Module, path: Path) -> Path:
    """`model` (a transformers causal LM of `VOCAB` tokens) as a GGUF file."""
    from gguf import GGUFWriter, RopeScalingType

    config = model.config
    assert config.vocab_size == VOCAB, config.vocab_size
    arch, permuted = ARCHITECTURES[config.model_type]
    writer = GGUFWriter(str(path), arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(TOKENS)
    writer.add_token_types([1] * (VOCAB - 2) + [3, 3])  # normal, then control
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(VOCAB - 2)
    writer.add_eos_token_id(VOCAB - 1)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # Gemma 3: the global layers' parameters; the local layers' base is llama.cpp's fixed 10000
    rope = config.rope_parameters.get("full_attention", config.rope_parameters)
    writer.add_name(config.model_type)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)
    if arch == "gemma3":
        writer.add_sliding_window(config.sliding_window)
    if arch == "qwen3moe":
        writer.add_expert_count(config.num_experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    if head_dim != config.hidden_size // config.num_attention_heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if rope.get("rope_type", "default") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(config))
    elif rope.get("rope_type", "default") == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])

    def add(name: str, tensor: torch.Tensor) -> None:
        if arch == "gemma3" and name.endswith("norm.weight"):
            tensor = tensor + 1
        writer.add_tensor(name, tensor.detach().float().numpy().copy())

    state = model.state_dict()
    add("token_embd.weight", state["model.embed_tokens.weight"])
    add("output_norm.weight", state["model.norm.weight"])
    if not config.tie_word_embeddings:
        add("output.weight", state["lm_head.weight"])
    for i in range(config.num_hidden_layers):
        for part, short in (GEMMA_PARTS if arch == "gemma3" else LAYER_PARTS).items():
            for kind in ("weight", "bias"):
                tensor = state.get(f"model.layers.{i}.{part}.{kind}")
                if tensor is None:
                    continue
                if permuted and short in ("attn_q", "attn_k"):
                    heads = config.num_attention_heads if short == "attn_q" \
                        else config.num_key_value_heads
                    tensor = torch.from_numpy(permute_like_llama_cpp(tensor.numpy(), heads))
                add(f"blk.{i}.{short}.{kind}", tensor)
        experts = f"model.layers.{i}.mlp.experts."
        if f"{experts}down_proj" in state:  # each expert matrix of all experts in one tensor
            gate, up = state[f"{experts}gate_up_proj"].chunk(2, dim=1)  # [E, 2 I, H] halves
            add(f"blk.{i}.ffn_gate_inp.weight", state[f"model.layers.{i}.mlp.gate.weight"])
            add(f"blk.{i}.ffn_gate_exps.weight", gate)
            add(f"blk.{i}.ffn_up_exps.weight", up)
            add(f"blk.{i}.ffn_down_exps.weight", state[f"{experts}down_proj"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
