"""The native backend on GGUF files: tensors as stored, named and ordered as transformers reads
them, computed in their block formats (dtype "auto") or dequantized ("float32")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdecode.app.bench.synthetic import write_random_gguf
from specdecode.models import load_model
from specdecode.models.gguf import transformers_name, unpermute_rows
from specdecode.core.target import forward

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


def test_a_q4_k_m_mix_loads_in_its_own_formats_within_x_rounding_of_the_fp32_numbers(
        tmp_path_factory, default_model):
    path = write_random_gguf(tmp_path_factory.mktemp("gguf") / "k_m.gguf", layers=8, hidden=256,
                             heads=4, kv_heads=2, intermediate=512, qtype="Q4_K_M", context=256)
    native = load_model(str(path))
    assert native.backend == "native" and native.weights == "Q4_K+Q6_K"
    reference = logits(load_model(str(path), dtype="float32"))
    torch.testing.assert_close(logits(native), reference, atol=0.03 * reference.abs().max(),
                               rtol=0)


# Each family as llama.cpp's converter writes it (tests/gguf_layout.py); rope_theta small and
# original_max_position_embeddings short enough that llama3 scaling changes the positions used.
def _family(kind: str) -> torch.nn.Module:
    import transformers

    from gguf_layout import VOCAB

    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.2, tie_word_embeddings=False)
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if kind == "llama-linear-rope":
        rope = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}
    if kind == "llama3-rope":
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}
    if kind.startswith("llama"):
        config = transformers.LlamaConfig(rope_parameters=rope, attention_bias=kind == "llama-bias",
                                          **common)
        cls = transformers.LlamaForCausalLM
    elif kind == "mistral":
        config = transformers.MistralConfig(rope_parameters=rope, sliding_window=None, **common)
        cls = transformers.MistralForCausalLM
    else:
        config = transformers.Qwen2Config(rope_parameters=rope, use_sliding_window=False, **common)
        cls = transformers.Qwen2ForCausalLM
    torch.manual_seed(len(kind))
    model = cls(config).eval()
    if kind in ("qwen2", "llama-bias"):  # transformers starts biases at 0: make them matter
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
    return model


LONG = torch.arange(60) * 83 % 320  # past llama3's original context of 32


@pytest.mark.parametrize("kind", ["llama", "llama3-rope", "llama-linear-rope", "llama-bias",
                                  "mistral", "qwen2"])
def test_each_familys_llama_cpp_layout_loads_natively_to_the_transformers_models_logits(
        kind, tmp_path, monkeypatch):
    from gguf_layout import write_like_llama_cpp

    from specdecode.models import gguf

    hf = _family(kind)
    path = write_like_llama_cpp(hf, tmp_path / f"{kind}.gguf")
    with torch.no_grad():
        expected = hf(input_ids=LONG[None]).logits[0]
    native = load_model(str(path))
    assert native.backend == "native" and native.weights == "float32"
    got = forward(native.target, native.target.new_cache(), LONG)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    # power: the opposite q/k rule, or rope scaling left unread, moves the logits far
    monkeypatch.setattr(gguf, "PERMUTED_QK", gguf.PERMUTED_QK ^ {"llama", "qwen2"})
    if kind.endswith("-rope"):
        monkeypatch.setattr(gguf, "ROPE_FACTORS", "unread")
    wrong = load_model(str(path))
    assert (forward(wrong.target, wrong.target.new_cache(), LONG) - expected).abs().max() > 0.05
