"""OpenAI's chat completions and completions dialects (`/v1/chat/completions`, `/v1/completions`):
each request becomes one `EngineRequest`; the engine's chunks become OpenAI's responses, stream
chunks (with tool calls parsed out of the text) and usage.

Every generation goes through `_generate`: validate against the model, queue a `Job`, wait for
its first event, and only then answer. Waiting before sending headers means a problem found by the
engine (prompt too long, unknown drafter option) still becomes a proper 4xx response, even for a
streamed request.
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...core.engine import Chunk
from . import infill, openai_format, tools
from .errors import APIError
from .request import EngineRequest
from .openai_schemas import ChatCompletionRequest, CompletionRequest, GenerationRequest
from .state import (ServerState, chat_prompt, compile_grammar, fim_ends, ids_text, raw_prompt,
                    required_calls, server_state, speculative)
from .llamacpp_format import run_timings
from .streaming import DONE, JobStream, PromptReads, admitted, next_chunk, sse, stream_failed
from .job import Job

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

router = APIRouter()


@router.post("/v1/completions")  # and /completions with a `model`: `app`
async def completions(body: CompletionRequest, request: Request) -> Response:
    state = server_state(request)
    if body.suffix is None:
        return await _generate(request, body, [raw_prompt(state.model, p)
                                               for p in body.prompt], chat=False)
    stops = fim_ends(state)
    limit = state.model.context_length - (body.max_tokens or COMPLETION_DEFAULT_MAX_TOKENS)
    return await _generate(request, body, [infill.FimPrompt(state.model, p, body.suffix,
                                                             limit=limit)
                                            for p in body.prompt], chat=False,
                           stop_token_ids=stops)


@router.post("/v1/chat/completions/input_tokens")
@router.post("/chat/completions/input_tokens")
async def chat_input_tokens(body: ChatCompletionRequest, request: Request) -> dict:
    """The prompt's tokens as the chat completion would read them (llama.cpp's route)."""
    state = server_state(request)
    state.check_model(body.model)
    return {"object": "response.input_tokens",
            "input_tokens": len(await state.worker.call(_chat_prompt(state, body)))}


def _chat_prompt(state: ServerState, body: ChatCompletionRequest) -> Callable[[], list[int]]:
    return chat_prompt(state, [m.to_template() for m in body.messages], body.tools_in_prompt,
                       body.continue_final_message)


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    tools_in_prompt, output_format = body.tools_in_prompt, body.output_format
    prompt = _chat_prompt(state, body)
    if tools_in_prompt and body.forced_tool_calls:
        output_format = required_calls(state, tools_in_prompt, body.forced_tool_calls,
                                       body.parallel_tool_calls)
    names = tuple(t["function"]["name"] for t in tools_in_prompt or ())
    return await _generate(request, body, [prompt], chat=True, output_format=output_format,
                           tool_calls=names)


def _engine_request(body: GenerationRequest, prepares: list[Callable[[], list[int]]],
                    context_length: int, chat: bool, **fields: Any) -> EngineRequest:
    """The engine's request for `body`'s choices of each prompt; max_tokens is checked against the
    model. `fields`: what the route adds (stop tokens, the prediction, the method and caps)."""
    limit = body.token_limit
    if limit is None:
        limit = context_length if chat else COMPLETION_DEFAULT_MAX_TOKENS
    low = 0 if body.prompt_logprobs is not None else 1  # 0: the prompt echoed (and scored)
    if not low <= limit <= context_length:
        raise APIError(400, f"max_tokens must be between {low} and the context length "
                            f"{context_length}, got {limit}", param="max_tokens")
    return EngineRequest(prepares, limit, body.temperature, max(body.top_k, 0), body.top_p,
                         body.min_p, body.seed, body.stop_strings, penalties=body.penalties,
                         logprobs=body.token_logprobs, prompt_logprobs=body.prompt_logprobs,
                         n=body.n, echo=getattr(body, "echo", False), **fields)


async def _generate(request: Request, body: GenerationRequest,
                    prepares: list[Callable[[], list[int]]], chat: bool,
                    output_format: tuple[str, Any] | None = None,
                    tool_calls: tuple[str, ...] = (),
                    stop_token_ids: frozenset[int] = frozenset()) -> Response:
    """Serve one generation: `n` choices of each prompt (`prepares`), decoded side by side;
    `output_format` constrains them; `tool_calls`, the names of the tools the prompt declares,
    has their tool calls parsed into OpenAI's `tool_calls`; `stop_token_ids` end them as the
    model's EOS does."""
    state = server_state(request)
    state.check_model(body.model)
    # a prediction is tokenized once, here, not per choice on the engine thread
    prediction = (None if body.prediction is None else await state.worker.call(
        lambda: state.model.encode_text(body.prediction.content)))
    asked = _engine_request(body, prepares, state.model.context_length, chat,
                            stop_token_ids=stop_token_ids, prediction=prediction,
                            **speculative(body.speculative))
    if asked.choices > state.worker.max_batch:
        raise APIError(400, f"{len(prepares)} prompt(s) x n={body.n} make {asked.choices}"
                            f" choices; this server decodes at most {state.worker.max_batch} "
                            f"together (serve --max-batch)", param="n")
    grammar = await compile_grammar(state, output_format or body.output_format)
    job = Job(asked.with_grammar(grammar), state.request_timeout)
    state.worker.submit(job)
    fmt = (openai_format.ChatFormatter if chat else openai_format.CompletionFormatter)(
        state.model_id, state.fingerprint)
    try:
        # a stream that reports its prompt's read starts once the prompt is checked
        event = (await admitted(job, request) if body.stream and body.return_progress
                 else await next_chunk(job, request))
        if body.stream:
            return JobStream(_stream_events(job, event, fmt, body, tool_calls), job,
                             state.metrics)
        parts: list[list[Chunk]] = [[] for _ in range(job.choices)]
        while True:
            parts[event[0]].append(event[1])
            if all(p and p[-1].finish_reason is not None for p in parts):
                break
            event = await next_chunk(job, request)
    except BaseException:
        job.cancel()
        raise
    choices = [_choice(fmt, job, i, chunks, tool_calls) for i, chunks in enumerate(parts)]
    usage = openai_format.usage(job.prompt_tokens, [p[-1].stats for p in parts], job.decoder,
                                job.budget, job.request.prediction,
                                [[t for c in p for t in c.token_ids] for p in parts])
    answer = fmt.response(choices, usage)
    if getattr(body, "verbose", False):  # llama.cpp's: the prompt as the model read it
        answer["__verbose"] = {"prompt": await state.worker.call(
            lambda: ids_text(state.model, job.prompt_ids[0]))}
    return JSONResponse(answer)


