"""Random-weight Llama-family GGUF files: a model of any size in the formats a real file uses,
without downloading one. The tests write tiny ones; `bench --synthetic` measures load time,
resident memory and step time on one of a real model's size.

The tokenizer is the embedded default model's (its GGUF metadata is copied), so the file loads
like any other GGUF model.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ...models.loader import EMBEDDED, gguf_file
from ...quant import random_blocks

# parameters of a ~1B Llama-family model (Llama-3.2-1B's shape with SmolLM2's vocabulary)
ONE_B = dict(layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192)


@functools.lru_cache(maxsize=1)
def _tokenizer_fields() -> tuple[tuple[str, object, int, int | None], ...]:
    """The embedded default model's tokenizer metadata: (key, value, GGUF value type, array
    element type) each. Read once a process: gguf's reader makes an object per vocabulary string
    (seconds), and the tests write a dozen files."""
    from gguf import GGUFReader, GGUFValueType

    source = GGUFReader(str(gguf_file(next(iter(EMBEDDED)))))
    return tuple((name, field.contents(), field.types[0],
                  field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None)
                 for name, field in source.fields.items() if name.startswith("tokenizer."))


def q4_k_m(part: str, layer: int, layers: int) -> str:
    """The format llama.cpp's Q4_K_M mix gives a matrix: Q6_K for the (tied) embedding, and for
    attn_v and ffn_down in the first and last eighth of the layers and every third between;
    Q4_K for the rest."""
    more_bits = (layer < layers // 8 or layer >= 7 * layers // 8
                 or (layer - layers // 8) % 3 == 2)
    return "Q6_K" if part == "token_embd" or (part in ("attn_v", "ffn_down") and more_bits) \
        else "Q4_K"


def write_random_gguf(path: Path, *, layers: int, hidden: int, heads: int, kv_heads: int,
                      intermediate: int, qtype: str = "Q4_1", embed_qtype: str = "Q8_0",
                      context: int = 2048, seed: int = 0) -> Path:
    """A GGUF file of random weights: matrices in `qtype`, the (tied) embedding in
    `embed_qtype`, norms F32 (quantized bytes spool to a temporary file past 256 MB).
    qtype "Q4_K_M" is llama.cpp's mix of Q4_K and Q6_K (`q4_k_m`; embed_qtype is then ignored)."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    writer = GGUFWriter(str(path), "llama", use_temp_file=True)
    tokenizer = _tokenizer_fields()
    for name, value, kind, sub in tokenizer:  # the tokenizer and its special tokens
        writer.add_key_value(name, value, kind, sub)
    vocab = next(len(value) for name, value, _, _ in tokenizer if name == "tokenizer.ggml.tokens")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(intermediate)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(hidden // heads)
    rng = np.random.default_rng(seed)
    scale = hidden ** -0.5

    def matrix(name: str, rows: int, columns: int, kind: str) -> None:
        qt = GGMLQuantizationType[kind]
        if kind.endswith("_K"):  # gguf's Python side does not quantize these: random blocks
            data = random_blocks(kind, rows, columns, rng, scale)
        else:
            data = quantize(rng.standard_normal((rows, columns), dtype=np.float32) * scale, qt)
        writer.add_tensor(name, data, raw_dtype=qt)  # shape: bytes per row

    def kind(part: str, layer: int = 0) -> str:
        if qtype == "Q4_K_M":
            return q4_k_m(part, layer, layers)
        return embed_qtype if part == "token_embd" else qtype

    def norm(name: str) -> None:
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))

    matrix("token_embd.weight", vocab, hidden, kind("token_embd"))
    norm("output_norm.weight")
    head_dim = hidden // heads
    shapes = {"attn_q": (hidden, hidden), "attn_k": (kv_heads * head_dim, hidden),
              "attn_v": (kv_heads * head_dim, hidden), "attn_output": (hidden, hidden),
              "ffn_gate": (intermediate, hidden), "ffn_up": (intermediate, hidden),
              "ffn_down": (hidden, intermediate)}
    for i in range(layers):
        norm(f"blk.{i}.attn_norm.weight")
        norm(f"blk.{i}.ffn_norm.weight")
        for part, (rows, columns) in shapes.items():
            matrix(f"blk.{i}.{part}.weight", rows, columns, kind(part, i))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
