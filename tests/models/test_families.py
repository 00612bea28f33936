"""Reference tests of every natively computed family (`models/families/`): a tiny random
transformers model of the family computes the same logits natively, built from its weights and
from a GGUF file written as llama.cpp's converter writes it (tests/gguf_layout.py).

The sizes make each family's rules matter: head sizes apart from hidden / heads (Qwen3, Gemma),
sliding windows shorter than the input (Mistral, Gemma's local layers), Gemma's global layer and
its two rotary bases, norms with random weights (Gemma's 1 + w, the q/k head norms), biases."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specdecode.core.target import forward
from specdecode.core.tree import TokenTree
from specdecode.models import families, load_model
from specdecode.models.decoder import NativeDecoder

LONG = torch.arange(60) * 83 % 320  # past llama3's original context of 32, past every window
KINDS = ["llama", "llama3-rope", "llama-linear-rope", "llama-bias", "mistral", "mistral-window",
         "qwen2", "qwen3", "gemma3", "qwen3_moe"]


def tiny(kind: str) -> torch.nn.Module:
    """A random transformers model of the family `kind` names, with the tokenizer's vocabulary
    of tests/gguf_layout.py; rope_theta small and original_max_position_embeddings short enough
    that llama3 scaling changes the positions used."""
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
    elif kind.startswith("mistral"):
        config = transformers.MistralConfig(rope_parameters=rope, **common,
                                            sliding_window=8 if kind == "mistral-window" else None)
        cls = transformers.MistralForCausalLM
    elif kind == "qwen2":
        config = transformers.Qwen2Config(rope_parameters=rope, use_sliding_window=False, **common)
        cls = transformers.Qwen2ForCausalLM
    elif kind == "qwen3":
        config = transformers.Qwen3Config(rope_parameters=rope, use_sliding_window=False,
                                          head_dim=32, **common)
        cls = transformers.Qwen3ForCausalLM
    elif kind == "qwen3_moe":  # 8 experts of 32, 2 a row, renormalised (as llama.cpp computes)
        config = transformers.Qwen3MoeConfig(rope_parameters=rope, use_sliding_window=False,
                                             head_dim=32, num_experts=8, num_experts_per_tok=2,
                                             moe_intermediate_size=32, norm_topk_prob=True,
                                             **common)
        cls = transformers.Qwen3MoeForCausalLM
    else:  # what a Gemma-3 GGUF file does not say is left at transformers' defaults, which its
        # GGUF reader assumes: every sixth layer global, local base 10000, query_pre_attn_scalar
        config = transformers.Gemma3TextConfig(
            **{**common, "num_hidden_layers": 6, "tie_word_embeddings": True}, head_dim=32,
            sliding_window=8, rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 100.0}})
        cls = transformers.Gemma3ForCausalLM
    torch.manual_seed(len(kind))
    model = cls(config).eval()
    with torch.no_grad():  # transformers starts biases at 0 and norms at 1 (Gemma's at 0)
        for name, p in model.named_parameters():
            if name.endswith("bias") or name.endswith("norm.weight"):
                p.normal_(0, 0.5)
    return model


def reference_logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=LONG[None]).logits[0]


@pytest.mark.parametrize("kind", KINDS)
def test_each_family_built_from_transformers_weights_computes_its_logits(kind):
    model = tiny(kind)
    native = NativeDecoder.from_hf(model)
    assert native.family.name == kind.split("-")[0].replace("llama3", "llama")
    assert native._stack is None or not native.layers[0].experts
    got = forward(native, native.new_cache(), LONG)
    torch.testing.assert_close(got, reference_logits(model), atol=1e-4, rtol=1e-4)


# llama.cpp's converter writes Mistral as "llama" without its window (llama.cpp attends to the
# whole context), so a windowed Mistral's GGUF file is another model
@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind != "mistral-window"])
def test_each_familys_llama_cpp_layout_loads_natively_to_the_transformers_models_logits(
        kind, tmp_path, monkeypatch, default_model):
    from gguf_layout import write_like_llama_cpp

    from specdecode.models import gguf

    hf = tiny(kind)
    path = write_like_llama_cpp(hf, tmp_path / f"{kind}.gguf")
    expected = reference_logits(hf)
    native = load_model(str(path))
    assert native.backend == "native" and native.weights == "float32"
    got = forward(native.target, native.target.new_cache(), LONG)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    # power: the opposite q/k rule, no norm shift, or rope scaling left unread move the logits
    family = native.target.family

    def wrong(architecture: str):
        return dataclasses.replace(family, permuted_qk=not family.permuted_qk,
                                   norm_shift=1.0 - family.norm_shift)

    monkeypatch.setattr(gguf, "by_architecture", wrong)
    if kind.endswith("-rope"):
        monkeypatch.setattr(gguf, "ROPE_FACTORS", "unread")
    wrong_model = load_model(str(path))
    assert (forward(wrong_model.target, wrong_model.target.new_cache(), LONG)
            - expected).abs().max() > 0.05


def test_every_family_module_declares_a_family_found_without_a_list():
    names = {f.name for f in families.families()}
    assert {"llama", "mistral", "qwen2", "qwen3", "gemma3"} <= names
    assert families.by_architecture("gemma3").norm_shift == 1.0
    assert families.by_model_type("qwen3").norms["q_norm"] == "self_attn.q_norm"


def test_gemma3_layers_take_their_window_and_rotary_table_from_the_layer_types():
    native = NativeDecoder.from_hf(tiny("gemma3"))
    assert [layer.window for layer in native.layers] == [8, 8, 8, 8, 8, 0]
    assert len({layer.rope for layer in native.layers}) == 2
    assert native.shape.activation == "gelu_tanh" and native.shape.scale == 256 ** -0.5


TREE = TokenTree(torch.tensor([11, 12, 13, 14, 15, 16]), torch.tensor([-1, -1, 0, 1, 2, 0]))


def _path(node: int) -> list[int]:
    """The tree's nodes from a root child down to `node`."""
    path = [node]
    while int(TREE.parents[path[0]]) >= 0:
        path.insert(0, int(TREE.parents[path[0]]))
    return path


