"""OpenAI's chat and completion shapes: whole responses, stream chunks, usage, and error bodies.

Kept apart from the routes so the wire format lives in one place; everything here is a plain dict
ready for `json.dumps`.
"""

from __future__ import annotations

import difflib

from ...core.budget import DraftBudget
from ...core.run_stats import RunStats
from ...pipeline import SpecDecoder
from . import relay


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def usage(prompt_tokens: int, runs: list[RunStats], decoder: SpecDecoder,
          budget: DraftBudget, prediction: list[int] | None = None,
          outputs: list[list[int]] = ()) -> dict:
    """OpenAI's usage object plus a `speculative` extension with the statistics of the runs
    (the request's choices, `RunStats.combined`: for a continuation, its own run's, and the
    tokens it read again, `resumed_tokens`) and the draft caps they ran with; with a
    `prediction`, how many of its tokens each choice's `outputs` (token ids) took up
    (`prediction_details`)."""
    stats = RunStats.combined(runs)
    s = stats.to_dict()
    speculative = {"method": decoder.method, "max_draft_nodes": budget.nodes,
                   "max_draft_depth": budget.depth, "adaptive": decoder.adaptive}
    for key in ("tau", "acceptance_rate", "target_forwards", "draft_forwards", "drafted",
                "accepted", "tokens_per_second", "wall_seconds"):
        speculative[key] = s[key]
    if stats.resumed_tokens:  # continued on this replica after another died (`relay`)
        speculative["resumed_tokens"] = stats.resumed_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": stats.output_tokens,
            "total_tokens": prompt_tokens + stats.output_tokens,
            # OpenAI's field: prompt tokens served from a cache (the choices share one prompt)
            "prompt_tokens_details": {"cached_tokens": max((r.cached_prompt_tokens for r in runs),
                                                           default=0)},
            **({"completion_tokens_details": prediction_details(prediction, outputs)}
               if prediction is not None else {}),
            "speculative": speculative}


def prediction_details(prediction: list[int], outputs: list[list[int]]) -> dict:
    """OpenAI's count for a predicted output: its tokens that appear in the completion, in
    order (the matching blocks of the two token sequences), and the rest, over the choices."""
    accepted = sum(sum(block.size for block in difflib.SequenceMatcher(
        None, prediction, out, autojunk=False).get_matching_blocks()) for out in outputs)
    return {"accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": len(prediction) * len(outputs) - accepted}


class Formatter:
    """Builds the objects of one response; `ChatFormatter` and `CompletionFormatter` say what a
    choice, a chunk and logprobs look like in each."""

    prefix = ""  # of the response's id
    object = ""  # of a whole response
    chunk_object = ""  # of a stream chunk

    def __init__(self, model: str, fingerprint: str | None = None) -> None:
        self.model, self.fingerprint = model, fingerprint
        self.id = relay.new_id(self.prefix)
        self.created = relay.created()

    def _head(self, object: str) -> dict:
        return {"id": self.id, "object": object, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def response(self, choices: list[dict], usage: dict) -> dict:
        return {**self._head(self.object), "choices": choices, "usage": usage}

    def with_usage(self, obj: dict, usage: dict | None) -> dict:
        if usage is not None:
            obj["usage"] = usage
        return obj

    def usage_chunk(self, usage: dict) -> dict:
        """The extra last chunk OpenAI sends for stream_options.include_usage: no choices."""
        return {**self._head(self.chunk_object), "choices": [], "usage": usage}

    def openings(self, choices: int) -> list[dict]:
        """The chunks a stream starts with, before any text."""
        return []

    def progress_chunk(self, progress: dict) -> dict:
        """llama.cpp's report of a prompt's read (`return_progress`, `streaming.PromptReads`)."""
        return {**self._head(self.chunk_object), "choices": [], "prompt_progress": progress}


class ChatFormatter(Formatter):
    prefix, object, chunk_object = "chatcmpl-", "chat.completion", "chat.completion.chunk"

    def openings(self, choices: int) -> list[dict]:
        """Each choice's role, as OpenAI's stream starts."""
        return [self.chunk(i, role=True) for i in range(choices)]

    def choice(self, index: int, text: str | None, finish_reason: str,
               logprobs: dict | None = None, tool_calls: list[dict] | None = None) -> dict:
        """One choice of a whole response."""
        message = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {"index": index, "message": message, "logprobs": logprobs,
                "finish_reason": finish_reason}

    def chunk(self, index: int = 0, text: str | None = None, finish_reason: str | None = None,
              role: bool = False, usage: dict | None = None) -> dict:
        """A stream chunk of choice `index` with a text delta (the first: the role, its content
        null as OpenAI's and llama.cpp's are, so a client that checks every delta's content is
        text finds none empty), or (finish_reason) the choice's closing chunk."""
        delta = {"role": "assistant", "content": None} if role else {}
        if text:
            delta["content"] = text
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self.with_usage({**self._head(self.chunk_object), "choices": [choice]}, usage)

    def tool_call_chunks(self, choice: int, index: int, call: dict) -> list[dict]:
        """A streamed tool call as OpenAI streams one: its id and name, then its arguments."""
        head = self._head(self.chunk_object)
        first = {"index": index, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": ""}}
        rest = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
        return [{**head, "choices": [{"index": choice, "delta": {"tool_calls": [delta]},
                                      "logprobs": None, "finish_reason": None}]}
                for delta in (first, rest)]

    def logprobs(self, entries: list[tuple[int, float | None, tuple]], pieces: dict[int, bytes],
                 offset: int = 0) -> tuple[dict, int]:
        """OpenAI's chat logprobs for (token, logprob, alternatives) entries: each token's text
        and bytes with its alternatives' (`offset` passes through: chat has none)."""
        def one(token: int, logprob: float) -> dict:
            return {"token": _text(pieces, token), "logprob": logprob,
                    "bytes": list(pieces[token])}

        return {"content": [{**one(t, lp), "top_logprobs": [one(*a) for a in top]}
                            for t, lp, top in entries], "refusal": None}, offset


class CompletionFormatter(Formatter):
    prefix, object, chunk_object = "cmpl-", "text_completion", "text_completion"

    def choice(self, index: int, text: str | None, finish_reason: str,
               logprobs: dict | None = None) -> dict:
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}

    def chunk(self, index: int = 0, text: str | None = None, finish_reason: str | None = None,
              usage: dict | None = None) -> dict:
        choice = {"index": index, "text": text or "", "logprobs": None,
                  "finish_reason": finish_reason}
        return self.with_usage({**self._head(self.chunk_object), "choices": [choice]}, usage)

    def logprobs(self, entries: list[tuple[int, float | None, tuple]], pieces: dict[int, bytes],
                 offset: int = 0) -> tuple[dict, int]:
        """OpenAI's completion logprobs for (token, logprob, alternatives) entries (a prompt's
        first token has none: logprob None): tokens, token_logprobs, top_logprobs (the token
        itself among them, as OpenAI adds it) and text_offset, counted in the tokens' own texts
        from `offset`; and the offset after them."""
        out: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for token, logprob, top in entries:
            text = _text(pieces, token)
            out["tokens"].append(text)
            out["token_logprobs"].append(logprob)
            out["top_logprobs"].append(None if logprob is None else {
                **{_text(pieces, t): lp for t, lp in top}, text: logprob})
            out["text_offset"].append(offset)
            offset += len(text)
        return out, offset


def _text(pieces: dict[int, bytes], token: int) -> str:
    return pieces[token].decode("utf-8", "replace")
