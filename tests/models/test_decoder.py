"""`NativeDecoder` reproduces the transformers model it was built from."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from target_helpers import OnCache

from specdecode.core.target import FeatureTarget, LayerSkipTarget
from specdecode.models.decoder import NativeDecoder, supports
from specdecode.models.hf_target import HFTarget

V = 64
ATOL = 1e-4


def hf_logits(model, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=tokens[None]).logits[0]


def tokens(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed, layers", [(0, 2), (1, 3), (2, 4)])
def test_native_logits_match_transformers_in_one_forward(seed, layers, tiny_llama):
    model = tiny_llama(seed, vocab=V, layers=layers)
    ids = tokens(40, seed)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward(ids),
                               hf_logits(model, ids), atol=ATOL, rtol=0)


def test_native_logits_match_transformers_when_fed_in_chunks(tiny_llama):
    model = tiny_llama(3, vocab=V, layers=2)
    ids = tokens(40, 3)
    native = OnCache(NativeDecoder.from_hf(model))
    chunks = [native.forward(ids[a:b]) for a, b in [(0, 10), (10, 11), (11, 12), (12, 17),
                                                    (17, 18), (18, 40)]]
    torch.testing.assert_close(torch.cat(chunks), hf_logits(model, ids), atol=ATOL, rtol=0)
    assert native.length == 40


def test_native_attributes_describe_the_model(tiny_llama):
    native = NativeDecoder.from_hf(tiny_llama(0, vocab=V, layers=3, max_positions=128))
    assert native.vocab_size == V
    assert native.max_length == 128
    assert native.num_layers == 3
    assert native.new_cache().length == 0
    assert native.describe().startswith(f"{native.kernels.name} kernels")


def test_native_matches_transformers_with_tied_embeddings():
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.3, tie_word_embeddings=True)
    torch.manual_seed(4)
    model = transformers.LlamaForCausalLM(config).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    ids = tokens(20, 4)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward(ids),
                               hf_logits(model, ids), atol=ATOL, rtol=0)


def test_native_matches_transformers_with_explicit_head_dim():
    # head_dim (16) != hidden_size / num_heads (8), as in some Llama-family configs
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
        initializer_range=0.3, tie_word_embeddings=False)
    torch.manual_seed(5)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = tokens(20, 5)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward(ids),
                               hf_logits(model, ids), atol=ATOL, rtol=0)


def test_native_matches_transformers_for_qwen2_with_attention_bias(tiny_llama):
    model = tiny_llama(6, vocab=V, layers=2, arch="qwen2")
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    assert model.model.layers[0].self_attn.q_proj.bias.abs().sum() > 0
    assert supports(model.config)
    ids = tokens(30, 6)
    native = OnCache(NativeDecoder.from_hf(model))
    torch.testing.assert_close(native.forward(ids[:20]), hf_logits(model, ids[:20]), atol=ATOL,
                               rtol=0)
    torch.testing.assert_close(native.forward(ids[20:]), hf_logits(model, ids)[20:], atol=ATOL,
                               rtol=0)


def test_native_matches_transformers_for_mistral_without_sliding_window():
    config = transformers.MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        initializer_range=0.3, tie_word_embeddings=False, sliding_window=None)
    torch.manual_seed(8)
    model = transformers.MistralForCausalLM(config).eval()
    assert supports(config)
    ids = tokens(20, 8)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward(ids),
                               hf_logits(model, ids), atol=ATOL, rtol=0)


def test_native_matches_transformers_for_llama_with_attention_bias(tiny_llama):
    """LlamaConfig(attention_bias=True) puts a bias on q/k/v *and* o_proj; the native path
    reproduces both."""
    model = tiny_llama(9, vocab=V, layers=2, attention_bias=True)
    assert model.model.layers[0].self_attn.o_proj.bias is not None
    assert supports(model.config)
    ids = tokens(20, 9)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward(ids),
                               hf_logits(model, ids), atol=ATOL, rtol=0)


def test_native_matches_transformers_past_initial_cache_capacity(tiny_llama):
    """The static cache starts at 1024 positions and grows (with the RoPE tables) beyond."""
    model = tiny_llama(10, vocab=V, layers=2, max_positions=2048)
    native = OnCache(NativeDecoder.from_hf(model))
    assert native.cache.capacity == 1024
    ids = tokens(1100, 10)
    out = [native.forward(ids[a:b]) for a, b in [(0, 1000), (1000, 1030), (1030, 1031),
                                                   (1031, 1100)]]
    assert native.cache.capacity > 1024
    torch.testing.assert_close(torch.cat(out), hf_logits(model, ids), atol=ATOL, rtol=0)


def test_forward_raises_when_context_window_is_exceeded(tiny_llama):
    native = OnCache(NativeDecoder.from_hf(tiny_llama(0, vocab=V, max_positions=32)))
    native.forward(tokens(30))
    with pytest.raises(ValueError):
        native.forward(tokens(3))


# --- layer subsets (self-speculative drafting) --------------------------------------------------


def truncated(model, keep: int):
    """A copy of `model` with only its first `keep` decoder layers (same norm and head)."""
    small = copy.deepcopy(model)
    small.model.layers = torch.nn.ModuleList(list(small.model.layers)[:keep])
    small.config.num_hidden_layers = keep
    return small


def test_layer_subset_runs_fewer_layers_and_differs_from_full_forward(tiny_llama):
    model = tiny_llama(11, vocab=V, layers=4)
    ids = tokens(12, 11)
    full = OnCache(NativeDecoder.from_hf(model)).forward(ids)
    subset = OnCache(NativeDecoder.from_hf(model)).forward_layers(ids, [0, 1])
    assert (full - subset).abs().max() > 1e-2
    # running layers [0, 1] is exactly the model cut after its second layer
    torch.testing.assert_close(subset, hf_logits(truncated(model, 2), ids), atol=ATOL, rtol=0)


def test_layer_subset_with_all_layers_equals_full_forward(tiny_llama):
    model = tiny_llama(11, vocab=V, layers=4)
    ids = tokens(12, 11)
    torch.testing.assert_close(OnCache(NativeDecoder.from_hf(model)).forward_layers(ids, [0, 1, 2, 3]),
                               OnCache(NativeDecoder.from_hf(model)).forward(ids), atol=1e-6, rtol=0)


def test_layer_subset_draft_entries_are_overwritten_by_full_forward_after_rollback(tiny_llama):
    """Layer-skip drafting writes partial KV entries past the verified length; after rolling back,
    a full forward over the same positions gives the same logits as if they were never written."""
    model = tiny_llama(12, vocab=V, layers=4)
    ids = tokens(20, 12)
    native = OnCache(NativeDecoder.from_hf(model))
    native.forward(ids[:10])
    native.forward_layers(ids[10:15], [0, 2])
    native.rollback(10)
    torch.testing.assert_close(native.forward(ids[10:]), hf_logits(model, ids)[10:], atol=ATOL,
                               rtol=0)


def test_only_the_native_target_offers_layer_skipping_and_features(tiny_llama):
    model = tiny_llama(0, vocab=V)
    hf, native = HFTarget(model), NativeDecoder.from_hf(model)
    assert isinstance(native, LayerSkipTarget) and isinstance(native, FeatureTarget)
    assert not isinstance(hf, LayerSkipTarget) and not isinstance(hf, FeatureTarget)


# --- supports() ---------------------------------------------------------------------------------


def test_supports_rejects_architectures_it_cannot_reproduce():
    base = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)
    assert supports(transformers.LlamaConfig(**base))
    assert not supports(transformers.LlamaConfig(hidden_act="gelu", **base))
    assert not supports(transformers.LlamaConfig(mlp_bias=True, **base))
    assert supports(transformers.MistralConfig(sliding_window=16, **base))  # a banded mask
    assert not supports(transformers.Gemma3TextConfig(final_logit_softcapping=30.0, **base))
    assert supports(transformers.Qwen2Config(use_sliding_window=False, **base))
    assert not supports(transformers.GPT2Config())


# --- token trees --------------------------------------------------------------------------------

from specdecode.core.tree import TokenTree  # noqa: E402

#  root(pending) -> n0 -> n2 -> n4 ;  root -> n1 -> n3 ; n0 -> n5
TREE = TokenTree(torch.tensor([11, 12, 13, 14, 15, 16]), torch.tensor([-1, -1, 0, 1, 2, 0]))


def branch_rows(tree: TokenTree, node: int) -> list[int]:
    """Rows (root = 0, node i = i + 1) from the root down to `node`."""
    rows = []
    while node != -1:
        rows.append(node + 1)
        node = int(tree.parents[node])
    return [0] + rows[::-1]


def test_tree_forward_scores_every_node_as_if_its_branch_were_decoded_alone(tiny_llama):
    model = tiny_llama(4, vocab=V, layers=3)
    prefix, pending = tokens(9, 4), torch.tensor([7])
    native = OnCache(NativeDecoder.from_hf(model))
    native.prefill(prefix)
    rows = torch.cat([pending, TREE.tokens])
    tree_logits = native.logits(native.hidden(rows, TREE))  # [7, V]
    assert native.length == 9 + 7
    for node in range(len(TREE)):
        branch = rows[branch_rows(TREE, node)]
        expected = hf_logits(model, torch.cat([prefix, branch]))[-1]
        torch.testing.assert_close(tree_logits[node + 1], expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("path", [[1, 3], [0, 5], [0, 2, 4], []])
def test_compacting_an_accepted_path_leaves_the_cache_of_that_branch_alone(path, tiny_llama):
    model = tiny_llama(5, vocab=V, layers=2)
    prefix, pending = tokens(9, 5), torch.tensor([7])
    native = OnCache(NativeDecoder.from_hf(model))
    native.prefill(prefix)
    native.hidden(torch.cat([pending, TREE.tokens]), TREE)
    n = 10  # prefix + pending
    native.compact(n, [n + i for i in path])
    assert native.length == n + len(path)
    nxt = torch.tensor([3])
    accepted = TREE.tokens[path] if path else torch.empty(0, dtype=torch.long)
    expected = hf_logits(model, torch.cat([prefix, pending, accepted, nxt]))[-1]
    torch.testing.assert_close(native.forward(nxt)[-1], expected, atol=ATOL, rtol=0)


def test_transformers_backend_refuses_trees_with_a_clear_error(tiny_llama):
    target = HFTarget(tiny_llama(0, vocab=V))
    with pytest.raises(NotImplementedError, match="chains only"):
        target.hidden(target.new_cache(), torch.cat([torch.tensor([1]), TREE.tokens]), TREE)


def test_bf16_weights_keep_activations_fp32_and_logits_close_to_fp32(tiny_llama):
    model = tiny_llama(5, vocab=V, layers=2)
    ids = tokens(24, 5)
    native = OnCache(NativeDecoder.from_hf(model, torch.bfloat16))
    assert native.target.layers[0].qkv.dtype == torch.bfloat16
    assert native.cache.keys.dtype == torch.float32
    native.prefill(ids[:20])
    steps = torch.cat([native.forward(ids[i : i + 1]) for i in range(20, 24)])
    assert steps.dtype == torch.float32
    reference = hf_logits(model, ids)[20:]
    # weights rounded to bf16 (2^-9 relative): far from fp32's 1e-4, but close
    assert (steps - reference).abs().max() < 0.02 * reference.abs().max()
    assert (steps - reference).abs().max() > ATOL  # it does run in bf16


@pytest.mark.parametrize("kv", [torch.float32, torch.float16], ids=["fp32-cache", "fp16-cache"])
def test_a_tokens_logits_are_bitwise_the_same_alone_in_a_step_in_a_tree_and_in_a_prefill(
        kernel_path, kv, tiny_llama):
    """The kernels' contract seen from the model, on every path and cache dtype: plain decoding
    (one token per forward), a verification step (a chain), a tree step and a prompt prefill give
    the same bits."""
    model = tiny_llama(6, vocab=V, layers=2)
    prefix, pending = tokens(9, 6), torch.tensor([7])
    native = OnCache(NativeDecoder.from_hf(model, kernels=kernel_path, kv_dtype=kv))
    assert native.target.kernels is kernel_path

    def from_prefix(forward):
        native.reset()
        native.prefill(prefix)
        return forward()

    rows = torch.cat([pending, TREE.tokens])
    tree_logits = from_prefix(lambda: native.logits(native.hidden(rows, TREE)))
    for node in range(len(TREE)):
        branch = rows[branch_rows(TREE, node)]
        one_by_one = from_prefix(lambda: torch.cat([native.forward(t[None]) for t in branch]))
        chain = from_prefix(lambda: native.forward(branch))
        native.reset()
        prefill = native.logits(native.prefill(torch.cat([prefix, branch])))[len(prefix):]
        assert torch.equal(chain, one_by_one) and torch.equal(prefill, one_by_one)
        assert torch.equal(tree_logits[node + 1], one_by_one[-1])


@pytest.mark.parametrize("kv", [torch.float32, torch.float16], ids=["fp32-cache", "fp16-cache"])
def test_a_sequences_rows_are_bitwise_the_same_alone_and_in_a_batch_of_any_size(kernel_path, kv,
                                                                                 tiny_llama):
    """Batched scoring on every path: twelve sequences of 1..12 rows (78 rows in all, more than
    one row-invariant call of the torch path holds), some trees, each against its own cache,
    give each sequence the bits it gets alone."""
    model = tiny_llama(6, vocab=V, layers=2)
    target = NativeDecoder.from_hf(model, kernels=kernel_path, kv_dtype=kv)
    prefixes = [tokens(4 + i, 20 + i) for i in range(12)]
    steps = [(tokens(i + 1, 40 + i), TREE if i + 1 == len(TREE) + 1 else None) for i in range(12)]

    def cache_for(prefix):
        cache = target.new_cache()
        target.prefill(cache, prefix)
        return cache

    alone = [target.hidden(cache_for(p), rows, tree) for p, (rows, tree) in zip(prefixes, steps)]
    together = target.hidden_batch([(cache_for(p), rows, tree)
                                    for p, (rows, tree) in zip(prefixes, steps)])
    assert all(torch.equal(a, b) for a, b in zip(alone, together))


def test_the_cache_is_fp16_beside_block_format_matrices_and_fp32_beside_float_weights(tiny_llama):
    """A GGUF file's own formats get llama.cpp's fp16 cache; fp32 or bf16 weights an fp32 one,
    and an explicit kv_dtype wins; the logits stay close to the fp32 cache's."""
    from specdecode.quant import QuantTensor, quantize

    model = tiny_llama(6, vocab=V, layers=2)
    weights = dict(model.state_dict())
    weights["lm_head.weight"] = model.get_output_embeddings().weight
    quantized = {name: quantize(w, "Q8_0") if w.ndim == 2 and w.shape[1] % 32 == 0
                 else w for name, w in weights.items()}
    assert any(isinstance(w, QuantTensor) for w in quantized.values())
    assert NativeDecoder(model.config, quantized, None).new_cache().dtype == torch.float16
    assert NativeDecoder(model.config, quantized, None, kv_dtype=torch.float32).new_cache().dtype \
        == torch.float32
    assert NativeDecoder(model.config, weights).new_cache().dtype == torch.float32
    assert NativeDecoder(model.config, weights, torch.bfloat16).new_cache().dtype == torch.float32
    half = OnCache(NativeDecoder.from_hf(model, kv_dtype=torch.float16))
    full = OnCache(NativeDecoder.from_hf(model))
    prompt = tokens(20, 3)
    a, b = half.forward(prompt), full.forward(prompt)
    assert not torch.equal(a, b)  # it does round the cache
    torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)


