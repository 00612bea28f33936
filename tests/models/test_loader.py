"""`load_model` on a local directory: the native target is built straight from the safetensors
files, and the transformers model only when something asks for it."""

from __future__ import annotations

import json

import pytest
import torch

from specdecode.errors import ModelLoadError
from specdecode.models import load_model
from specdecode.core.target import forward


def test_native_target_from_files_matches_the_transformers_model(tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    assert model.backend == "native"
    assert model._hf_model is None  # nothing built the transformers model yet
    ids = torch.tensor([5, 17, 300, 42, 9, 1000, 7])
    native = forward(model.target, model.target.new_cache(), ids)
    with torch.no_grad():
        reference = model.hf_model(input_ids=ids[None]).logits[0]
    torch.testing.assert_close(native, reference, atol=1e-4, rtol=0)
    assert model._hf_model is not None


def test_transformers_backend_builds_the_model_at_load(tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model), backend="transformers")
    assert model.backend == "transformers" and model._hf_model is not None
    assert model.kernels == "transformers on cpu"


@pytest.mark.parametrize("device, backend, message", [
    ("cuda", "native", "the native backend runs on the CPU"),
    ("tpu9", "auto", "unknown device"),
])
def test_a_device_the_backend_cannot_use_fails_in_one_line(tiny_real_vocab_model, device,
                                                           backend, message):
    with pytest.raises(ModelLoadError, match=message):
        load_model(str(tiny_real_vocab_model), backend=backend, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_asking_for_cuda_without_a_gpu_fails_in_one_line(tiny_real_vocab_model):
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        load_model(str(tiny_real_vocab_model), device="cuda")


def test_eos_ids_include_the_generation_config(tmp_path, tiny_real_vocab_model):
    directory = tmp_path / "model"
    directory.mkdir()
    for f in tiny_real_vocab_model.iterdir():
        (directory / f.name).write_bytes(f.read_bytes())
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 4]}))
    model = load_model(str(directory))
    assert {3, 4} <= model.eos_token_ids
    assert model.tokenizer.eos_token_id in model.eos_token_ids


@pytest.mark.real_model
def test_a_qwen_gguf_ends_where_its_generation_config_ends_at_end_of_text_too():
    """Qwen2.5's generation_config.json ends on <|im_end|> and <|endoftext|>; its GGUF file names
    the first only: without the second, plain decoding wrote on past the model's end."""
    from specdecode.core.penalties import Penalties
    from specdecode.pipeline import SpecDecoder

    model = load_model("qwen2.5-coder-0.5b")
    end_of_text = model.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert {model.tokenizer.convert_tokens_to_ids("<|im_end|>"), end_of_text} <= model.eos_token_ids
    forced = Penalties(bias=((end_of_text, 100.0),))  # the model's first token: end of text
    result = SpecDecoder(model, "ar").generate("Hi", max_new_tokens=4, penalties=forced)
    assert (result.finish_reason, result.token_ids) == ("stop", [])


@pytest.fixture(scope="module")
def tiny_wide_model(tmp_path_factory, default_model):
    """A tiny random Llama whose rows split into blocks of 32 (hidden size 64)."""
    from model_fixtures import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny-wide"), default_model.target.vocab_size,
                      default_model.tokenizer, hidden=64)


@pytest.mark.parametrize("dtype,qtype", [("q8_0", "Q8_0"), ("q4_0", "Q4_0")])
def test_dtype_q8_0_or_q4_0_quantizes_a_safetensors_model_on_load(tiny_wide_model, dtype, qtype):
    from specdecode.models.decoder import NativeDecoder
    from specdecode.models.loader import _quantized, _read_safetensors

    model = load_model(str(tiny_wide_model), dtype=dtype)
    assert model.weights == qtype
    ids = torch.tensor([5, 17, 300, 42, 9, 1000, 7])
    quantized = forward(model.target, model.target.new_cache(), ids)
    # the same quantized weights dequantized, computed in fp32: only x's 8-bit rounding differs
    weights = _quantized(_read_safetensors(tiny_wide_model), qtype)
    reference = NativeDecoder(model.target.config, weights, torch.float32)
    fp32 = forward(reference, reference.new_cache(), ids)
    assert reference.weights == "float32" and not torch.equal(quantized, fp32)
    torch.testing.assert_close(quantized, fp32, atol=0.03 * fp32.abs().max(), rtol=0)


def test_quantizing_for_the_transformers_backend_fails_in_one_line(tiny_real_vocab_model):
    with pytest.raises(ModelLoadError, match="native backend only"):
        load_model(str(tiny_real_vocab_model), dtype="q8_0", backend="transformers")


