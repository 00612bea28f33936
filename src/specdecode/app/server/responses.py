"""OpenAI response shapes: whole responses, stream chunks, usage, and error bodies.

Kept apart from the routes so the wire format lives in one place; everything here is a plain dict
ready for `json.dumps`.
"""

from __future__ import annotations

import json
import time
import uuid

from ...core.budget import DraftBudget
from ...core.metrics import RunStats
from ...pipeline import SpecDecoder

DONE = "data: [DONE]\n\n"


def sse(obj: dict) -> str:
    """One server-sent event, as the OpenAI API frames its stream."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def usage(prompt_tokens: int, stats: RunStats, decoder: SpecDecoder,
          budget: DraftBudget) -> dict:
    """OpenAI's usage object plus a `speculative` extension with the run's statistics and the
    draft caps it ran with."""
    s = stats.to_dict()
    speculative = {"method": decoder.method, "max_draft_nodes": budget.nodes,
                   "max_draft_depth": budget.depth, "adaptive": decoder.adaptive}
    for key in ("tau", "acceptance_rate", "target_forwards", "draft_forwards", "drafted",
                "accepted", "tokens_per_second", "wall_seconds"):
        speculative[key] = s[key]
    return {"prompt_tokens": prompt_tokens, "completion_tokens": stats.new_tokens,
            "total_tokens": prompt_tokens + stats.new_tokens, "speculative": speculative}


class Formatter:
    """Builds the objects of one response; `chat` selects chat.completion vs text_completion."""

    def __init__(self, model: str, chat: bool) -> None:
        self.chat, self.model = chat, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _head(self, object: str) -> dict:
        return {"id": self.id, "object": object, "created": self.created, "model": self.model}

    def response(self, text: str | None, finish_reason: str, usage: dict,
                 tool_calls: list[dict] | None = None) -> dict:
        if self.chat:
            message = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": None,
                      "finish_reason": finish_reason}
            return {**self._head("chat.completion"), "choices": [choice], "usage": usage}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head("text_completion"), "choices": [choice], "usage": usage}

    def chunk(self, text: str | None = None, finish_reason: str | None = None,
              role: bool = False, usage: dict | None = None) -> dict:
        """A stream chunk with a text delta, or (finish_reason) the closing chunk of the choice."""
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            obj = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None,
                      "finish_reason": finish_reason}
            obj = {**self._head("text_completion"), "choices": [choice]}
        if usage is not None:
            obj["usage"] = usage
        return obj

    def tool_call_chunks(self, index: int, call: dict) -> list[dict]:
        """A streamed tool call as OpenAI streams one: its id and name, then its arguments."""
        head = self._head("chat.completion.chunk")
        first = {"index": index, "id": call["id"], "type": "function",
                 "function": {"name": call["function"]["name"], "arguments": ""}}
        rest = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
        return [{**head, "choices": [{"index": 0, "delta": {"tool_calls": [delta]},
                                      "logprobs": None, "finish_reason": None}]}
                for delta in (first, rest)]

    def usage_chunk(self, usage: dict) -> dict:
        """The extra last chunk OpenAI sends for stream_options.include_usage: no choices."""
        obj = {**self._head("chat.completion.chunk" if self.chat else "text_completion")}
        return {**obj, "choices": [], "usage": usage}
