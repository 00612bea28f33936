"""Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`), for the `anthropic`
SDKs and Claude Code: a request becomes one `EngineRequest` (its messages through the model's
chat template, tools as the template describes them), and the engine's chunks become a message
with text and tool_use blocks, whole or as Anthropic's event stream. Errors on these routes are in
Anthropic's shape (`errors.body_for`).

`usage` carries Anthropic's fields and, as every dialect's does, the `speculative` extension (the
run's method, τ and acceptance).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...core.engine import Chunk
from . import openai_format, relay, tools
from .anthropic_schemas import CountTokensRequest, MessagesRequest
from .request import EngineRequest
from .state import chat_prompt, compile_grammar, required_calls, server_state, speculative
from .streaming import one_answer, stream_failed, written
from .job import Job

router = APIRouter()

# the engine's ends as Anthropic names them (a stop string: "stop_sequence"; calls: "tool_use")
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request) -> dict:
    state = server_state(request)
    state.check_model(body.model)
    prepare = chat_prompt(state, body.template_messages(), body.tools_in_prompt)
    return {"input_tokens": len(await state.worker.call(prepare))}


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request) -> Response:
    state = server_state(request)
    state.check_model(body.model)
    output_format = body.output_format
    if body.forced_tool_call:
        output_format = required_calls(state, body.tools_in_prompt, body.forced_tool_call,
                                       body.parallel_tool_calls)
    # a cap, as Anthropic's is: the answer ends at it or where the context is full (Claude Code
    # asks for 32,000 tokens of a model it takes for one of a million)
    limit = min(body.max_tokens, state.model.context_length)
    prompt = chat_prompt(state, body.template_messages(), body.tools_in_prompt)
    asked = EngineRequest([prompt], limit, body.temperature, body.top_k,
                          body.top_p, stop=tuple(body.stop_sequences),
                          grammar=await compile_grammar(state, output_format),
                          **speculative(body.speculative))
    names = tuple(t["function"]["name"] for t in body.tools_in_prompt or ())
    message = _Message(state.model_id)
    # streamed, started once the prompt is checked: pings keep it through the prefill
    answer = await one_answer(request, state, asked, names, (
        lambda job, chunk: _events(job, chunk, message, names)) if body.stream else None)
    if isinstance(answer, Response):
        return answer
    job, prose, calls, last = answer
    content = ([{"type": "text", "text": prose}] if prose else []) + [
        message.tool_use(call) for call in calls]
    return JSONResponse({**message.head(), "content": content,
                         **message.end(last, bool(calls), _usage(job, last))})


def _usage(job: Job, last: Chunk) -> dict:
    """Anthropic's usage, with the run's statistics in the `speculative` extension."""
    openai = openai_format.usage(job.prompt_tokens, [last.stats], job.decoder, job.budget)
    cached = openai["prompt_tokens_details"]["cached_tokens"]
    return {"input_tokens": job.prompt_tokens - cached, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0, "output_tokens": openai["completion_tokens"],
            "speculative": openai["speculative"]}


class _Message:
    """The parts of one answer message: its head, its tool_use blocks, its end."""

    def __init__(self, model: str) -> None:
        self.id, self.model = relay.new_id("msg_"), model

    def head(self) -> dict:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    @staticmethod
    def tool_use(call: tools.ToolCall) -> dict:
        return {"type": "tool_use", "id": call.id, "name": call.name,
                "input": json.loads(call.arguments)}

    @staticmethod
    def end(last: Chunk, called: bool, usage: dict) -> dict:
        reason = STOP_REASONS.get(last.finish_reason, "end_turn")
        if last.stop_string is not None:
            reason = "stop_sequence"
        elif called and last.finish_reason == "stop":
            reason = "tool_use"
        return {"stop_reason": reason, "stop_sequence": last.stop_string, "usage": usage}


def _event(kind: str, data: dict) -> str:
    """One event of Anthropic's stream: its name on the event line and in the data."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data}, ensure_ascii=False)}\n\n"


class _Blocks:
    """The content blocks of a streamed message, opened and closed as its parts arrive: text
    deltas go to an open text block; a tool call closes it and is one tool_use block (its input
    as one input_json_delta)."""

    def __init__(self) -> None:
        self.index, self.text_open, self.calls = 0, False, 0
        self.last: Chunk | None = None  # the answer's last chunk, once it came

    @staticmethod
    def wait() -> list[str]:
        return [_event("ping", {})]

    def text(self, delta: str) -> list[str]:
        out = []
        if not self.text_open:
            out.append(_event("content_block_start", {"index": self.index, "content_block": {
                "type": "text", "text": ""}}))
            self.text_open = True
        return out + [_event("content_block_delta", {"index": self.index, "delta": {
            "type": "text_delta", "text": delta}})]

    def call(self, call: tools.ToolCall) -> list[str]:
        block = {**_Message.tool_use(call), "input": {}}
        out = self.close() + [
            _event("content_block_start", {"index": self.index, "content_block": block}),
            _event("content_block_delta", {"index": self.index, "delta": {
                "type": "input_json_delta", "partial_json": call.arguments}}),
            _event("content_block_stop", {"index": self.index})]
        self.index, self.calls = self.index + 1, self.calls + 1
        return out

    def close(self) -> list[str]:
        if not self.text_open:
            return []
        self.text_open = False
        self.index += 1
        return [_event("content_block_stop", {"index": self.index - 1})]


async def _events(job: Job, chunk: Chunk | None, message: _Message, names: tuple[str, ...]):
    """The event stream: message_start, a ping (another every KEEPALIVE_SECONDS until the first
    chunk: `chunk` None, the prompt is still being read), the content blocks, message_delta (the
    stop reason and usage), message_stop; an error after the headers were sent is an error
    event."""
    blocks = _Blocks()
    try:
        yield _event("message_start", {"message": {
            **message.head(), "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": job.prompt_tokens, "output_tokens": 0}}})
        yield _event("ping", {})
        async for event in written(job, chunk, names, blocks):
            yield event
        end = message.end(blocks.last, blocks.calls > 0, _usage(job, blocks.last))
        yield _event("message_delta", {"delta": {k: end[k] for k in ("stop_reason",
                                                                      "stop_sequence")},
                                       "usage": end["usage"]})
        yield _event("message_stop", {})
        job.outcome = end["stop_reason"]
    except Exception as exc:
        yield _event("error", {"error": stream_failed(job, exc).body("/v1/messages")["error"]})