def test_quantizing_on_load_keeps_an_untied_block_format_input_embedding_as_stored():
    from specdecode.models.loader import _quantized
    from specdecode.quant import quantize

    embed, head = quantize(torch.randn(40, 64), "Q5_0"), torch.randn(40, 64)
    untied = _quantized({"model.embed_tokens.weight": embed, "lm_head.weight": head}, "Q4_0")
    assert untied["model.embed_tokens.weight"] is embed  # read a row a token: no cheaper in Q4_0
    assert untied["lm_head.weight"].qtype == "Q4_0"
    tied = _quantized({"model.embed_tokens.weight": embed}, "Q4_0")  # it is the output layer too
    assert tied["model.embed_tokens.weight"].qtype == "Q4_0"
    floats = _quantized({"model.embed_tokens.weight": head, "lm_head.weight": head}, "Q4_0")
    assert floats["model.embed_tokens.weight"].qtype == "Q4_0"  # 4 bytes a number: converted


def _tiny_llama_gguf(path):
    """A tiny random Llama in llama.cpp's layout, with a 320-token vocabulary (transformers reads
    the metadata of a real vocabulary for seconds)."""
    import transformers

    from gguf_layout import VOCAB, write_like_llama_cpp

    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    return write_like_llama_cpp(transformers.LlamaForCausalLM(config).eval(), path)


def test_loading_a_gguf_file_parses_its_header_once(tmp_path, monkeypatch):
    from specdecode.models import gguf, gguf_check

    path = _tiny_llama_gguf(tmp_path / "tiny.gguf")
    parsed = []
    original = gguf_check.read_header

    def counted(p):
        parsed.append(p)
        return original(p)

    monkeypatch.setattr(gguf_check, "read_header", counted)
    monkeypatch.setattr(gguf, "read_header", counted)
    model = load_model(str(path))
    assert model.backend == "native" and parsed == [path.resolve()]


def test_converting_a_gguf_file_for_transformers_reads_the_file_once(tmp_path, request):
    """The tokenizer and config come from the metadata directory: only the weights are read."""
    from gguf_layout import VOCAB
    from specdecode.models.loader import _converted_gguf, resolve_source

    path = _tiny_llama_gguf(tmp_path / "tiny.gguf")
    metadata, _ = resolve_source(str(path))
    readings = request.getfixturevalue("gguf_readings")  # from here on
    assert _converted_gguf(path.resolve()) == metadata
    assert len(readings) == 1 and (metadata / "model.safetensors").is_file()
    model = load_model(str(path), backend="transformers")
    assert model.backend == "transformers" and len(model.tokenizer) == VOCAB


def test_a_new_cache_entry_removes_those_of_files_replaced_or_gone(tmp_path, monkeypatch):
    """A GGUF file's cache entry is keyed by its path, size and time: once the file is replaced
    or deleted no load can use it again, and a transformers conversion is as large as the
    model. The next entry written removes such entries; one whose file is unchanged stays."""
    import os
    import shutil

    from specdecode.models.loader import _gguf_metadata

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path / "cache"))
    path = _tiny_llama_gguf(tmp_path / "tiny.gguf").resolve()
    copy = tmp_path / "copy.gguf"
    shutil.copy(path, copy)
    old, _ = _gguf_metadata(path)
    kept, _ = _gguf_metadata(copy.resolve())

    def replaced(p) -> None:  # the same path, another file time
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))

    replaced(path)
    new, _ = _gguf_metadata(path)
    assert new != old and new.is_dir() and not old.exists()
    assert kept.is_dir()  # its file is unchanged
    copy.unlink()
    replaced(path)
    newest, _ = _gguf_metadata(path)
    assert newest.is_dir() and not new.exists() and not kept.exists()
    assert sorted(p.name for p in newest.parent.iterdir()) == [newest.name]


def test_entries_from_before_entries_recorded_their_file_are_adopted_when_used_else_removed(
        tmp_path, monkeypatch):
    """Entries written before they recorded their file (commit 8fbc3f2) cannot be told from a
    stale one by their record: one a load finds is its file's (the fingerprint in its name says
    so) and records it from then on; the others are removed by the next entry written."""
    import shutil

    from specdecode.models.loader import SOURCE, _gguf_cache, _gguf_metadata

    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path / "cache"))
    used = _tiny_llama_gguf(tmp_path / "used.gguf").resolve()
    entry, _ = _gguf_metadata(used)
    (entry / SOURCE).unlink()  # as an older version wrote it
    config = (entry / "config.json").stat().st_mtime_ns
    orphan = entry.parent / "removed-0123456789ab"  # a file since deleted, no record
    shutil.copytree(entry, orphan)

    again, _ = _gguf_metadata(used)
    assert again == entry and (entry / SOURCE).read_text() == str(used)
    assert (entry / "config.json").stat().st_mtime_ns == config  # used, not written again
    assert orphan.is_dir()  # nothing written yet

    other = _tiny_llama_gguf(tmp_path / "other.gguf").resolve()
    written, _ = _gguf_metadata(other)
    assert not orphan.exists() and entry.is_dir() and written.is_dir()
    assert written == _gguf_cache(other)
