"""The native backend on GGUF files: tensors as stored, named and ordered as transformers reads
them, computed in their block formats (dtype "auto") or dequantized ("float32")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdecode.app.bench.synthetic import write_random_gguf
from specdecode.models import load_model
from specdecode.models.gguf import transformers_name, unpermute_rows
from specdecode.models.target import forward

TOKENS = torch.tensor([5, 17, 300, 42, 9, 1000, 7, 7, 4096])


def test_gguf_names_map_to_transformers_names():
    assert transformers_name("token_embd.weight") == "model.embed_tokens.weight"
    assert transformers_name("blk.3.attn_q.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert transformers_name("blk.12.ffn_norm.weight") == \
        "model.layers.12.post_attention_layernorm.weight"
    assert transformers_name("rope_freqs.weight") is None


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


def test_gguf_matrices_stay_in_their_formats_and_equal_transformers_reading_of_the_file(tiny_gguf):
    native = load_model(str(tiny_gguf))
    assert native.backend == "native" and native.weights == "Q4_1+Q8_0"
    hf = load_model(str(tiny_gguf), backend="transformers")  # transformers' own GGUF reader
    torch.testing.assert_close(logits(native), logits(hf), atol=1e-4, rtol=0)


def test_dtype_float32_dequantizes_a_gguf_file_to_the_same_numbers(tiny_gguf):
    dequantized = load_model(str(tiny_gguf), dtype="float32")
    assert dequantized.weights == "float32"
    torch.testing.assert_close(logits(dequantized), logits(load_model(str(tiny_gguf))),
                               atol=1e-4, rtol=0)
