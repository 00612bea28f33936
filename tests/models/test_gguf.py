"""The native backend on GGUF files: tensors as stored, named and ordered as transformers reads
them, computed in their block formats (dtype "auto") or dequantized ("float32")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdecode.app.bench.synthetic import write_random_gguf
from specdecode.models import load_model
from specdecode.models.families import by_architecture
from specdecode.models.gguf import transformers_name, unpermute_rows
from specdecode.core.target import forward

TOKENS = torch.tensor([5, 17, 300, 42, 9, 1000, 7, 7, 4096])


def test_gguf_names_map_to_transformers_names_by_family():
    llama, gemma = by_architecture("llama"), by_architecture("gemma3")
    assert transformers_name("token_embd.weight", llama) == "model.embed_tokens.weight"
    assert transformers_name("blk.3.attn_q.weight", llama) == \
        "model.layers.3.self_attn.q_proj.weight"
    assert transformers_name("blk.12.ffn_norm.weight", llama) == \
        "model.layers.12.post_attention_layernorm.weight"
    assert transformers_name("blk.12.ffn_norm.weight", gemma) == \
        "model.layers.12.pre_feedforward_layernorm.weight"
    assert transformers_name("blk.1.post_attention_norm.weight", gemma) == \
        "model.layers.1.post_attention_layernorm.weight"
    assert transformers_name("blk.1.post_attention_norm.weight", llama) is None
    assert transformers_name("rope_freqs.weight", llama) is None


def test_unpermuting_undoes_llama_cpps_q_and_k_permutation():
    heads, rows = 4, 32
    w = np.arange(rows)
    permuted = w.reshape(heads, 2, rows // heads // 2).swapaxes(1, 2).reshape(-1)  # llama.cpp's
    assert np.array_equal(permuted[unpermute_rows(rows, heads)], w)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, default_model):
    return write_random_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", layers=2, hidden=64,
                             heads=4, kv_heads=2, intermediate=128, context=256)


def logits(model) -> torch.Tensor:
    target = model.target
    return forward(target, target.new_cache(), TOKENS)


def test_dtype_float32_dequantizes_to_exactly_transformers_reading_of_the_file(tiny_gguf):
    dequantized = load_model(str(tiny_gguf), dtype="float32")
    assert dequantized.backend == "native" and dequantized.weights == "float32"
    hf = load_model(str(tiny_gguf), backend="transformers")  # transformers' own GGUF reader
    torch.testing.assert_close(logits(dequantized), logits(hf), atol=1e-4, rtol=0)


def test_gguf_matrices_stay_in_their_formats_within_x_rounding_of_the_fp32_numbers(tiny_gguf):
    native = load_model(str(tiny_gguf))
    assert native.backend == "native" and native.weights == "Q4_1+Q8_0"
    reference = logits(load_model(str(tiny_gguf), dtype="float32"))
    quantized = logits(native)
    # the only difference: x rounded to 8 bits per block of 32 in every product (qlinear.c)
    assert not torch.equal(quantized, reference) or native.kernels.startswith("torch")
    torch.testing.assert_close(quantized, reference, atol=0.03 * reference.abs().max(), rtol=0)


@pytest.mark.parametrize("qtype, weights", [("Q4_K_M", "Q4_K+Q6_K"), ("Q3_K", "Q3_K+Q8_0")])
def test_a_k_format_file_loads_in_its_own_formats_within_x_rounding_of_the_fp32_numbers(
        tmp_path_factory, default_model, qtype, weights):
    path = write_random_gguf(tmp_path_factory.mktemp("gguf") / "k.gguf", layers=8, hidden=256,
                             heads=4, kv_heads=2, intermediate=512, qtype=qtype, context=256)
    native = load_model(str(path))
    assert native.backend == "native" and native.weights == weights
    reference = logits(load_model(str(path), dtype="float32"))
    torch.testing.assert_close(logits(native), reference, atol=0.03 * reference.abs().max(),
                               rtol=0)
