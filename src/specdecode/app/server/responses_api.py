"""OpenAI's Responses API (`POST /v1/responses`), for the Codex CLI, the Agents SDK and the AI
SDK: a request's items become one `EngineRequest` through the model's chat template (as chat
completions' messages do), and the engine's chunks become a response of message and
function_call items, whole or as the API's numbered events. Errors are in OpenAI's shape.

`store` keeps a response's conversation (its input, after the earlier turns it continued, and
its output) for `previous_response_id`, in memory (`Store`: at most STORED responses, each for
STORE_SECONDS); the next turn's prompt then starts as the stored one did, so its cache is reused
(`usage.input_tokens_details.cached_tokens`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...core.engine import Chunk
from . import openai_format, relay, tools
from .errors import APIError
from .request import EngineRequest
from .responses_schemas import ResponsesRequest
from .state import chat_prompt, compile_grammar, required_calls, server_state, speculative
from .llamacpp_format import run_timings
from .streaming import PromptReads, one_answer, stream_failed, written
from .job import Job

router = APIRouter()
STORED, STORE_SECONDS = 1024, 3600.0


class Store:
    """Conversations by response id, the oldest dropped past STORED or STORE_SECONDS."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[float, list[dict]]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, messages: list[dict]) -> None:
        with self._lock:
            self._items[response_id] = (time.monotonic(), messages)
            while len(self._items) > STORED:
                self._items.popitem(last=False)

    def get(self, response_id: str) -> list[dict]:
        with self._lock:
            stored = self._items.get(response_id)
            if stored is None or time.monotonic() - stored[0] > STORE_SECONDS:
                self._items.pop(response_id, None)
                raise APIError(400, f"Previous response with id '{response_id}' not found: "
                                    f"it was not stored (store: false), or is older than "
                                    f"{STORE_SECONDS:.0f} s or {STORED} responses",
                               param="previous_response_id",
                               code="previous_response_not_found")
            return stored[1]


_STORE = Store()


def _conversation(body: ResponsesRequest) -> tuple[list[dict], list[dict]]:
    """The request's instructions (as a system turn) and its turns: the stored ones it continues,
    then its input."""
    history = _STORE.get(body.previous_response_id) if body.previous_response_id else []
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    return system, history + body.input


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens")
async def input_tokens(body: ResponsesRequest, request: Request) -> dict:
    """OpenAI's token count of a response's input, as /v1/responses would read it."""
    state = server_state(request)
    state.check_model(body.model)
    system, turns = _conversation(body)
    prepare = chat_prompt(state, system + turns, body.tools_in_prompt)
    return {"object": "response.input_tokens",
            "input_tokens": len(await state.worker.call(prepare))}


@router.post("/v1/responses")
@router.post("/responses")
async def responses(body: ResponsesRequest, request: Request) -> Response:
    state = server_state(request)
    state.check_model(body.model)
    system, turns = _conversation(body)
    output_format = body.output_format
    if body.forced_tool_call:
        output_format = required_calls(state, body.tools_in_prompt, body.forced_tool_call,
                                       body.parallel_tool_calls)
    limit = min(body.max_output_tokens or state.model.context_length,
                state.model.context_length)
    asked = EngineRequest([chat_prompt(state, system + turns, body.tools_in_prompt)], limit,
                          body.temperature, top_p=body.top_p,
                          grammar=await compile_grammar(state, output_format),
                          **speculative(body.speculative))
    names = tuple(t["function"]["name"] for t in body.tools_in_prompt or ())
    answer = _Answer(state.model_id, body, turns)
    whole = await one_answer(request, state, asked, names, (
        lambda job, chunk: _events(job, chunk, answer, names)) if body.stream else None)
    if isinstance(whole, Response):
        return whole
    job, prose, calls, last = whole
    items = ([answer.message(prose, "completed")] if prose else []) + [
        answer.function_call(call) for call in calls]
    return JSONResponse(answer.whole(items, job, last))


