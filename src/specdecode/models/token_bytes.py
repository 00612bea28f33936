"""The bytes of each token, as a tokenizer's vocabulary spells them.

Reports that list tokens one at a time (log-probabilities) need a token's own bytes: decoding
one token alone gives U+FFFD where it holds part of a multi-byte character. Vocabularies spell
bytes in one of two ways: byte-level BPE (GPT-2, Qwen, SmolLM) writes each byte as one printable
character (the printable Latin-1 bytes as themselves, the other 68 as U+0100 onwards, in byte
order); SentencePiece (Gemma, Llama 2) writes a space as U+2581 and a byte with no piece of its
own as `<0xHH>`.
"""

from __future__ import annotations

import re
from functools import cache

_SP_SPACE = "\u2581"
_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def _byte_level() -> dict[str, int]:
    """The character byte-level BPE writes for each byte -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[chr(b)] = b
        else:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def token_bytes(tokenizer, ids: list[int]) -> list[bytes]:
    """The bytes of each of `ids` (special tokens: their text)."""
    special = set(getattr(tokenizer, "all_special_ids", ()))
    chars = _byte_level()
    out = []
    for token, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if token in special or piece is None:
            out.append((piece or "").encode())
        elif (match := _SP_BYTE.fullmatch(piece)) is not None:
            out.append(bytes([int(match.group(1), 16)]))
        elif _SP_SPACE in piece or not all(c in chars for c in piece):
            out.append(piece.replace(_SP_SPACE, " ").encode())
        else:
            out.append(bytes(chars[c] for c in piece))
    return out