# --- the decoder layers in one kernel call ------------------------------------------------------

def quantized_weights(model, formats=("Q8_0", "Q4_0", "Q4_1")) -> dict:
    """The model's matrices in GGUF block formats, q, k and v each in its own (mixed parts)."""
    from specdecode.quant import quantize

    weights = dict(model.state_dict())
    weights["lm_head.weight"] = model.get_output_embeddings().weight
    projection = {"q_proj": formats[0], "k_proj": formats[1], "v_proj": formats[2]}
    return {name: quantize(w, next((f for p, f in projection.items() if p in name), "Q8_0"))
            if w.ndim == 2 and w.shape[1] % 32 == 0 and "embed" not in name else w
            for name, w in weights.items()}


def one_call_and_loop(target: NativeDecoder, scenario) -> tuple[list, list]:
    """What `scenario(target)` returns with the layers in one kernel call, and with the Python
    loop over their operations (the same target with its stack set aside)."""
    assert target._stack is not None
    one_call = scenario(target)
    stack, target._stack = target._stack, None
    try:
        return one_call, scenario(target)
    finally:
        target._stack = stack


def every_kind_of_step(target: NativeDecoder) -> list[torch.Tensor]:
    """A prefill, a plain step, a chain, a tree, a batch of three sequences, and the caches they
    leave; then a layer subset (which writes its layers' cache rows only)."""
    first, second, third = target.new_cache(), target.new_cache(), target.new_cache()
    out = [target.prefill(first, tokens(9, 1)), target.hidden(first, tokens(1, 2)),
           target.hidden(first, tokens(5, 3)),
           target.hidden(first, torch.cat([tokens(1, 4), TREE.tokens]), TREE)]
    target.prefill(second, tokens(12, 5))
    target.prefill(third, tokens(3, 6))
    out += target.hidden_batch([(first, tokens(1, 7), None), (second, tokens(4, 8), None),
                                (third, torch.cat([tokens(1, 9), TREE.tokens]), TREE)])
    out += [c.keys[:, :, : c.length].clone() for c in (first, second, third)]
    out += [c.values[:, :, : c.length].clone() for c in (first, second, third)]
    out.append(target.forward_layers(second, tokens(2, 10), [1]))
    return out + [second.keys[1, :, : second.length].clone()]


