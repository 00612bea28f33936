"""The token ids a draft model may propose to its target.

Two models share a vocabulary when every id the drafter can propose decodes to the same token in
both. Their lists may still differ in length: checkpoints pad their embedding rows (Qwen2.5's
151,936 or 152,064 rows around 151,665 tokens), and a tokenizer may know a few added tokens the
other lacks. Those ids are simply never proposed; an id that names different tokens in the two
is a mismatch: the tokenizers differ, and `draft` drafts as text instead (`cross_tokenizer`).

A drafter's output layer can also be cut to the most frequent tokens (as FR-Spec does): on a
0.5B drafter with 151,936 rows it is over a third of the bytes a draft token reads. The target
still verifies every token, so output is unchanged; a token outside the set is never drafted,
which costs acceptance where the target would have chosen it. Frequency here is the tokenizer's
own order: byte-level BPE (and SentencePiece) number their tokens in merge order, which follows
frequency in the tokenizer's training corpus; special and added tokens (end of turn, end of text)
are always kept.

Merge order misses tokens a chat model writes often (the code fence ```, a LaTeX `\\[`) and the rare
words a summary or a translation copies from its prompt. So a sequence's own context adds its
tokens back (`draft_model`): a token outside the cut that the prompt or the answer so far holds
gets its output row for the rest of that sequence (docs/benchmarks/qwen-pair).
"""

from __future__ import annotations

import torch

from ..errors import VocabularyMismatchError


def shared_ids(target_tokenizer, draft_tokenizer, draft_rows: int, target_rows: int
               ) -> torch.Tensor:
    """Every id [V'] (sorted) both tokenizers decode alike below both models' row counts;
    VocabularyMismatchError when an id names different tokens in the two."""
    target_vocab = {i: t for t, i in target_tokenizer.get_vocab().items()}
    draft_vocab = {i: t for t, i in draft_tokenizer.get_vocab().items()}
    differ = [i for i, t in draft_vocab.items() if i in target_vocab and target_vocab[i] != t]
    if differ:
        raise VocabularyMismatchError(
            f"the draft model's vocabulary differs from the target's ({len(differ)} ids name "
            f"other tokens, e.g. id {differ[0]}: {draft_vocab[differ[0]]!r} vs "
            f"{target_vocab[differ[0]]!r})")
    rows = min(draft_rows, target_rows)
    return torch.tensor(sorted(i for i in draft_vocab if i in target_vocab and i < rows),
                        dtype=torch.long)


def cut_vocabulary(ids: torch.Tensor, keep: int, draft_tokenizer, draft_rows: int
                   ) -> torch.Tensor | None:
    """Of `ids` ([V'] sorted, `shared_ids`), when `keep` > 0, the `keep` most frequent (the
    lowest: merge order) plus the special tokens among them; None where that is every one of the
    drafter's rows, in order (nothing to cut)."""
    if 0 < keep < len(ids):
        special = set(getattr(draft_tokenizer, "added_tokens_decoder", {}))
        special |= set(getattr(draft_tokenizer, "all_special_ids", []))
        kept = set(ids[:keep].tolist()) | (special & set(ids.tolist()))
        ids = torch.tensor(sorted(kept), dtype=torch.long)
    every_row = len(ids) == draft_rows and bool((ids == torch.arange(draft_rows)).all())
    return None if every_row else ids
