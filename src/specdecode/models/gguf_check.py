"""A GGUF file checked before anything else reads it: a GGUF file is untrusted input (people
download them from anywhere), and its counts, sizes and offsets decide how much memory is read
and where, by gguf's reader, by transformers and finally by the C kernels.

`check_gguf` reads the header itself, every length against the bytes left, and then holds every
tensor to its format's block size, to the file's end and alignment, and, for the families the
native path computes, to the shapes the file's own metadata implies. A file that fails is a
one-line `ModelLoadError` naming the field or tensor; nothing else has read it yet.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from .families import NORM_ROLES, by_architecture

MAGIC, VERSIONS = b"GGUF", (2, 3)
MAX_DIMS, MAX_ELEMENTS = 4, 1 << 40  # llama.cpp's GGML_MAX_DIMS; far beyond any real tensor
MAX_NESTING = 2  # an array of arrays (llama.cpp writes none deeper)
# value type -> struct format of a scalar (8: string, 9: array are read by hand)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_PLAIN_TYPES = {0: np.float32, 1: np.float16}  # checked for NaN and inf (BF16: 30, by bits)


class _Malformed(Exception):
    """Raised inside the reader; `check_gguf` turns it into one ModelLoadError line."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # as GGUF lists it: the fastest-varying dimension first
    type: int
    offset: int  # from the start of the data section
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, object]
    tensors: dict[str, TensorInfo]
    data_start: int


class _Reader:
    """Little-endian reads from a buffer, each checked against the bytes left."""

    def __init__(self, buffer, size: int) -> None:
        self.buffer, self.size, self.at = buffer, size, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.size - self.at:
            raise _Malformed(f"{what} needs {n} bytes at byte {self.at}, past the file's end "
                             f"({self.size})")
        start, self.at = self.at, self.at + n
        return bytes(self.buffer[start:self.at])

    def scalar(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.scalar("<Q", f"{what}'s length"), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed(f"{what} is not UTF-8") from None

    def value(self, kind: int, what: str, depth: int = 0):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], what)
        if kind == 8:
            return self.string(what)
        if kind != 9:
            raise _Malformed(f"{what} has unknown value type {kind}")
        if depth >= MAX_NESTING:
            raise _Malformed(f"{what} nests arrays deeper than {MAX_NESTING}")
        item, count = self.scalar("<I", f"{what}'s item type"), self.scalar("<Q", f"{what}'s count")
        if item not in _SCALARS and item not in (8, 9):
            raise _Malformed(f"{what} has unknown item type {item}")
        smallest = struct.calcsize(_SCALARS[item]) if item in _SCALARS else 8  # a length first
        if count * smallest > self.size - self.at:
            raise _Malformed(f"{what} claims {count} items, more than the file holds")
        if item in _SCALARS:  # one read for the lot (a vocabulary's scores, token types)
            dtype = np.dtype(_SCALARS[item])
            return np.frombuffer(self.take(count * dtype.itemsize, what), dtype).tolist()
        return [self.value(item, f"{what}[{i}]", depth + 1) for i in range(count)]


def _type_sizes() -> dict[int, tuple[int, int]]:
    """GGML tensor type -> (values per block, bytes per block), as gguf knows them."""
    from gguf import GGML_QUANT_SIZES

    return {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()}