@pytest.mark.parametrize("kind", ["fp32", "qwen2-bias", "mixed-blocks", "bf16"])
def test_the_layers_in_one_kernel_call_give_bitwise_what_the_layer_loop_gives(kernel_path, kind,
                                                                              tiny_llama):
    """On every C path whose library has `decoder_layers`: every kind of step, over fp32, bf16
    or block-format matrices (q, k, v in three formats: a matrix of parts), with biases, gives
    the same bits, in its outputs and in the caches it writes."""
    model = tiny_llama(7, vocab=V, layers=2, arch="qwen2" if kind == "qwen2-bias" else "llama")
    if kind == "mixed-blocks":
        target = NativeDecoder(model.config, quantized_weights(model), None, kernels=kernel_path)
        assert len(target.layers[0].qkv.parts()) == 3
    else:
        dtype = torch.bfloat16 if kind == "bf16" else torch.float32
        target = NativeDecoder.from_hf(model, dtype, kernels=kernel_path)
    if target._stack is None:
        pytest.skip(f"{kernel_path.name}: the layers run one operation at a time on this path")
    one_call, loop = one_call_and_loop(target, every_kind_of_step)
    assert [i for i, (a, b) in enumerate(zip(one_call, loop)) if not torch.equal(a, b)] == []


def test_a_layer_without_an_input_norm_runs_in_one_call_as_in_the_loop(kernel_path, tiny_llama):
    """An EAGLE head's layer (`head_layer`: no input norm, run on vectors) takes the same call."""
    target = NativeDecoder.from_hf(tiny_llama(8, vocab=V, layers=1), kernels=kernel_path)
    names = {n.removeprefix("model.layers.0."): w for n, w in
             tiny_llama(8, vocab=V, layers=1).state_dict().items()
             if n.startswith("model.layers.0.") and "input_layernorm" not in n}
    head = target.head_layer(names, target.lm_head)
    if head._stack is None:
        pytest.skip(f"{kernel_path.name}: the layers run one operation at a time on this path")
    x = torch.randn(4, target.hidden_size, generator=torch.Generator().manual_seed(8))

    def run(layer: NativeDecoder) -> list[torch.Tensor]:
        cache = layer.new_cache()
        return [layer.run(cache, x), layer.run(cache, x[:1]), cache.keys[:, :, :5].clone()]

    one_call, loop = one_call_and_loop(head, run)
    assert [i for i, (a, b) in enumerate(zip(one_call, loop)) if not torch.equal(a, b)] == []


