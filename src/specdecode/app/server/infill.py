"""llama.cpp's `/infill` dialect, for the editor plugins written for it (llama.vscode, llama.vim):
the prompt from its fields, its rules for where a middle ends, and its answer's shape. The route
itself is in `app` (`_infill`); fill-in-the-middle prompts are `models.fim`'s.

Its answers are compact JSON on one line: llama.vim accepts an answer only when it matches
`"content"\\s*:"` (no space after the colon) and, in Vim, reads it line by line.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ...models import LoadedModel
from .schemas import InfillRequest


class FimPrompt:
    """A prepare function (`worker.Job`) for a fill-in-the-middle prompt, cut to `limit` tokens;
    remembers whether it was cut."""

    def __init__(self, model: LoadedModel, prefix: str, suffix: str, before_cursor: str = "",
                 extra: list[tuple[str, str]] = (), limit: int | None = None) -> None:
        self.model, self.limit, self.truncated = model, limit, False
        self.parts = (prefix, suffix, before_cursor, list(extra))

    def __call__(self) -> list[int]:
        ids, self.truncated = self.model.encode_fim(*self.parts, limit=self.limit)
        return ids


class MiddleEnd:
    """llama.cpp's infill rules for where a middle ends beyond the model's own end: with
    `n_indent`, at the start of the first line after the first that holds text indented less
    (the cursor's block is done); with `t_max_ms`, at the first new line written after that many
    milliseconds. `push` takes each text delta and gives what is safe to send: with `n_indent`,
    a last line of blanks waits until it is known to belong to the middle."""

    def __init__(self, n_indent: int = 0, t_max_ms: float = -1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.n_indent, self.t_max_ms, self.clock = n_indent, t_max_ms, clock
        self.text, self.sent, self.ended, self.start = "", 0, False, None

    def push(self, delta: str, final: bool = False) -> str:
        """The new text to send after `delta` (all that is left when `final`); sets `ended`
        when a rule ends the middle here."""
        if self.ended:
            return ""
        if self.start is None:
            self.start = self.clock()
        old = len(self.text)
        self.text += delta
        cut = self._indent_cut()
        if cut is None and self.t_max_ms > 0 and self.clock() - self.start > self.t_max_ms / 1e3:
            newline = self.text.find("\n", old)
            cut = None if newline < 0 else newline + 1
        if cut is not None:
            self.text, self.ended = self.text[:cut], True
        safe = len(self.text) if cut is not None or final else self._decided()
        out, self.sent = self.text[self.sent : safe], max(self.sent, safe)
        return out

    def _indent_cut(self) -> int | None:
        if not self.n_indent or (first := self.text.find("\n")) < 0:
            return None
        position = first + 1
        for line in self.text[first + 1 :].split("\n"):
            text = line.lstrip(" \t")
            if text and len(line) - len(text) < self.n_indent:
                return position
            position += len(line) + 1
        return None

    def _decided(self) -> int:
        """Where the text stops being final: the start of a last line of blanks after the first
        line (it may yet turn out indented less)."""
        if not self.n_indent or self.text.find("\n") < 0:
            return len(self.text)
        start = self.text.rfind("\n") + 1
        return len(self.text) if self.text[start:].strip() else start


def result(body: InfillRequest, model_id: str, context_length: int, index: int, content: str,
           finished: str, prompt_tokens: int, predicted: int, truncated: bool,
           prompt_seconds: float, predict_seconds: float, speculative: dict) -> dict:
    """One completion in llama.cpp's shape (`finished`: "eos" at the model's end, "limit" at
    n_predict, n_indent or the time limit), timed by the server from the request's arrival:
    prompt_ms to the first token, predicted_ms after it. `speculative`: our extension."""
    timings = {"prompt_n": prompt_tokens, "prompt_ms": prompt_seconds * 1e3,
               "prompt_per_token_ms": prompt_seconds * 1e3 / max(prompt_tokens, 1),
               "prompt_per_second": prompt_tokens / prompt_seconds if prompt_seconds else 0.0,
               "predicted_n": predicted, "predicted_ms": predict_seconds * 1e3,
               "predicted_per_token_ms": predict_seconds * 1e3 / max(predicted, 1),
               "predicted_per_second": predicted / predict_seconds if predict_seconds else 0.0}
    settings = {"n_ctx": context_length, "n_predict": body.token_limit or -1,
                "temperature": body.temperature, "top_k": body.top_k, "top_p": body.top_p,
                "min_p": body.min_p, "seed": body.seed if body.seed is not None else -1,
                "stop": body.stop, "n_indent": body.n_indent, "stream": body.stream}
    out = {"index": index, "content": content, "tokens": [], "id_slot": 0, "stop": True,
           "model": model_id, "tokens_predicted": predicted, "tokens_evaluated": prompt_tokens,
           "generation_settings": settings, "has_new_line": "\n" in content,
           "truncated": truncated, "stop_type": finished, "tokens_cached":
           prompt_tokens + predicted, "timings": timings, "speculative": speculative}
    return fields(out, body.response_fields)


def fields(answer: dict, paths: list[str] | None) -> dict:
    """llama.cpp's `response_fields`: the answer flattened to the paths asked ("timings/prompt_n"
    as a key of its own); paths it lacks are left out."""
    if paths is None:
        return answer
    out = {}
    for path in paths:
        value: Any = answer
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def event(obj: dict) -> str:
    """One server-sent event as llama.cpp writes it: compact JSON, no [DONE] after the last."""
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"
