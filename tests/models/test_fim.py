"""Fill-in-the-middle prompts: FIM tokens found by their spellings, llama.cpp's infill layout,
user text kept as text, cutting to a limit as llama.cpp cuts."""

from __future__ import annotations

import pytest

from specdecode.models.fim import FimTokens, fim_prompt, fim_window


class Vocab:
    """A tokenizer's get_vocab()."""

    def __init__(self, *tokens: str) -> None:
        self.vocab = {t: 1000 + i for i, t in enumerate(tokens)}

    def get_vocab(self) -> dict[str, int]:
        return self.vocab


QWEN = Vocab("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
             "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|im_end|>")


def encode(text: str) -> list[int]:
    """One id per character: lengths are easy to read."""
    return [ord(c) for c in text]


def decode(ids: list[int], tokens: FimTokens) -> str:
    names = {tokens.prefix: "<P>", tokens.suffix: "<S>", tokens.middle: "<M>",
             tokens.repo: "<R>", tokens.file_sep: "<F>"}
    return "".join(names.get(i, chr(i)) for i in ids)


@pytest.mark.parametrize("vocab, roles", [
    (QWEN, (1001, 1003, 1002, 1004, 1005, 1006)),
    (Vocab("<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<reponame>"),
     (1000, 1002, 1001, 1003, 1004, None)),
    (Vocab("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"), (1000, 1001, 1002, None, None, None)),
    (Vocab("▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"), (1000, 1001, 1002, None, None, None)),
], ids=["qwen2.5-coder", "starcoder", "deepseek-coder", "codellama"])
def test_fim_tokens_are_found_by_their_spellings(vocab, roles):
    t = FimTokens.of(vocab)
    assert (t.prefix, t.suffix, t.middle, t.pad, t.repo, t.file_sep) == roles


def test_a_vocabulary_without_prefix_suffix_and_middle_has_no_fim():
    assert FimTokens.of(Vocab("<|fim_prefix|>", "<|fim_suffix|>", "<|endoftext|>")) is None


def test_a_middle_ends_at_an_end_of_text_or_any_fim_token():
    t = FimTokens.of(QWEN)
    assert t.ends == {1000, 1007, 1001, 1002, 1003, 1004, 1005, 1006}


def test_the_prompt_is_llama_cpps_infill_layout():
    t = FimTokens.of(QWEN)
    ids, cut = fim_prompt(t, encode, "def f():\n", "\n    return 0\n", "    x = ",
                          [("a.py", "A\n"), ("b.py", "B\n")])
    assert not cut
    assert decode(ids, t) == ("<R>myproject\n<F>a.py\nA\n<F>b.py\nB\n<F>filename\n"
                              "<P>def f():\n    x = <S>\n    return 0\n<M>")
    plain, _ = fim_prompt(t, encode, "ab", "cd")
    assert decode(plain, t) == "<P>ab<S>cd<M>"


def test_without_file_sep_extra_files_are_separated_by_text():
    t = FimTokens.of(Vocab("<PRE>", "<SUF>", "<MID>"))
    ids, _ = fim_prompt(t, encode, "p", "s", extra=[("a.py", "A")])
    assert decode(ids, t) == "\n\n--- snippet ---\n\nA<P>p<S>s<M>"


def test_cutting_keeps_the_prefix_nearest_the_cursor_and_the_suffix_after_it():
    t = FimTokens.of(QWEN)
    ids, cut = fim_prompt(t, encode, "P" * 50 + "cursor", "after" + "S" * 50,
                          extra=[("a.py", "E" * 30)], limit=43)
    assert cut and len(ids) == 43
    assert decode(ids, t) == "<P>" + ("P" * 50 + "cursor")[-30:] + "<S>after" + "S" * 5 + "<M>"
    ids, cut = fim_prompt(t, encode, "pp", "S" * 50, extra=[("a.py", "E" * 30)], limit=43)
    assert cut and decode(ids, t) == "<P>pp<S>" + "S" * 38 + "<M>"
    ids, cut = fim_prompt(t, encode, "pp", "ss", extra=[("a.py", "0123456789" * 3)], limit=20)
    assert cut and decode(ids, t) == "789<F>filename\n<P>pp<S>ss<M>"  # the tail of 13


def test_a_window_keeps_a_fim_prompt_around_its_cursor_and_cuts_others_at_the_end():
    t = FimTokens.of(QWEN)
    ids, _ = fim_prompt(t, encode, "P" * 40 + "cursor", "after" + "S" * 40,
                        extra=[("a.py", "E" * 30)])
    window = fim_window(ids, t, 23)
    assert decode(window, t) == "<P>" + "P" * 9 + "cursor" + "<S>after<M>"  # 20: 15 + 5
    assert len(window) == 23
    assert fim_window(ids, t, len(ids)) == ids
    plain = list(range(50))
    assert fim_window(plain, t, 10) == plain[-10:]
