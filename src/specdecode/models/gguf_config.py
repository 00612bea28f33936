"""The transformers config of a GGUF file, from the header the loader has already parsed.

transformers reads a GGUF file's config by parsing every field with gguf's reader, the
vocabulary's strings included: 25 s for Qwen2.5's 151,936 tokens and as many merges on Zen 1, for
a config of twenty numbers. For the architectures the native path computes, the same config comes
from the parsed header in milliseconds, by transformers' own key table and its rules for these
architectures (restated here; tests/models/test_families.py checks the result against
transformers' reading for every family). Any other architecture: None, and transformers reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .gguf_check import GGUFHeader

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# GGUF architecture -> the name transformers' tables use for it
_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3moe": "qwen3_moe",
                  "gemma3": "gemma3"}


def transformers_config(header: GGUFHeader) -> PretrainedConfig | None:
    """The `PretrainedConfig` transformers' GGUF reader gives for this header, or None for an
    architecture this module does not know."""
    fields = header.fields
    architecture = fields.get("general.architecture")
    if architecture not in _ARCHITECTURES:
        return None
    from transformers import CONFIG_MAPPING
    from transformers.modeling_gguf_pytorch_utils import (GGUF_CONFIG_DEFAULTS_MAPPING,
                                                          GGUF_TO_TRANSFORMERS_MAPPING)

    # transformers' rules: a "llama" file named exactly "mistral" is Mistral; the output layer is
    # the embedding when the file has none of its own; the table's keys use its names
    renamed = ("mistral" if architecture == "llama" and fields.get("general.name") == "mistral"
               else _ARCHITECTURES[architecture])
    config: dict[str, object] = {"tie_word_embeddings": "output.weight" not in header.tensors,
                                 **GGUF_CONFIG_DEFAULTS_MAPPING.get(renamed, {})}
    table = GGUF_TO_TRANSFORMERS_MAPPING["config"]
    for key, value in fields.items():
        prefix, _, rest = key.replace(architecture, renamed).partition(".")
        name = table.get(prefix, {}).get(rest)
        if name is None or name == -1:
            continue
        value = value.tolist() if isinstance(value, np.ndarray) else value
        if isinstance(value, list) and len(value) == 1:  # one value is read as that value
            value = value[0]
        config[name] = value.replace(architecture, renamed) if isinstance(value, str) else value
    if config.get("model_type") == "gemma3":  # the file holds the text model alone
        config["model_type"] = "gemma3_text"
    if "vocab_size" not in config and "tokenizer.ggml.tokens" in fields:
        config["vocab_size"] = len(fields["tokenizer.ggml.tokens"])
    return CONFIG_MAPPING[config["model_type"]].from_dict(config)