@pytest.mark.parametrize("qtype", [None, "Q8_0"])
def test_a_model_cut_to_some_vocabulary_rows_scores_exactly_those_columns(qtype, tiny_llama):
    from specdecode.quant import quantize

    full = NativeDecoder.from_hf(tiny_llama(0, vocab=64))
    if qtype:
        full.lm_head = quantize(full.lm_head, qtype)
        full._lm_head = full._linear(full.lm_head)
    ids = torch.tensor([1, 5, 6, 40, 63])
    cut = full.with_vocabulary(ids)
    tokens = torch.tensor([3, 9, 27, 1])
    expected = full.logits(full.hidden(full.new_cache(), tokens))[:, ids]
    got = cut.logits(cut.hidden(cut.new_cache(), tokens))
    assert cut.vocab_size == 5 and got.shape == (4, 5)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q5_1"])
def test_a_block_format_embedding_is_read_once_with_gguf_numbers(monkeypatch, qtype):
    """A token's input vector from a quantized table: the rows gguf's reader would give, decoded
    by our own array code alone (gguf's per-call dequantize cost a drafter token ~0.3 ms)."""
    from specdecode.quant import QuantTensor, quantize

    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(7)
    model = transformers.LlamaForCausalLM(config).eval()
    weights = dict(model.state_dict())
    weights["model.embed_tokens.weight"] = quantize(weights["model.embed_tokens.weight"], qtype)
    native = NativeDecoder(model.config, weights, None)
    ids = tokens(9, 7)
    expected = weights["model.embed_tokens.weight"].take(ids.numpy()).dequantize()
    monkeypatch.setattr(QuantTensor, "dequantize", lambda *a, **k: pytest.fail("dequantized"))
    torch.testing.assert_close(native.embedding(ids), expected, atol=0, rtol=0)