def read_header(path: Path) -> GGUFHeader:
    """The file's metadata and tensor table, every length, count, type, shape and offset checked
    against the file (ModelLoadError naming what is wrong)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size < 24:
                raise _Malformed(f"{size} bytes is too short for a GGUF header")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
                return _parse(_Reader(buffer, size))
    except _Malformed as exc:
        raise ModelLoadError(f"malformed GGUF file {path.name}: {exc}") from None
    except OSError as exc:
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from None


def _parse(r: _Reader) -> GGUFHeader:
    if r.take(4, "the magic") != MAGIC:
        raise _Malformed("it does not start with 'GGUF'")
    version = r.scalar("<I", "the version")
    if version not in VERSIONS:
        raise _Malformed(f"version {version} (read: {', '.join(map(str, VERSIONS))})")
    tensor_count, field_count = r.scalar("<Q", "the tensor count"), r.scalar("<Q", "the field count")
    # every field takes at least 12 bytes (key length, value type) and every tensor 20
    if field_count * 12 + tensor_count * 20 > r.size - r.at:
        raise _Malformed(f"{field_count} fields and {tensor_count} tensors cannot fit in the file")
    fields: dict[str, object] = {}
    for i in range(field_count):
        key = r.string(f"field {i}'s key")
        if key in fields:
            raise _Malformed(f"field {key!r} appears twice")
        fields[key] = r.value(r.scalar("<I", f"field {key!r}'s type"), f"field {key!r}")
    alignment = fields.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1) \
            or alignment > 1 << 20:
        raise _Malformed(f"field 'general.alignment' is {alignment!r} (a power of two)")
    sizes = _type_sizes()
    tensors: dict[str, TensorInfo] = {}
    for i in range(tensor_count):
        name = r.string(f"tensor {i}'s name")
        what = f"tensor {name!r}"
        if name in tensors:
            raise _Malformed(f"{what} appears twice")
        dims = r.scalar("<I", f"{what}'s dimension count")
        if not 1 <= dims <= MAX_DIMS:
            raise _Malformed(f"{what} has {dims} dimensions (1 to {MAX_DIMS})")
        shape = tuple(r.scalar("<Q", f"{what}'s shape") for _ in range(dims))
        kind, offset = r.scalar("<I", f"{what}'s type"), r.scalar("<Q", f"{what}'s offset")
        if kind not in sizes:
            raise _Malformed(f"{what} has unknown type {kind}")
        if min(shape) < 1 or math.prod(shape) > MAX_ELEMENTS:
            raise _Malformed(f"{what} has shape {list(shape)}")
        block, block_bytes = sizes[kind]
        if shape[0] % block:
            raise _Malformed(f"{what}'s rows of {shape[0]} are not whole blocks of {block}")
        if offset % alignment:
            raise _Malformed(f"{what}'s offset {offset} is not a multiple of {alignment}")
        tensors[name] = TensorInfo(name, shape, kind, offset,
                                   math.prod(shape) // block * block_bytes)
    data_start = -(-r.at // alignment) * alignment
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values())
    for (_, end, name), (start, _, other) in zip(spans, spans[1:]):
        if start < end:
            raise _Malformed(f"tensors {name!r} and {other!r} overlap")
    for start, end, name in spans[-1:]:
        if data_start + end > r.size:
            raise _Malformed(f"tensor {name!r} ends at byte {data_start + end}, past the file's "
                             f"end ({r.size})")
    return GGUFHeader(version, fields, tensors, data_start)


def _count(fields: dict, key: str, default=None, limit: int = 1 << 24) -> int:
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise _Malformed(f"field {key!r} is {value!r} (a count from 1 to {limit})")
    return value


def _family_shapes(fields: dict) -> tuple[dict, dict] | None:
    """The tensors a file of a natively computed family must hold and those it may hold, by
    name, with their GGUF shapes from its own metadata; None for other families."""
    arch = fields.get("general.architecture")
    family = by_architecture(arch) if isinstance(arch, str) else None
    if family is None:
        return None
    tokens = fields.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise _Malformed("field 'tokenizer.ggml.tokens' is missing or empty")
    hidden = _count(fields, f"{arch}.embedding_length")
    layers = _count(fields, f"{arch}.block_count", limit=4096)
    heads = _count(fields, f"{arch}.attention.head_count", limit=4096)
    kv_heads = _count(fields, f"{arch}.attention.head_count_kv", heads, limit=heads)
    inner = _count(fields, f"{arch}.feed_forward_length")
    if heads % kv_heads:
        raise _Malformed(f"{heads} attention heads are not a multiple of {kv_heads} KV heads")
    head_dim = _count(fields, f"{arch}.attention.key_length", hidden // heads or None)
    q, kv, vocab = heads * head_dim, kv_heads * head_dim, len(tokens)
    shapes = {"token_embd.weight": (hidden, vocab), "output_norm.weight": (hidden,)}
    per_layer = {"attn_q": (hidden, q), "attn_k": (hidden, kv), "attn_v": (hidden, kv),
                 "attn_output": (q, hidden), "ffn_gate": (hidden, inner),
                 "ffn_up": (hidden, inner), "ffn_down": (inner, hidden)}
    per_layer.update({NORM_ROLES[role]: (head_dim,) if role in ("q_norm", "k_norm") else (hidden,)
                      for role in family.norms})
    if family.experts:  # llama.cpp's mixtures: every layer's MLP is experts
        experts = _count(fields, f"{arch}.expert_count", limit=4096)
        width = _count(fields, f"{arch}.expert_feed_forward_length", inner)
        for part in ("ffn_gate", "ffn_up", "ffn_down"):
            del per_layer[part]
        per_layer.update({"ffn_gate_inp": (hidden, experts),
                          "ffn_gate_exps": (hidden, width, experts),
                          "ffn_up_exps": (hidden, width, experts),
                          "ffn_down_exps": (width, hidden, experts)})
    for i in range(layers):
        shapes.update({f"blk.{i}.{part}.weight": shape for part, shape in per_layer.items()})
    optional = {"output.weight": (hidden, vocab), "rope_freqs.weight": (head_dim // 2,)}
    return shapes, optional


def check_gguf(path: Path) -> GGUFHeader:
    """`read_header`, then for a natively computed family every tensor it must hold, in the
    shape its metadata implies, and those it may hold (the output layer, rope factors, biases)
    in theirs; and its plain float tensors finite."""
    header = read_header(path)
    try:
        family = _family_shapes(header.fields)
        if family is not None:
            shapes, optional = family
            for name, t in header.tensors.items():
                bias = name.endswith(".bias") and name.replace(".bias", ".weight") in shapes
                if bias and t.shape != shapes[name.replace(".bias", ".weight")][-1:]:
                    raise _Malformed(f"tensor {name!r} has shape {list(t.shape)}")
            for name, shape in {**shapes, **optional}.items():
                t = header.tensors.get(name)
                if t is None and name in optional:
                    continue
                if t is None:
                    raise _Malformed(f"tensor {name!r} is missing")
                if t.shape != shape:
                    raise _Malformed(f"tensor {name!r} has shape {list(t.shape)}, its metadata "
                                     f"implies {list(shape)}")
        _check_finite(path, header)
    except _Malformed as exc:
        raise ModelLoadError(f"malformed GGUF file {path.name}: {exc}") from None
    return header


def _check_finite(path: Path, header: GGUFHeader) -> None:
    """F32 and F16 tensors (norms, biases; in small files every weight) hold no NaN or inf:
    a NaN weight would make every token's logits NaN, silently."""
    plain = [t for t in header.tensors.values() if t.type in _PLAIN_TYPES]
    if not plain:
        return
    with open(path, "rb") as f:
        for t in plain:
            dtype = np.dtype(_PLAIN_TYPES[t.type])
            f.seek(header.data_start + t.offset)
            values = np.fromfile(f, dtype, t.nbytes // dtype.itemsize)
            if not np.isfinite(values).all():
                raise _Malformed(f"tensor {t.name!r} holds NaN or infinite values")