class _Answer:
    """One response's objects: its items, the whole response, what `store` keeps."""

    def __init__(self, model: str, body: ResponsesRequest, conversation: list[dict]) -> None:
        self.id, self.model, self.body = relay.new_id("resp_"), model, body
        self.conversation, self.created = conversation, relay.created()

    @staticmethod
    def message(text: str, status: str, item_id: str | None = None) -> dict:
        return {"type": "message", "id": item_id or relay.new_id("msg_"), "status": status,
                "role": "assistant", "content": [] if status == "in_progress" else [
                    {"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    @staticmethod
    def function_call(call: tools.ToolCall, status: str = "completed") -> dict:
        return {"type": "function_call", "id": relay.new_id("fc_"), "call_id": call.id,
                "name": call.name, "arguments": call.arguments if status == "completed" else "",
                "status": status}

    def response(self, status: str, items: list[dict], usage: dict | None = None,
                 incomplete: bool = False) -> dict:
        b = self.body
        return {"id": self.id, "object": "response", "created_at": self.created,
                "status": status, "model": self.model, "output": items, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "instructions": b.instructions, "max_output_tokens": b.max_output_tokens,
                "parallel_tool_calls": b.parallel_tool_calls,
                "previous_response_id": b.previous_response_id,
                "temperature": b.temperature, "top_p": b.top_p,
                "tool_choice": b.tool_choice or "auto", "tools": b.tools or [],
                "text": {"format": {"type": "text"}} if b.text is None
                else b.text.model_dump(by_alias=True, exclude_none=True),
                "reasoning": {"effort": None, "summary": None}, "store": b.store,
                "metadata": b.metadata or {}, "truncation": "disabled", "user": b.user,
                "usage": usage}

    def whole(self, items: list[dict], job: Job, last: Chunk) -> dict:
        """The finished response; stored for a next turn when `store` says so."""
        incomplete = last.finish_reason == "length"
        if self.body.store:
            _STORE.put(self.id, self.conversation + _as_messages(items))
        return self.response("incomplete" if incomplete else "completed", items,
                             _usage(job, last), incomplete)


def _as_messages(items: list[dict]) -> list[dict]:
    """The response's items as the template's assistant turn."""
    text = "".join(p["text"] for i in items if i["type"] == "message" for p in i["content"])
    calls = [{"id": i["call_id"], "type": "function",
              "function": {"name": i["name"], "arguments": i["arguments"]}}
             for i in items if i["type"] == "function_call"]
    return [{"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}]


def _usage(job: Job, last: Chunk) -> dict:
    """The Responses API's usage, with the run's statistics in the `speculative` extension."""
    openai = openai_format.usage(job.prompt_tokens, [last.stats], job.decoder, job.budget)
    return {"input_tokens": job.prompt_tokens, "input_tokens_details": {
                "cached_tokens": openai["prompt_tokens_details"]["cached_tokens"]},
            "output_tokens": openai["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": openai["total_tokens"], "speculative": openai["speculative"]}


class _Events:
    """The numbered events of one streamed response, and its items as they close."""

    def __init__(self, answer: _Answer, job: Job) -> None:
        self.answer, self.job, self.number, self.items = answer, job, 0, []
        self.open_text: str | None = None  # the open message's text (None: no message open)
        self.message_id = ""
        self.last: Chunk | None = None  # the answer's last chunk, once it came

    @staticmethod
    def wait() -> list[str]:
        return [": keep-alive\n\n"]  # an SSE comment: clients skip it, connections stay

    def event(self, kind: str, **data) -> str:
        self.number += 1
        body = {"type": kind, "sequence_number": self.number - 1, **data}
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"

    def text(self, delta: str) -> list[str]:
        out = []
        where = {"output_index": len(self.items), "content_index": 0}
        if self.open_text is None:
            self.open_text, self.message_id = "", relay.new_id("msg_")
            out += [self.event("response.output_item.added", output_index=len(self.items),
                               item=_Answer.message("", "in_progress", self.message_id)),
                    self.event("response.content_part.added", item_id=self.message_id,
                               **where, part={"type": "output_text", "text": "",
                                              "annotations": [], "logprobs": []})]
        self.open_text += delta
        return out + [self.event("response.output_text.delta", item_id=self.message_id,
                                 **where, delta=delta, logprobs=[], **self.timings())]

    def timings(self) -> dict:
        """llama.cpp's timings of the answer so far, when the request asked for them."""
        if not self.answer.body.timings_per_token:
            return {}
        return {"timings": run_timings(self.job.prompt_tokens, self.job.runs[0])}

    def close(self) -> list[str]:
        if self.open_text is None:
            return []
        item = _Answer.message(self.open_text, "completed", self.message_id)
        where = {"item_id": self.message_id, "output_index": len(self.items),
                 "content_index": 0}
        out = [self.event("response.output_text.done", **where, text=self.open_text, logprobs=[]),
               self.event("response.content_part.done", **where, part=item["content"][0]),
               self.event("response.output_item.done", output_index=len(self.items), item=item)]
        self.items.append(item)
        self.open_text = None
        return out

    def call(self, call: tools.ToolCall) -> list[str]:
        out = self.close()
        item = _Answer.function_call(call)
        index, where = len(self.items), {"item_id": item["id"], "output_index": len(self.items)}
        out += [self.event("response.output_item.added", output_index=index,
                           item={**item, "arguments": "", "status": "in_progress"}),
                self.event("response.function_call_arguments.delta", **where,
                           delta=call.arguments),
                self.event("response.function_call_arguments.done", **where, name=call.name,
                           arguments=call.arguments),
                self.event("response.output_item.done", output_index=index, item=item)]
        self.items.append(item)
        return out


async def _events(job: Job, chunk: Chunk | None, answer: _Answer, names: tuple[str, ...]):
    """response.created and .in_progress once the prompt is checked (an SSE comment every
    KEEPALIVE_SECONDS until the first token), each item's events, then response.completed (or
    .incomplete) with the whole response; an error after the headers were sent is
    response.failed."""
    events = _Events(answer, job)
    try:
        yield events.event("response.created", response=answer.response("in_progress", []))
        yield events.event("response.in_progress", response=answer.response("in_progress", []))
        if answer.body.return_progress:
            reads = PromptReads(job, chunk and (0, chunk))
            async for progress in reads:
                yield events.event("response.in_progress", prompt_progress=progress,
                                   response=answer.response("in_progress", []))
            chunk = reads.event[1]
        async for line in written(job, chunk, names, events):
            yield line
        whole = answer.whole(events.items, job, events.last)
        yield events.event(f"response.{whole['status']}", response=whole, **events.timings())
        job.outcome = whole["status"]
    except Exception as exc:
        error = stream_failed(job, exc)
        failed = {**answer.response("failed", events.items),
                  "error": {"code": error.code or error.type, "message": error.message}}
        yield events.event("response.failed", response=failed)
