"""A GGUF file as the native backend reads it: its tensors as stored, by their transformers names.

Matrices in block formats stay in them (`quant.QuantTensor`, memory-mapped); F32, F16 and BF16
tensors become torch tensors. The config and tokenizer come from a small directory that
transformers writes once per file (`metadata_dir`, no weights in it).

Names and rules come from the file's family (`families`). llama.cpp's converter reorders the
rows of the q and k projections of the Llama family (rotary halves interleaved, for its "normal"
rope on adjacent pairs); they are put back in transformers' order here, row by row, which a block
format allows: a block never spans two rows. Families whose rope llama.cpp computes on halves
("neox": Qwen2 among them) are stored as transformers has them. Where a family's norms multiply
by (shift + w) the converter stores the sum; the shift comes off here, as transformers' own GGUF
reader takes it off, so the weights mean what the transformers checkpoint's mean.

Rope scaling that the converter writes outside the config transformers reads from the file (the
Llama-3.1 `rope_freqs` tensor; a linear factor in the metadata) comes back as one tensor of
per-frequency divisors, `ROPE_FACTORS` (`rope.frequencies`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from ..quant import QuantTensor
from ..rope import head_dim
from .families import GLOBAL, Family, by_architecture
from .gguf_check import GGUFHeader, read_header

ROPE_FACTORS = "rope_factors"  # [head_dim / 2] float32: divides each rotary frequency
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")


def transformers_name(name: str, family: Family) -> str | None:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj.weight' (None: not a tensor
    this backend reads of the family)."""
    if name in GLOBAL:
        return GLOBAL[name]
    match = _LAYER_NAME.match(name)
    layer = family.gguf_layer_names()
    if match and match.group(2) in layer:
        return f"model.layers.{match.group(1)}.{layer[match.group(2)]}.{match.group(3)}"
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


def read_tensors(path: Path, config, header: GGUFHeader | None = None,
                 ) -> dict[str, torch.Tensor | QuantTensor]:
    """The file's tensors by transformers name: block formats as `QuantTensor`s over the file's
    memory map, the rest as torch tensors; q/k rows in transformers' order; the rope scaling the
    config does not carry under `ROPE_FACTORS`. `header`: the file's, already read (else it is
    read here). A file this cannot read exactly: ValueError."""
    from gguf import GGMLQuantizationType

    # our own reader: gguf's builds an object per vocabulary string
    header = header or read_header(path)
    fields = header.fields
    architecture = _field(fields, "general.architecture")
    family = by_architecture(architecture)
    if family is None:
        raise ValueError(f"the native backend does not compute {architecture!r} models")
    plain = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.BF16: np.int16}
    file = np.memmap(path, np.uint8, mode="r")
    found: dict[str, torch.Tensor | QuantTensor] = {}
    for tensor in header.tensors.values():
        name = ROPE_FACTORS if tensor.name == "rope_freqs.weight" \
            else transformers_name(tensor.name, family)
        if name is None:
            continue
        kind = GGMLQuantizationType(tensor.type)
        start = header.data_start + tensor.offset
        data = file[start:start + tensor.nbytes]
        shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest dim first
        if kind in plain:
            value = torch.from_numpy(np.array(data).view(plain[kind])).reshape(shape)
            value = value.view(torch.bfloat16) if kind == GGMLQuantizationType.BF16 else value
        else:  # rows of bytes: an expert tensor's [E, out, in] as E out rows one after another
            value = QuantTensor(kind.name, data.reshape(int(np.prod(shape[:-1])), -1), shape[-1])
        if family.norm_shift and name.endswith("norm.weight"):
            value = (value.dequantize() if isinstance(value, QuantTensor) else value) \
                - family.norm_shift
        if family.permuted_qk and (".self_attn.q_proj." in name or ".self_attn.k_proj." in name):
            heads = (config.num_attention_heads if ".q_proj." in name
                     else config.num_key_value_heads)
            order = unpermute_rows(shape[0], heads)
            value = value.take(order) if isinstance(value, QuantTensor) else value[order]
        found[name] = value
    scaling = _field(fields, f"{architecture}.rope.scaling.type", "none")
    if scaling == "linear":
        factor = float(_field(fields, f"{architecture}.rope.scaling.factor"))
        found[ROPE_FACTORS] = (torch.full((head_dim(config) // 2,), factor)
                               * found.get(ROPE_FACTORS, 1.0))
    elif scaling != "none":
        raise ValueError(f"rope scaling {scaling!r} is not supported on the native backend")
    return found


def _field(fields: dict, key: str, default=None):
    """A metadata field's value (`default` when absent; ValueError when required and absent)."""
    value = fields.get(key, default)
    if value is None:
        raise ValueError(f"metadata field {key!r} is missing")
    return value
