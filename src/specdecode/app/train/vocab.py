"""The draft vocabulary: the token ids a head may propose (FR-Spec, EAGLE-3).

A head's largest cost on a 49k vocabulary is its LM-head product; restricted to the N most frequent
tokens it shrinks by V / N, and a draft token outside the set would rarely have been accepted anyway.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch


def select_draft_vocab(answers: Iterable[Sequence[int]], prompts: Iterable[Sequence[int]],
                       size: int, vocab_size: int) -> list[int] | None:
    """The `size` most frequent ids, sorted ascending; None (the full vocabulary) when size is 0
    or covers it.

    Ranked by their count in the answers (what a head drafts), ties and ids never seen in an
    answer by their count in the prompts (answers often copy from them), then by id."""
    if size <= 0 or size >= vocab_size:
        return None
    answer_counts = _counts(answers, vocab_size)
    prompt_counts = _counts(prompts, vocab_size)
    # one integer key: answer count first, prompt count second, the lower id wins the last ties
    key = (answer_counts * (prompt_counts.max() + 1) + prompt_counts) * vocab_size \
        + (vocab_size - 1 - torch.arange(vocab_size))
    return sorted(key.topk(size).indices.tolist())


def coverage(draft_vocab: Sequence[int] | None, answers: Iterable[Sequence[int]]) -> float:
    """Fraction of answer tokens inside the draft vocabulary (1.0 for the full vocabulary)."""
    tokens = torch.tensor([t for a in answers for t in a], dtype=torch.long)
    if draft_vocab is None or tokens.numel() == 0:
        return 1.0
    return torch.isin(tokens, torch.tensor(draft_vocab, dtype=torch.long)).float().mean().item()


def _counts(sequences: Iterable[Sequence[int]], vocab_size: int) -> torch.Tensor:
    tokens = torch.tensor([t for s in sequences for t in s], dtype=torch.long)
    return torch.bincount(tokens, minlength=vocab_size)
