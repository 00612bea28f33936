"""Fixtures for tests that need a real tokenizer: the embedded default model (converted once and
cached under SPECDECODE_CACHE / ~/.cache/specdecode) and tiny random models saved as directories."""

import pytest
import torch


@pytest.fixture(scope="session")
def default_model():
    from specdecode.models import load_model

    return load_model("smollm2-135m")


def _save_tiny(path, vocab_size, tokenizer, max_positions=128, hidden=16):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=max_positions, initializer_range=0.5,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_real_vocab_model(tmp_path_factory, default_model):
    """A tiny random Llama with the default model's tokenizer and a 128-token context."""
    return _save_tiny(tmp_path_factory.mktemp("tiny-real-vocab"), default_model.target.vocab_size,
                      default_model.tokenizer)


@pytest.fixture(scope="session")
def tiny_other_vocab_model(tmp_path_factory):
    """A tiny random Llama whose tokenizer maps ids differently (a 32-word vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "[EOS]"] + [f"w{i}" for i in range(30)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
    return _save_tiny(tmp_path_factory.mktemp("tiny-other-vocab"), len(words), fast)


FIM_TOKENS = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
              "<|repo_name|>", "<|file_sep|>"]


@pytest.fixture(scope="session")
def tiny_fim_model(tmp_path_factory, default_model):
    """A tiny random Llama with the default model's tokenizer plus Qwen2.5-Coder's
    fill-in-the-middle tokens (ids after the default vocabulary) and a 512-token context."""
    import copy

    tokenizer = copy.deepcopy(default_model.tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": FIM_TOKENS})
    return _save_tiny(tmp_path_factory.mktemp("tiny-fim"), len(tokenizer), tokenizer,
                      max_positions=512)


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """Qwen2.5-Coder's tokenizer (the 0.5B's files) and vocabulary size, without its weights."""
    from specdecode.models.loader import _load_tokenizer_and_config, _resolve

    source, _, _ = _resolve("qwen2.5-coder-0.5b")
    tokenizer, config = _load_tokenizer_and_config(source, "qwen2.5-coder-0.5b")
    return tokenizer, config.vocab_size


def accepts(grammar, tokenizer, text: str) -> bool:
    """Whether `grammar` takes `text` (as the tokenizer writes it) and then the end."""
    matcher = grammar.matcher()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return all(matcher.accept(t) for t in ids)
