"""`IncrementalText`: streamed deltas never split a character and never half-emit a stop string.

Token ids are bytes here: decode(ids) = bytes(ids).decode("utf-8", errors="replace"), so an
incomplete multi-byte character decodes to U+FFFD, as with byte-level BPE tokenizers."""

from __future__ import annotations

import pytest

from specdecode.core.detokenize import IncrementalText


def decode(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def feed(text: IncrementalText, data: bytes, chunk: int = 1) -> list[str]:
    deltas = []
    for i in range(0, len(data), chunk):
        deltas.append(text.push(list(data[i : i + chunk])))
        if text.stopped:
            break
    return deltas


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_multibyte_characters_are_never_split(chunk):
    full = "héllo € 𝄞 ok"
    text = IncrementalText(decode)
    deltas = feed(text, full.encode(), chunk)
    deltas.append(text.flush())
    assert "".join(deltas) == full
    assert not any("\ufffd" in d for d in deltas)


def test_incomplete_character_is_held_back_until_complete():
    text = IncrementalText(decode)
    euro = "€".encode()  # 3 bytes
    assert text.push([ord("a")]) == "a"
    assert text.push([euro[0]]) == ""
    assert text.push([euro[1]]) == ""
    assert text.push([euro[2]]) == "€"
    assert text.flush() == ""


def test_deltas_without_stop_strings_are_emitted_immediately():
    text = IncrementalText(decode)
    assert [text.push([b]) for b in b"abc"] == ["a", "b", "c"]
    assert text.flush() == ""


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 100])
def test_stop_string_is_cut_and_never_partially_emitted(chunk):
    text = IncrementalText(decode, stop=["STOP"])
    deltas = feed(text, b"say ST and STO then STOP and more", chunk)
    deltas.append(text.flush())
    assert text.stopped
    assert "".join(deltas) == "say ST and STO then "
    # at no point did the emitted text end inside the stop string that followed
    emitted = ""
    for d in deltas:
        emitted += d
        assert "say ST and STO then ".startswith(emitted)
        assert "STOP" not in emitted


def test_stop_prefix_is_held_back_until_disambiguated():
    text = IncrementalText(decode, stop=["STOP"])
    # the last len("STOP") - 1 = 3 characters are held back while a stop string could start there
    assert text.push(list(b"ab")) == ""
    out = text.push(list(b"cdS"))
    assert out == "ab"
    out += text.push(list(b"Tx"))
    assert not text.stopped
    out += text.flush()
    assert out == "abcdSTx"


@pytest.mark.parametrize("chunk", [1, 11])
def test_earliest_of_several_stop_strings_wins_and_is_the_one_named(chunk):
    text = IncrementalText(decode, stop=["lo w", "world", "ello"])
    deltas = feed(text, b"hello world", chunk)
    deltas.append(text.flush())
    assert text.stopped and text.matched == "ello"
    assert "".join(deltas) == "h"


def test_stop_string_spanning_pushes_is_found():
    text = IncrementalText(decode, stop=["\n\n"])
    out = text.push(list(b"line one\n"))
    out += text.push(list(b"\nline two"))
    assert text.stopped
    out += text.flush()
    assert out == "line one"


def test_stop_string_with_multibyte_characters():
    text = IncrementalText(decode, stop=["€!"])
    deltas = feed(text, "price 5€ or 6€! extra".encode(), 1)
    deltas.append(text.flush())
    assert "".join(deltas) == "price 5€ or 6"
    assert not any("\ufffd" in d for d in deltas)


def test_empty_stop_strings_are_ignored():
    text = IncrementalText(decode, stop=["", "zz"])
    assert text.push(list(b"abc")) == "ab"  # "zz" holds one character back, "" holds nothing
    assert not text.stopped
    assert text.flush() == "c"


def test_flush_returns_held_back_text_once():
    text = IncrementalText(decode, stop=["STOP"])
    assert text.push(list(b"the ST")) == "the"
    assert text.flush() == " ST"
    assert text.flush() == ""
