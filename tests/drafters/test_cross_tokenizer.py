"""Drafting with a model of another tokenizer (`drafters/cross_tokenizer.py`): the drafter's text
becomes the target's tokens at the boundaries as a tokenizer cuts them, the target's greedy
output is kept, and `draft` picks this path by itself when the vocabularies differ."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.cross_tokenizer import CrossTokenizerDraft
from specdecode.drafters.plain import NoDrafter
from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

CORPUS = ["The cat sat on the mat and purred.", "def add(a, b):\n    return a + b\n",
          "Speculative decoding drafts tokens ahead; the target verifies them."]


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory):
    """A tiny random Llama whose byte-level BPE tokenizer (300 tokens, trained here) cuts text
    unlike SmolLM2's, with ChatML's end of turn as its end of sequence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS * 20, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    path = tmp_path_factory.mktemp("bpe-drafter")
    config = LlamaConfig(vocab_size=len(fast), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=16, max_position_embeddings=512,
                         eos_token_id=fast.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return load_model(str(path))


@pytest.fixture(scope="module")
def bridge(bpe_model, default_model):
    return CrossTokenizerDraft(bpe_model, default_model.tokenizer, "bpe")


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_finished_draft_becomes_the_targets_tokens_of_its_text(bridge, bpe_model,
                                                                 default_model):
    target = default_model.tokenizer
    context = ids(target, "The cat sat on")
    drafted = ids(bpe_model.tokenizer, " the mat and purred.<|im_end|>")
    draft = bridge._in_target_tokens(context, drafted, None, 20)
    whole = ids(target, "The cat sat on the mat and purred.<|im_end|>")
    assert whole[: len(context)] == context
    assert draft.tokens.tolist() == whole[len(context):]
    assert draft.q is None and draft.forwards == len(drafted)


def test_a_draft_cut_inside_a_word_leaves_out_the_token_holding_the_cut(bridge, bpe_model,
                                                                        default_model):
    target = default_model.tokenizer
    context = ids(target, "The cat sat on")
    drafted = ids(bpe_model.tokenizer, " the mat and pur")  # not ended: "pur" may go on
    draft = bridge._in_target_tokens(context, drafted, None, 20)
    assert draft.tokens.tolist() == ids(target, "The cat sat on the mat and")[len(context):]


def test_a_draft_the_target_would_cut_across_the_context_boundary_is_not_proposed(
        bridge, bpe_model, default_model):
    target = default_model.tokenizer
    context = ids(target, "The cat sat on the m")
    whole = ids(target, "The cat sat on the mat")
    assert whole[: len(context)] != context  # "m" + "at" is one token of the target's
    drafted = ids(bpe_model.tokenizer, "at and purred.<|im_end|>")
    assert len(bridge._in_target_tokens(context, drafted, None, 20)) == 0


def test_chances_follow_the_drafter_token_each_target_token_ends_in(bridge, bpe_model,
                                                                    default_model):
    context = ids(default_model.tokenizer, "The cat sat on")
    drafted = ids(bpe_model.tokenizer, " the mat<|im_end|>")
    chances = torch.linspace(0.9, 0.5, len(drafted))
    draft = bridge._in_target_tokens(context, drafted, chances, 20)
    assert draft.chances.tolist() == sorted(draft.chances.tolist(), reverse=True)
    assert float(draft.chances[-1]) == pytest.approx(0.5)  # the end of turn: the last token


def test_a_drafter_that_is_the_target_read_through_text_is_accepted_and_keeps_greedy_output(
        default_model):
    """The bridge with the target itself as the drafter: its drafts are the target's own greedy
    tokens after a round trip through text, so nearly all are accepted."""
    prompt = default_model.encode_prompt("Name three primary colours.")
    config = GenerationConfig(40)
    plain = generate(default_model.target, NoDrafter(), prompt, config, None)
    drafter = CrossTokenizerDraft(default_model, default_model.tokenizer, "itself")
    result = generate(default_model.target, drafter, prompt, config, DraftLimit(4, 4))
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted >= 0.8 * result.stats.drafted > 0


def test_draft_with_a_model_of_another_tokenizer_keeps_greedy_output_and_samples(
        tiny_real_vocab_model, bpe_model):
    target = load_model(str(tiny_real_vocab_model))
    prompt = target.encode_prompt("The cat sat on the mat", chat=False)
    plain = SpecDecoder(target, "ar").generate(prompt, max_new_tokens=24)
    decoder = SpecDecoder(target, "draft", draft_model=str(bpe_model.source))
    assert isinstance(decoder.drafter, CrossTokenizerDraft)
    assert "another tokenizer" in decoder.drafter.describe()
    assert decoder.generate(prompt, max_new_tokens=24).token_ids == plain.token_ids
    sampled = [decoder.generate(prompt, max_new_tokens=12, temperature=0.8, seed=5).token_ids
               for _ in range(2)]
    assert sampled[0] == sampled[1] and len(sampled[0]) == 12

