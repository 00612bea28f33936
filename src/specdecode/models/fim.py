"""Fill-in-the-middle: a model's FIM tokens and the prompt that asks it for the middle between a
prefix and a suffix.

FIM tokens are found by their spelling in the tokenizer's vocabulary, the spellings code models
use (Qwen2.5-Coder and StarCoder `<|fim_prefix|>` / `<fim_prefix>`, Granite `<fim-prefix>`,
DeepSeek-Coder `<｜fim▁begin｜>`, CodeLlama `<PRE>`), as llama.cpp reads them. The prompt is
llama.cpp's infill layout (prefix-suffix-middle), so an editor written for its `/infill` gets
what it got there: a repository header and one `file_sep` block per extra file when the model
has those tokens, then `prefix` + the text before the cursor on its line, the suffix, the middle
token. User text is tokenized without reading special-token spellings in it: code that contains
`<|endoftext|>` stays text.
"""

from __future__ import annotations

from dataclasses import dataclass

SPELLINGS = {
    "prefix": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
               "▁<PRE>"),
    "suffix": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
               "▁<SUF>"),
    "middle": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
               "▁<MID>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>"),
    "repo": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "file_sep": ("<|file_sep|>",),
}
# tokens that end any generation, by spelling (a model's configured EOS may be only its chat
# turn's end: Qwen2.5-Coder's is <|im_end|>, and a middle ends with <|endoftext|>)
END_SPELLINGS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
                 "<|eom_id|>", "<EOT>", "▁<EOT>")
REPOSITORY = "myproject"  # the repository name llama.cpp writes in the header
# the name of the file being edited, after the extra files, as llama.cpp writes it
CURRENT_FILE = "filename"
NO_FILE_SEP = "\n\n--- snippet ---\n\n"  # between extra files when the model has no file_sep


@dataclass(frozen=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    pad: int | None = None
    repo: int | None = None
    file_sep: int | None = None
    text_ends: frozenset[int] = frozenset()  # tokens spelled as an end of text (END_SPELLINGS)

    @classmethod
    def of(cls, tokenizer) -> "FimTokens | None":
        """The tokenizer's FIM tokens; None when it lacks prefix, suffix or middle."""
        vocab = tokenizer.get_vocab()
        found = {role: next((vocab[s] for s in spellings if s in vocab), None)
                 for role, spellings in SPELLINGS.items()}
        if None in (found["prefix"], found["suffix"], found["middle"]):
            return None
        return cls(**found, text_ends=frozenset(vocab[s] for s in END_SPELLINGS if s in vocab))

    @property
    def ends(self) -> frozenset[int]:
        """Tokens after which the middle is done: the ends of text the vocabulary spells, and
        the FIM tokens (a model that writes one has left the middle)."""
        return self.text_ends | frozenset(
            t for t in (self.pad, self.repo, self.file_sep, self.prefix, self.suffix, self.middle)
            if t is not None)


def fim_prompt(tokens: FimTokens, encode, prefix: str, suffix: str, before_cursor: str = "",
               extra: list[tuple[str, str]] = (), limit: int | None = None
               ) -> tuple[list[int], bool]:
    """Token ids asking for the middle between `prefix` + `before_cursor` and `suffix`, and
    whether they were cut to fit `limit` tokens; `extra`: (filename, text) of other files for
    context. `encode(text)` tokenizes user text (without special tokens). Cut as llama.cpp
    cuts: the suffix to its first quarter of the room at most (unless the prefix leaves more),
    the prefix to its last tokens (those nearest the cursor), the extra files to their tail."""
    head: list[int] = []
    if extra:
        if tokens.repo is not None:
            head += [tokens.repo] + encode(REPOSITORY + "\n")
        for filename, text in extra:
            head += ([tokens.file_sep] + encode(filename + "\n") if tokens.file_sep is not None
                     else encode(NO_FILE_SEP))
            head += encode(text)
        if tokens.file_sep is not None:
            head += [tokens.file_sep] + encode(CURRENT_FILE + "\n")
    before, after = encode(prefix + before_cursor), encode(suffix)
    whole = len(head) + len(before) + len(after) + 3
    if limit is not None and whole > limit:
        room = max(limit - 3, 0)
        after = after[: max(room // 4, room - len(before))]
        before = before[len(before) - min(len(before), room - len(after)):]
        head = head[len(head) - min(len(head), room - len(after) - len(before)):]
    ids = head + [tokens.prefix] + before + [tokens.suffix] + after + [tokens.middle]
    return ids, limit is not None and whole > limit


def fim_window(prompt: list[int], tokens: FimTokens, size: int) -> list[int]:
    """`prompt` cut to `size` tokens as a reader of only that many should see it: a
    fill-in-the-middle prompt (its middle token last) keeps its shape, the prefix's last tokens
    (those before the cursor) and the suffix's first (a quarter of the room at most); any other
    prompt its last `size` tokens."""
    if len(prompt) <= size:
        return prompt
    if (prompt[-1] != tokens.middle or tokens.prefix not in prompt
            or tokens.suffix not in prompt[prompt.index(tokens.prefix):]):
        return prompt[-size:]
    start = len(prompt) - 1 - prompt[::-1].index(tokens.prefix)
    cut = start + prompt[start:].index(tokens.suffix)
    before, after = prompt[start + 1 : cut], prompt[cut + 1 : -1]
    room = max(size - 3, 0)
    after = after[: min(len(after), room // 4, max(room - len(before), room // 4))]
    before = before[len(before) - min(len(before), room - len(after)):]
    return [tokens.prefix, *before, tokens.suffix, *after, tokens.middle]
