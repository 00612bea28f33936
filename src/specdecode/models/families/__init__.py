"""The model families the native backend computes, one file each: a `FAMILY = Family(...)`
declaring what sets the family apart. The GGUF reader (`models.gguf`), its checker
(`models.gguf_check`), the loader and `models.decoder.NativeDecoder` read these declarations and
nothing else of a family. What every family shares is read from the transformers config here
(activation, sliding windows, per-layer rotary parameters, attention's scale).

Adding a family: a new file here, found by `families()` without a list to edit, and its
reference tests (tests/models/test_families.py: a tiny random transformers model of the family,
written as llama.cpp's converter writes it, loads natively to the transformers model's logits).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ...rope import head_dim

# llama.cpp's GGUF names of a layer's matrices -> transformers names within "model.layers.N."
PROJECTIONS = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
# a layer's norms by role -> llama.cpp's GGUF name for that role (the same in every family)
NORM_ROLES = {"input_norm": "attn_norm", "attention_out_norm": "post_attention_norm",
              "ffn_norm": "ffn_norm", "ffn_out_norm": "post_ffw_norm", "q_norm": "attn_q_norm",
              "k_norm": "attn_k_norm"}
# a mixture-of-experts layer's tensors: the router, and each matrix of every expert in one
# tensor [experts, out, in] (transformers fuses gate and up into gate_up_proj; llama.cpp does not)
EXPERTS = {"ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.experts.gate_proj",
           "ffn_up_exps": "mlp.experts.up_proj", "ffn_down_exps": "mlp.experts.down_proj"}
# the global tensors
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
          "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
# transformers' activation names -> the kernels' (`kernels.layer.ACTIVATIONS`)
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]  # transformers' config.model_type values
    gguf_architectures: tuple[str, ...]  # GGUF general.architecture values
    # a layer's norms: role (NORM_ROLES) -> transformers name within the layer; "ffn_norm" always
    norms: Mapping[str, str] = field(default_factory=lambda: {
        "input_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"})
    # llama.cpp's converter interleaves the rotary halves of q and k's rows (its Llama writer)
    permuted_qk: bool = False
    # norms multiply by (norm_shift + w): Gemma's 1 + w; llama.cpp's converter stores the sum
    norm_shift: float = 0.0
    scales_embedding: bool = False  # input embeddings times sqrt(hidden) (Gemma)
    # a mixture of experts: (config, layer) -> its `Experts` rule, None for a dense MLP there
    experts: Callable[[object, int], "Experts | None"] | None = None
    # (config, GGUF metadata fields) -> None: sets in the config what transformers' GGUF reader
    # leaves at its defaults although the file (or llama.cpp's reading of it) says otherwise
    from_gguf: Callable[[object, dict], None] | None = None

    def gguf_layer_names(self) -> dict[str, str]:
        """llama.cpp's names within "blk.N." -> transformers names within "model.layers.N."."""
        names = {**PROJECTIONS, **{NORM_ROLES[role]: name for role, name in self.norms.items()}}
        return {**names, **EXPERTS} if self.experts else names

    def experts_at(self, config, layer: int) -> "Experts | None":
        return self.experts(config, layer) if self.experts else None


@dataclass(frozen=True)
class Experts:
    """How a mixture-of-experts layer routes a row: the `top_k` experts of highest router
    probability (softmax over all `count`), their probabilities renormalised to sum to 1 where
    `normalize`; each expert a SwiGLU MLP of `inner` width."""

    count: int
    top_k: int
    inner: int
    normalize: bool


@functools.cache
def families() -> tuple[Family, ...]:
    """Every family module's FAMILY, in name order."""
    found = []
    for module in pkgutil.iter_modules(__path__):
        found.append(importlib.import_module(f"{__name__}.{module.name}").FAMILY)
    return tuple(sorted(found, key=lambda f: f.name))


def by_model_type(model_type: str) -> Family | None:
    return next((f for f in families() if model_type in f.model_types), None)


def by_architecture(architecture: str) -> Family | None:
    return next((f for f in families() if architecture in f.gguf_architectures), None)


def activation(config) -> str | None:
    """The kernels' name of the config's MLP activation; None for one they do not compute."""
    name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")
    return ACTIVATIONS.get(name)


def layer_type(config, layer: int) -> str | None:
    """transformers' type of a layer ("sliding_attention", "full_attention"), None where the
    config has no per-layer types."""
    types = getattr(config, "layer_types", None)
    return types[layer] if types else None


def window(config, layer: int) -> int:
    """How far back layer `layer` attends (a row sees keys less than this many positions behind
    it), 0 for everything: per layer type where the config has them, else one window for all
    (Mistral's)."""
    sliding = getattr(config, "sliding_window", None) or 0
    kind = layer_type(config, layer)
    if kind is not None:
        return sliding if kind == "sliding_attention" else 0
    return sliding if getattr(config, "use_sliding_window", True) else 0


def rope_parameters(config, layer: int) -> dict:
    """The rotary parameters of layer `layer` (per layer type where the config nests them)."""
    rope = getattr(config, "rope_parameters", None) or {}
    kind = layer_type(config, layer)
    return rope[kind] if kind in rope else rope


def attention_scale(config) -> float:
    """The factor on q·k: 1/sqrt(query_pre_attn_scalar) where the config has one (Gemma), else
    1/sqrt(head size)."""
    return (getattr(config, "query_pre_attn_scalar", None) or head_dim(config)) ** -0.5


def unsupported(config) -> str | None:
    """Why the native backend cannot compute this config exactly, or None when it can."""
    family = by_model_type(config.model_type)
    if family is None:
        return f"the native backend does not compute {config.model_type!r} models"
    if activation(config) is None:
        return f"the activation {getattr(config, 'hidden_act', None)!r} is not computed natively"
    if getattr(config, "mlp_bias", False):
        return "MLP biases are not computed natively"
    for cap in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(config, cap, None):
            return f"{cap} is not computed natively"
    for i in range(config.num_hidden_layers):
        # these rotary types change with the sequence length; a static cos/sin table cannot
        if rope_parameters(config, i).get("rope_type", "default") in ("dynamic", "longrope"):
            return "rope types that change with the sequence length are not computed natively"
    if getattr(config, "use_bidirectional_attention", False):
        return "bidirectional attention is not computed natively"
    return None
