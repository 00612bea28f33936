"""A GGUF file as the native backend reads it: its tensors as stored, by their transformers names.

Matrices in block formats stay in them (`quant.QuantTensor`, memory-mapped); F32, F16 and BF16
tensors become torch tensors. The config and tokenizer come from a small directory that
transformers writes once per file (`metadata_dir`, no weights in it).

llama.cpp's converter reorders the rows of the q and k projections (rotary halves interleaved);
they are put back in transformers' order here, row by row, which a block format allows: a block
never spans two rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from ..quant import QuantTensor

# GGUF tensor names -> transformers names (a layer's part after "blk.N.")
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}
LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
         "ffn_norm": "post_attention_layernorm"}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def transformers_name(name: str) -> str | None:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight' (None: not a Llama
    tensor this backend reads)."""
    if name in GLOBAL:
        return GLOBAL[name]
    match = _LAYER_NAME.match(name)
    if match and match.group(2) in LAYER:
        return f"model.layers.{match.group(1)}.{LAYER[match.group(2)]}.{match.group(3)}"
    return None


def unpermute_rows(rows: int, heads: int) -> np.ndarray:
    """The row order that undoes llama.cpp's q/k permutation for `heads` heads."""
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)


def release_pages(tensors: dict) -> None:
    """Let the OS drop the file pages these tensors' memory map has read in (Linux and macOS
    madvise): once the kernels have packed their own copy, only the embedding rows a step looks
    up are read again, so the file does not stay resident beside the packed weights."""
    import mmap

    maps = {}
    for t in tensors.values():
        array = getattr(t, "data", None)
        while isinstance(array, np.ndarray):
            if getattr(array, "_mmap", None) is not None:
                maps[id(array._mmap)] = array._mmap
                break
            array = array.base
    for memory in maps.values():
        if hasattr(memory, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            memory.madvise(mmap.MADV_DONTNEED)


def trim_heap() -> None:
    """Give the C heap's free memory back to the OS (glibc keeps what packing freed: the
    decoded copies of every matrix)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def read_tensors(path: Path, config) -> dict[str, torch.Tensor | QuantTensor]:
    """The file's tensors by transformers name: block formats as `QuantTensor`s over the file's
    memory map, the rest as torch tensors."""
    from gguf import GGMLQuantizationType, GGUFReader

    plain = {GGMLQuantizationType.F32: torch.float32, GGMLQuantizationType.BF16: torch.bfloat16}
    found: dict[str, torch.Tensor | QuantTensor] = {}
    for tensor in GGUFReader(str(path)).tensors:
        name = transformers_name(tensor.name)
        if name is None:
            continue
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest dim first
        if tensor.tensor_type in plain:
            raw = np.asarray(tensor.data)
            value = torch.from_numpy(raw.view(np.int16) if raw.dtype == np.uint16 else raw.copy())
            found[name] = value.view(plain[tensor.tensor_type]).reshape(shape).clone()
            continue
        data = np.asarray(tensor.data)
        if tensor.tensor_type == GGMLQuantizationType.F16:
            data = data.view(np.uint8).reshape(shape[0], -1)
        value = QuantTensor(tensor.tensor_type.name, data, shape[-1])
        if ".self_attn.q_proj." in name or ".self_attn.k_proj." in name:
            heads = (config.num_attention_heads if ".q_proj." in name
                     else config.num_key_value_heads)
            value = value.take(unpermute_rows(value.out_features, heads))
        found[name] = value
    return found
