"""Which ids a draft model may propose: those both tokenizers decode alike, below both models' row
counts, optionally cut to the most frequent plus the special tokens."""

from __future__ import annotations

import pytest
import torch

from specdecode.errors import VocabularyMismatchError
from specdecode.drafters.vocabulary import cut_vocabulary, shared_ids


def proposable_ids(target_tokenizer, draft_tokenizer, draft_rows: int, target_rows: int,
                   keep: int = 0) -> torch.Tensor | None:
    """What `draft` proposes: the shared ids, cut to `keep` (None: every drafter row)."""
    return cut_vocabulary(shared_ids(target_tokenizer, draft_tokenizer, draft_rows, target_rows),
                          keep, draft_tokenizer, draft_rows)


class Tokenizer:
    def __init__(self, tokens: list[str], special: tuple[int, ...] = ()) -> None:
        self.tokens, self.all_special_ids = tokens, list(special)
        self.added_tokens_decoder = {i: tokens[i] for i in special}

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


WORDS = [f"w{i}" for i in range(9)] + ["<eos>"]


def test_the_same_tokenizer_and_rows_propose_every_row():
    assert proposable_ids(Tokenizer(WORDS), Tokenizer(WORDS), 10, 10) is None


def test_padded_rows_beyond_the_tokenizer_are_never_proposed():
    ids = proposable_ids(Tokenizer(WORDS), Tokenizer(WORDS), draft_rows=12, target_rows=10)
    assert ids.tolist() == list(range(10))
    ids = proposable_ids(Tokenizer(WORDS), Tokenizer(WORDS[:8]), draft_rows=8, target_rows=10)
    assert ids is None  # the drafter's 8 rows are all shared


def test_an_id_naming_another_token_is_a_mismatch():
    other = WORDS[:3] + ["x3"] + WORDS[4:]
    with pytest.raises(VocabularyMismatchError, match="id 3: 'x3' vs 'w3'"):
        proposable_ids(Tokenizer(WORDS), Tokenizer(other), 10, 10)


def test_a_cut_keeps_the_lowest_ids_and_every_special_token():
    ids = proposable_ids(Tokenizer(WORDS, (9,)), Tokenizer(WORDS, (9,)), 10, 10, keep=4)
    assert ids.tolist() == [0, 1, 2, 3, 9]
    assert ids.dtype == torch.long
