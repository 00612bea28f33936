"""Streaming text from token ids: deltas that never split a multi-byte character, and stop strings
that are cut off (and never half-emitted)."""

from __future__ import annotations

from typing import Callable, Sequence


class IncrementalText:
    """Turns a growing token sequence into text deltas.

    The whole generated sequence is decoded each time (tokenizers merge spaces and byte-level
    pieces differently at a cut), and text is held back while it ends in an incomplete character
    ("\\ufffd") or could still be the beginning of a stop string."""

    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str] = ()) -> None:
        self.decode = decode
        self.stop = [s for s in stop if s]
        self.ids: list[int] = []
        self.text = ""  # full text so far, cut at a stop string when one was seen
        self.emitted = 0  # characters of self.text already returned
        self.matched: str | None = None  # the stop string the text ends at, once one was seen

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    def push(self, ids: list[int]) -> str:
        """Add tokens; return the text that is now safe to show."""
        self.ids.extend(ids)
        text = self.decode(self.ids)
        found = [(at, stop) for stop in self.stop
                 if (at := text.find(stop, max(0, self.emitted - len(stop)))) != -1]
        if found:  # the text ends at the earliest match (overlapping ones included)
            at, self.matched = min(found)
            text = text[:at]
        self.text = text
        safe = len(text)
        if not self.stopped:
            while safe > self.emitted and text[safe - 1] == "\ufffd":
                safe -= 1
            hold = max((len(s) - 1 for s in self.stop), default=0)
            safe = max(self.emitted, min(safe, len(text) - hold))
        return self._emit(safe)

    def flush(self) -> str:
        """The rest of the text, at the end of generation."""
        return self._emit(len(self.text))

    def _emit(self, upto: int) -> str:
        delta = self.text[self.emitted : upto]
        self.emitted = max(self.emitted, upto)
        return delta
