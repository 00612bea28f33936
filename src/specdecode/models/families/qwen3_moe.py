"""Qwen3-MoE: Qwen3's attention (q/k head norms) with a mixture of SwiGLU experts in place of the
MLP: a router picks each row's top-k experts by softmax probability, renormalised (the
config's norm_topk_prob), and their outputs are summed with those weights. Layers listed in
mlp_only_layers, or off the decoder_sparse_step, keep a dense MLP."""

from . import Experts, Family


def _experts(config, layer: int) -> Experts | None:
    if (config.num_experts == 0 or layer in (config.mlp_only_layers or [])
            or (layer + 1) % config.decoder_sparse_step):
        return None
    return Experts(config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size,
                   bool(config.norm_topk_prob))


def _from_gguf(config, fields: dict) -> None:
    # transformers' reader drops the experts' width and leaves norm_topk_prob at False; llama.cpp
    # computes Qwen3-MoE with the top-k probabilities renormalised
    arch = fields["general.architecture"]
    config.moe_intermediate_size = fields.get(f"{arch}.expert_feed_forward_length",
                                              config.moe_intermediate_size)
    config.norm_topk_prob = True


FAMILY = Family("qwen3_moe", model_types=("qwen3_moe",), gguf_architectures=("qwen3moe",),
                norms={"input_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                       "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
                experts=_experts, from_gguf=_from_gguf)