def _choice(fmt: openai_format.Formatter, job: Job, index: int, chunks: list[Chunk],
            tool_calls: tuple[str, ...]) -> dict:
    """Choice `index` of a whole response from its chunks."""
    text, finish = "".join(c.text for c in chunks), chunks[-1].finish_reason
    echo, entries = _opening(job, index, chunks[0])
    entries += [e for c in chunks for e in _entries(c)]
    logprobs = (fmt.logprobs(entries, job.pieces)[0] if job.request.logprobs is not None
                else None)
    if tool_calls:
        content, calls = tools.parse(text, tool_calls)
        if calls:  # a cut answer keeps "length" (its unfinished block stays text)
            return fmt.choice(index, content, "tool_calls" if finish == "stop" else finish,
                              logprobs, [c.to_dict() for c in calls])
    return fmt.choice(index, echo + text, finish, logprobs)


def _entries(chunk: Chunk) -> list[tuple[int, float | None, tuple]]:
    return [(e.token, e.logprob, e.top) for e in chunk.logprobs or ()]


def _opening(job: Job, index: int, first: Chunk) -> tuple[str, list]:
    """What precedes choice `index`'s own tokens: the echoed prompt's text and, when it was
    scored, its tokens' logprobs entries (the first token has none)."""
    if not job.request.echo:
        return "", []
    ids = job.prompt_ids[index // job.request.n]
    text = b"".join(job.pieces[t] for t in ids).decode("utf-8", "replace")
    scored = first.prompt_logprobs
    if scored is None or job.request.logprobs is None:
        return text, []
    return text, [(ids[0], None, ())] + [(e.token, e.logprob, e.top) for e in scored[1:]]


class _ChoiceStream:
    """One choice's part of a stream: its tool-call parser and its logprobs' text offset."""

    def __init__(self, tool_calls: tuple[str, ...]) -> None:
        self.calls = tools.CallStream(tool_calls) if tool_calls else None
        self.started, self.offset = False, 0
        self.ids: list[int] = []  # its tokens so far (a prediction's usage counts them)


async def _stream_events(job: Job, event: tuple[int, Chunk] | None,
                         fmt: openai_format.Formatter, body: GenerationRequest,
                         tool_calls: tuple[str, ...] = ()):
    """The SSE body: each choice's deltas and closing chunk (the last closing one with the
    usage, or a usage chunk after it), [DONE]; with `return_progress`, first the prompt's read
    as it goes (`event` None: it is still being read). An error after the headers were sent is
    reported as an `error` event, as the OpenAI API does. With `tool_calls` (tool names), text
    that may start a tool call is held until it is one (sent as a call: its name, then its
    arguments) or is not (sent as text). With `timings_per_token`, every chunk after the
    openings carries llama.cpp's `timings` of its choice so far."""
    streams = [_ChoiceStream(tool_calls) for _ in range(job.choices)]
    last: dict[int, Chunk] = {}
    timed, usage_chunk = body.timings_per_token, body.include_usage_chunk
    try:
        if body.return_progress:
            reads = PromptReads(job, event)
            async for progress in reads:
                yield sse(fmt.progress_chunk(progress))
            event = reads.event
        for opening in fmt.openings(job.choices):
            yield sse(opening)
        while True:
            index, chunk = event
            streams[index].ids += chunk.token_ids
            if chunk.finish_reason is not None:
                last[index] = chunk
            final = len(last) == job.choices  # its closing chunk carries the usage: sent below
            for obj in _chunk_events(fmt, job, index, chunk, streams[index], close=not final):
                if timed:
                    obj["timings"] = run_timings(job.prompt_tokens, job.runs[index])
                yield sse(obj)
            if final:
                break
            event = await job.next_event()
        usage = openai_format.usage(job.prompt_tokens, [last[i].stats for i in range(job.choices)],
                                    job.decoder, job.budget, job.request.prediction,
                                    [s.ids for s in streams])
        # with include_usage, OpenAI's own last chunk carries it: once, so clients that add
        # usage up count it once
        ends = [fmt.chunk(index, finish_reason=_finish_reason(chunk, streams[index]),
                          usage=None if usage_chunk else usage)]
        if usage_chunk:
            ends.append(fmt.usage_chunk(usage))
        for obj in ends:
            if timed:
                obj["timings"] = run_timings(job.prompt_tokens, last[index].stats)
            yield sse(obj)
        job.outcome = _finish_reason(chunk, streams[index])
    except Exception as exc:
        yield sse(stream_failed(job, exc).body())
    finally:
        job.cancel()
    yield DONE


def _finish_reason(chunk: Chunk, stream: _ChoiceStream) -> str:
    if stream.calls and stream.calls.calls and chunk.finish_reason == "stop":
        return "tool_calls"
    return chunk.finish_reason


def _chunk_events(fmt: openai_format.Formatter, job: Job, index: int, chunk: Chunk,
                  stream: _ChoiceStream, close: bool) -> list[dict]:
    """The stream chunks of one engine chunk of choice `index`: its text (after the echoed prompt
    on the first), as text and tool calls, its logprobs on the first of them (on an empty delta
    when the text is held back), and, with `close`, the choice's closing chunk when it ends."""
    text, entries = chunk.text, _entries(chunk)
    if not stream.started:
        stream.started = True
        echo, opening = _opening(job, index, chunk)
        text, entries = echo + text, opening + entries
    parts = stream.calls.push(text) if stream.calls else [text]
    if chunk.finish_reason is not None and stream.calls:
        parts += stream.calls.flush()
    out = [obj for part in parts for obj in _delta(fmt, index, part, stream.calls)]
    if job.request.logprobs is not None and entries:
        if not out:
            out.append(fmt.chunk(index, ""))
        out[0]["choices"][0]["logprobs"], stream.offset = fmt.logprobs(entries, job.pieces,
                                                                      stream.offset)
    if chunk.finish_reason is not None and close:
        out.append(fmt.chunk(index, finish_reason=_finish_reason(chunk, stream)))
    return out


def _delta(fmt: openai_format.Formatter, index: int, part: "str | tools.ToolCall",
           calls: tools.CallStream | None) -> list[dict]:
    """The stream chunks of one part: text, or a whole tool call. Blank text between tool calls
    is not content."""
    if isinstance(part, tools.ToolCall):
        return fmt.tool_call_chunks(index, part.index, part.to_dict())
    if not part or (calls and calls.calls and not part.strip()):
        return []
    return [fmt.chunk(index, part)]