@pytest.mark.parametrize("kind", ["mistral-window", "qwen3", "gemma3", "qwen3_moe"])
def test_each_familys_tokens_get_the_same_bits_alone_in_a_chain_a_tree_a_prefill_and_a_batch(
        kernel_path, kind):
    """Lossless speculation on every family and path: plain steps, a verification chain, a tree
    and a prefill, past the sliding windows (20 cached tokens, windows of 8), and a batch of two
    sequences, give the same bits."""
    target = NativeDecoder.from_hf(tiny(kind), kernels=kernel_path, kv_dtype=torch.float16)
    prefix, pending = LONG[:20], LONG[20:21]

    def after_prefix():
        cache = target.new_cache()
        target.prefill(cache, prefix)
        return cache

    cache = after_prefix()
    tree = target.logits(target.hidden(cache, torch.cat([pending, TREE.tokens]), TREE))
    for node in range(len(TREE)):
        branch = torch.cat([pending, TREE.tokens[_path(node)]])
        cache = after_prefix()
        one_by_one = torch.cat([target.logits(target.hidden(cache, t[None])) for t in branch])
        chain = target.logits(target.hidden(after_prefix(), branch))
        prefill = target.logits(target.prefill(target.new_cache(), torch.cat([prefix, branch])))
        assert torch.equal(chain, one_by_one) and torch.equal(prefill[len(prefix):], one_by_one)
        assert torch.equal(tree[node + 1], one_by_one[-1])
    first, second = after_prefix(), target.new_cache()
    target.prefill(second, LONG[30:45])
    alone = [target.hidden(after_prefix(), LONG[50:53]), target.hidden(_copy(second), LONG[:2])]
    together = target.hidden_batch([(first, LONG[50:53], None), (second, LONG[:2], None)])
    assert all(torch.equal(a, b) for a, b in zip(alone, together))


def _copy(cache):
    import copy

    return copy.deepcopy(cache)


@pytest.mark.parametrize("kind", ["mistral-window", "qwen3", "gemma3"])
def test_each_familys_layers_in_one_kernel_call_give_the_bits_of_the_layer_loop(kernel_path,
                                                                               kind):
    target = NativeDecoder.from_hf(tiny(kind), kernels=kernel_path)
    if target._stack is None:
        pytest.skip(f"{kernel_path.name}: the layers run one operation at a time on this path")

    def steps() -> list[torch.Tensor]:
        cache = target.new_cache()
        return [target.prefill(cache, LONG[:20]), target.hidden(cache, LONG[20:21]),
                target.hidden(cache, LONG[21:26]),
                target.hidden(cache, torch.cat([LONG[26:27], TREE.tokens]), TREE),
                cache.keys[:, :, : cache.length].clone()]

    one_call = steps()
    target._stack = None
    assert all(torch.equal(a, b) for a, b in zip(one_call, steps()))


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3", "gemma3", "qwen3_moe"])
def test_each_familys_gguf_config_and_tokenizer_are_transformers_reading_without_its_slow_reader(
        kind, tmp_path, gguf_readings):
    """The config (before a family's own fixes) and the tokenizer files are those of transformers'
    own reading of the file (AutoConfig, AutoTokenizer), without gguf's reader of every field (25 s
    for Qwen's vocabulary), also where transformers names no tokenizer class (llama)."""
    import transformers
    from gguf_layout import write_like_llama_cpp

    from specdecode.models.gguf_config import transformers_config
    from specdecode.models.loader import _gguf_metadata

    path = write_like_llama_cpp(tiny(kind), tmp_path / f"{kind}.gguf")
    metadata, header = _gguf_metadata(path)
    assert gguf_readings == []
    config = transformers.AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)
    ours = transformers_config(header).to_dict()
    assert ours == {**config.to_dict(), "_name_or_path": ""}  # before the family's own fixes
    own = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    own.save_pretrained(tmp_path / "own")
    assert type(transformers.AutoTokenizer.from_pretrained(metadata)) is type(own)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (metadata / name).read_bytes() == (tmp_path / "own" / name).read_bytes(), name
