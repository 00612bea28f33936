"""Export a trained EAGLE head for vLLM: `export_head(head_dir, out_dir, verifier, format=...)`.

Two layouts of the same weights (bf16 `model.safetensors` + `config.json`); the embedding, the LM
head and the rotary embedding are never stored, both readers take them from the verifier (target),
as our head does.

`vllm` (default): the original EAGLE-1 checkpoint layout, which vLLM's `"method": "eagle"` loads;
`speculators`: the speculators EAGLE-1 layout. How each reader was checked against vLLM's and
speculators' sources, name by name, is in docs/serving-with-vllm.md.

Rotary parameters are written both as transformers 5 `rope_parameters` and as the older
`rope_theta` / `rope_scaling`, so either transformers major reads them. A draft vocabulary
(`draft_vocab`) has no place in either layout: the head drafts over the full vocabulary there
(a warning says so).

Not run against vLLM here (no GPU, no vLLM); tests/app/test_export.py loads both layouts into
modules rebuilt from vLLM's and speculators' sources.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from ..errors import InvalidParameterError, ModelLoadError, SpecDecodeError

log = logging.getLogger("specdecode")

FORMATS = ("vllm", "speculators")
# the last speculators release whose EagleSpeculator (EAGLE-1) layout `speculators` follows
SPECULATORS_LAYOUT_VERSION = "0.6.0.2"
DEFAULT_VERIFIER = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_SPECULATIVE_TOKENS = 5

# our EagleHead's layer weights, as named under `layers.0.` in its state dict
LAYER_WEIGHTS = (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm", "mlp.gate_proj.weight",
    "mlp.up_proj.weight", "mlp.down_proj.weight",
)


def export_head(head_dir: str | Path, out_dir: str | Path,
                verifier_name_or_path: str = DEFAULT_VERIFIER, *, format: str = "vllm",
                verifier_config: dict | None = None,
                speculative_tokens: int | None = None) -> Path:
    """Write the EAGLE head in `head_dir` (from `save_head`) to `out_dir` in `format` (module
    docstring). `verifier_name_or_path` is the target as vLLM will load it; its config.json
    (`verifier_config`) is read when not given: from a local model directory or alias, else from
    the head's recorded target, else from the hub. `speculative_tokens` (default 5) is recorded
    by the speculators layout only; with `vllm` it is given at serving time instead."""
    from safetensors.torch import save_file

    head_dir, out_dir = Path(head_dir), Path(out_dir)
    if format not in FORMATS:
        raise InvalidParameterError(f"unknown export format {format!r}: "
                                    f"give {' or '.join(FORMATS)}")
    if format == "vllm" and speculative_tokens is not None:
        raise InvalidParameterError("the vllm format records no draft length: give it when "
                                    "serving (num_speculative_tokens in --speculative-config)")
    if speculative_tokens is None:
        speculative_tokens = DEFAULT_SPECULATIVE_TOKENS
    if speculative_tokens < 1:
        raise InvalidParameterError(f"speculative tokens must be >= 1, got {speculative_tokens}")
    if out_dir.resolve() == head_dir.resolve():
        raise InvalidParameterError("the output directory must differ from the head's: the export "
                                    "would overwrite the head's files")
    head = _load_eagle(head_dir)
    if verifier_config is None:
        verifier_config = _verifier_config(verifier_name_or_path, head.cfg.get("target"))
    if verifier_config.get("hidden_size") != head.cfg["hidden_size"]:
        raise ModelLoadError(
            f"the head at {head_dir} has hidden size {head.cfg['hidden_size']} but the verifier "
            f"{verifier_name_or_path} has {verifier_config.get('hidden_size')}: not its head")
    if head.draft_vocab.numel():
        log.warning("the head drafts over %d tokens; the %s layout has no draft vocabulary, so it "
                    "will draft over all %s", head.draft_vocab.numel(), format,
                    verifier_config.get("vocab_size"))

    layer = llama_layer_config(head.cfg, verifier_config)
    if format == "vllm":
        tensors = eagle_tensors(head, fc="fc.weight", layer_prefix="layers.0.")
        config = {"architectures": ["LlamaForCausalLM"], **layer, "torch_dtype": "bfloat16"}
    else:
        tensors = eagle_tensors(head, fc="fusion_fc.weight", layer_prefix="transformer.")
        config = speculators_config(layer, verifier_config, verifier_name_or_path,
                                    speculative_tokens)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out_dir


def eagle_tensors(head, *, fc: str, layer_prefix: str) -> dict[str, torch.Tensor]:
    """The head's weights (bf16) under the names of a layout: the fusion layer as `fc`, each layer
    weight as `layer_prefix` + its Llama name. Refuses a head with any other weight."""
    state = head.state_dict()
    known = {"fc.weight", *("layers.0." + name for name in LAYER_WEIGHTS)}
    if set(state) != known:
        odd = sorted(set(state) ^ known)
        raise ModelLoadError(f"the EAGLE head has weights the export does not know how to map: "
                             f"{', '.join(odd)}")
    tensors = {fc: state["fc.weight"]}
    for name in LAYER_WEIGHTS:  # the norm is a bare Parameter in our head, `.weight` in Llama's
        llama_name = name + ".weight" if name == "post_attention_layernorm" else name
        tensors[layer_prefix + llama_name] = state["layers.0." + name]
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in tensors.items()}


def llama_layer_config(head_cfg: dict, verifier_config: dict) -> dict:
    """A one-layer Llama config: the head's layer sizes plus what only the verifier knows (vocab
    size, rotary parameters, context length, special tokens). The whole config.json of the vllm
    layout; the `transformer_layer_config` of the speculators one."""
    v = verifier_config
    rope = dict(v.get("rope_parameters") or v.get("rope_scaling") or {})
    rope.setdefault("rope_theta", v.get("rope_theta", 10000.0))
    rope_type = rope.pop("type", None) or rope.get("rope_type") or "default"
    rope["rope_type"] = rope_type
    return {
        "model_type": "llama",
        "hidden_size": head_cfg["hidden_size"],
        "intermediate_size": head_cfg["intermediate_size"],
        "num_hidden_layers": 1,  # EAGLE: one decoder layer
        "num_attention_heads": head_cfg["num_attention_heads"],
        "num_key_value_heads": head_cfg["num_key_value_heads"],
        "head_dim": head_cfg["head_dim"],
        "rms_norm_eps": head_cfg["rms_norm_eps"],
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "vocab_size": v["vocab_size"],
        "max_position_embeddings": v.get("max_position_embeddings", 2048),
        "initializer_range": v.get("initializer_range", 0.02),
        "bos_token_id": v.get("bos_token_id"),
        "eos_token_id": v.get("eos_token_id"),
        "pad_token_id": v.get("pad_token_id"),
        "tie_word_embeddings": False,  # embedding and LM head come from the verifier
        "use_cache": True,
        "rope_parameters": rope,
        "rope_theta": rope["rope_theta"],
        "rope_scaling": None if rope_type == "default" else
        {k: val for k, val in rope.items() if k != "rope_theta"},
    }


def speculators_config(layer: dict, verifier_config: dict, verifier_name_or_path: str,
                       speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS) -> dict:
    """The config.json of the speculators EAGLE-1 layout (the fields `EagleSpeculatorConfig`
    writes; `layer` from `llama_layer_config`, as speculators' EagleConverter builds it)."""
    import transformers

    verifier = {"name_or_path": verifier_name_or_path,
                "architectures": verifier_config.get("architectures") or ["LlamaForCausalLM"]}
    return {
        "architectures": ["EagleSpeculator", "LlamaDecoderLayer"],
        "speculators_model_type": "eagle",
        "speculators_version": SPECULATORS_LAYOUT_VERSION,
        "transformer_layer_architecture": "LlamaDecoderLayer",
        "transformer_layer_config": layer,
        "layernorms": False,
        "fusion_bias": False,
        "speculators_config": {
            "algorithm": "eagle",
            "proposal_methods": [{"proposal_type": "greedy",
                                  "speculative_tokens": speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": verifier,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": transformers.__version__,
    }


def _load_eagle(head_dir: Path):
    from ..models.heads import load_head

    try:
        return load_head(head_dir, "eagle")
    except SpecDecodeError:
        raise
    except Exception as exc:  # a damaged or outdated head file is the user's input, not our bug
        raise ModelLoadError(f"cannot read the EAGLE head at {head_dir}: {_one_line(exc)}") from exc


def _verifier_config(verifier: str, trained_on: str | None) -> dict:
    """The verifier's config.json: from `verifier` when it names a local model (directory, .gguf
    or alias), else from the model the head was trained on when that is local, else from the hub
    (a one-line ModelLoadError when offline)."""
    from ..models.loader import EMBEDDED, PARTED, resolve_source

    def is_local(name: str | None) -> bool:
        return bool(name) and (name in EMBEDDED or name in PARTED
                               or Path(name).expanduser().exists())

    name = verifier if is_local(verifier) or not is_local(trained_on) else trained_on
    source, _ = resolve_source(name)
    if isinstance(source, Path):
        return json.loads((source / "config.json").read_text())
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source).to_dict()
    except OSError as exc:
        raise ModelLoadError(
            f"cannot read the config of verifier {name!r}: {_one_line(exc)}") from exc


def _one_line(exc: Exception, limit: int = 300) -> str:
    """The exception's message on one line (state-dict errors put the key names on later lines)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."
