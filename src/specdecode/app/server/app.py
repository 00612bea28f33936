"""The FastAPI app: OpenAI-compatible routes in front of one `EngineWorker`.

Every generation goes through `_generate`: validate against the model, queue a `Job`, wait for
its first event, and only then answer. Waiting before sending headers means a problem found by the
engine (prompt too long, unknown drafter option) still becomes a proper 4xx response, even for a
streamed request. Nothing the client sends may produce a 500: user errors are `SpecDecodeError`s
(400), request shapes are checked by the pydantic schemas (400), and anything else is a bug that
is logged and answered with a generic 500 body, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import asynccontextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...core.engine import Chunk, Speculation
from ...drafters import DRAFTERS
from ...errors import InvalidParameterError, KernelError, SpecDecodeError
from ...grammars import GrammarCompiler
from ...models import LoadedModel
from ...pipeline import SpecDecoder
from ...models.fim import FimTokens
from . import infill, responses, tools
from .guard import DEFAULT_MAX_BODY_BYTES, RequestGuard
from .metrics import RequestMetricsMiddleware, ServerMetrics
from .schemas import (ChatCompletionRequest, CompletionRequest, GenerationRequest, InfillRequest,
                      SpeculativeOptions)
from .worker import (
    DecoderCache,
    EngineWorker,
    InternalError,
    Job,
    RequestTimeoutError,
    ServerBusyError,
    ServerShutdownError,
)

log = logging.getLogger("specdecode.server")

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
DISCONNECT_POLL_SECONDS = 0.5  # how often a waiting, not yet answered request checks its client
RETRY_AFTER_SECONDS = 1


class APIError(Exception):
    """An error answered with OpenAI's error body."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code = param, code
        self.headers = headers

    def body(self) -> dict:
        return responses.error_body(self.message, self.type, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers=self.headers)


def api_error(exc: Exception) -> APIError:
    """The HTTP meaning of an exception raised while serving a generation."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, KernelError):  # the server's failure, not the request's
        return APIError(500, str(exc), "server_error", code="kernel_error")
    if isinstance(exc, SpecDecodeError):
        return APIError(400, str(exc))
    if isinstance(exc, ServerBusyError):
        return APIError(503, str(exc), "server_error", code="server_busy",
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, ServerShutdownError):
        return APIError(503, str(exc), "server_error", code="server_shutdown")
    if isinstance(exc, RequestTimeoutError):
        return APIError(504, str(exc), "timeout_error", code="request_timeout")
    if isinstance(exc, InternalError):
        return APIError(500, str(exc), "server_error", code="internal_error")
    log.error("unexpected error", exc_info=exc)
    return APIError(500, "internal server error; see the server log", "server_error",
                    code="internal_error")


@dataclass
class ServerState:
    model: LoadedModel
    worker: EngineWorker
    metrics: ServerMetrics
    model_id: str  # what /v1/models reports and requests may name
    request_timeout: float
    created: int
    tool_markers: tuple[str, str] | None  # `tools.markers` of the model (None: no tool calls)
    fim: FimTokens | None  # the model's fill-in-the-middle tokens (None: it has none)
    grammars: GrammarCompiler  # the model's, its tokenizer set up before serving
    compiling: ThreadPoolExecutor = field(  # where grammars compile, beside the engine thread
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="specdecode-grammar"))

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in (self.model_id, self.model.name):
            raise APIError(404, f"The model `{name}` does not exist; this server serves "
                                f"`{self.model_id}`", param="model", code="model_not_found")


def create_app(decoder: SpecDecoder | LoadedModel, *, options: dict[str, Any] | None = None,
               max_queue: int = 16, max_batch: int = 8, speculation: Speculation = "adaptive",
               request_timeout: float = 300.0, model_id: str | None = None,
               api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               prefix_cache_tokens: int = 0) -> FastAPI:
    """Build the app around one loaded model.

    `decoder` serves requests that name no `speculative` method (a bare LoadedModel gets the
    tuned or default method); `options` (drafter options by name) configure the drafters that
    requests ask for by name. Up to `max_batch` requests generate together (`core.batch`), their
    draft rows chosen as `speculation` says; `api_key` (None: open) and `max_body_bytes` guard
    the routes (`guard.RequestGuard`); up to `prefix_cache_tokens` positions of prompts' caches are
    kept for prompts that start alike (`core.prefix_cache`; 0: none)."""
    options = dict(options or {})
    if isinstance(decoder, LoadedModel):
        decoder = SpecDecoder(decoder, **options)
    if request_timeout <= 0:
        raise InvalidParameterError(f"request timeout must be > 0, got {request_timeout}")
    metrics = ServerMetrics()
    worker = EngineWorker(DecoderCache(decoder, options), metrics, max_queue, max_batch,
                          speculation, prefix_cache_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        yield
        await asyncio.to_thread(worker.stop)
        # its thread ends with the server: one that ran the grammar engine and lived on to the
        # interpreter's exit aborted the process there ("terminate called ...")
        state.compiling.shutdown()

    app = FastAPI(title="specdecode", summary="OpenAI-compatible speculative decoding server",
                  lifespan=lifespan)
    state = app.state.specdecode = ServerState(
        decoder.model, worker, metrics, model_id or decoder.model.name, request_timeout,
        int(time.time()), tools.markers(decoder.model.tokenizer), decoder.model.fim,
        decoder.grammars.ready())
    app.add_middleware(RequestGuard, api_key=api_key, max_body_bytes=max_body_bytes)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # outermost: counts 401 and 413
    _add_error_handlers(app)
    _add_routes(app)
    return app


def _state(request: Request) -> ServerState:
    return request.app.state.specdecode


def _add_routes(app: FastAPI) -> None:
    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        state = _state(request)
        ok = state.worker.accepting
        body = {"status": "ok" if ok else "shutting_down", "model": state.model_id,
                "kernels": state.model.kernels, "queue_length": state.worker.queue_length}
        return JSONResponse(body, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        m = _state(request).metrics
        return Response(m.render(), media_type=m.content_type)

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        return {"object": "list", "data": [_model_card(_state(request))]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> dict:
        state = _state(request)
        state.check_model(model_id)
        return _model_card(state)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        state = _state(request)
        if body.suffix is None:
            return await _generate(request, body, [_completion_prompt(state.model, p)
                                                   for p in body.prompt], chat=False)
        stops = _fim_ends(state)
        limit = state.model.context_length - (body.max_tokens or COMPLETION_DEFAULT_MAX_TOKENS)
        return await _generate(request, body, [infill.FimPrompt(state.model, p, body.suffix,
                                                                 limit=limit)
                                                for p in body.prompt], chat=False,
                               stop_token_ids=stops)

    @app.post("/infill")
    async def infill_(body: InfillRequest, request: Request) -> Response:
        return await _infill(request, body)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        model = _state(request).model
        messages = tools.template_messages([m.to_template() for m in body.messages])
        tools_in_prompt, output_format = body.tools_in_prompt, body.output_format
        if tools_in_prompt:
            marks = _state(request).tool_markers
            if marks is None:
                raise InvalidParameterError(tools.NO_TOOLS)
            if body.forced_tool_calls:
                output_format = ("lark", tools.call_grammar(
                    tools_in_prompt, *body.forced_tool_calls, body.parallel_tool_calls, marks))
        names = tuple(t["function"]["name"] for t in tools_in_prompt or ())
        return await _generate(request, body, [_chat_prompt(model, messages, tools_in_prompt)],
                               chat=True, output_format=output_format, tool_calls=names)


def _model_card(state: ServerState) -> dict:
    return {"id": state.model_id, "object": "model", "created": state.created,
            "owned_by": "specdecode", "context_length": state.model.context_length}


def _completion_prompt(model: LoadedModel, prompt: str | list[int]) -> Callable[[], list[int]]:
    """Prompt ids for /v1/completions: text as is (no chat template), or token ids checked
    against the vocabulary (an out-of-range id would index past the embedding table)."""

    def prepare() -> list[int]:
        if isinstance(prompt, str):
            return model.encode_prompt(prompt, chat=False)
        vocab = model.target.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise InvalidParameterError(f"prompt token ids must be in [0, {vocab})")
        return list(prompt)

    return prepare


def _chat_prompt(model: LoadedModel, messages: list[dict],
                 tool_list: list[dict] | None = None) -> Callable[[], list[int]]:
    """Prompt ids for /v1/chat/completions: the model's chat template (`encode_chat`, describing
    `tool_list` when given). A model without a template is refused: the library's fallback
    (contents joined) is no chat format a client could rely on."""

    def prepare() -> list[int]:
        if not model.has_chat_template:
            raise InvalidParameterError("this model has no chat template; use /v1/completions")
        return model.encode_chat(messages, tool_list)

    return prepare


def _speculative(spec: SpeculativeOptions | None) -> tuple[str | None, tuple]:
    """The request's method and draft caps (None: the server's)."""
    method = spec.method if spec else None
    if method is not None and method not in DRAFTERS:
        raise APIError(400, f"unknown speculative method {method!r} (choose from "
                            f"{', '.join(sorted(DRAFTERS))})", param="speculative.method")
    return method, (spec.max_draft_nodes, spec.max_draft_depth) if spec else (None, None)


def _fim_ends(state: ServerState) -> frozenset[int]:
    """The tokens that end a middle besides the model's EOS (a 400 for a model without FIM
    tokens)."""
    if state.fim is None:
        raise InvalidParameterError(f"{state.model.name} has no fill-in-the-middle tokens "
                                    "(<|fim_prefix|>, <fim-prefix>, <PRE>, ...): it cannot fill "
                                    "a middle")
    return state.fim.ends


async def _infill(request: Request, body: InfillRequest) -> Response:
    """llama.cpp's /infill (`infill`): `n_cmpl` completions of the middle, whole (one object, an
    array for several) or streamed as llama.cpp streams them. Greedy completions are all the
    same: one is decoded and copied."""
    state, arrived = _state(request), time.monotonic()
    if body.model:
        state.check_model(body.model)
    stops = _fim_ends(state)
    context, limit = state.model.context_length, body.token_limit
    if limit == 0:  # a warm-up of llama.cpp's prompt cache, which this server does not keep
        return _infill_answer([infill.result(body, state.model_id, context, 0, "", "limit", 0,
                                             0, False, 0.0, 0.0, {})], body.n_cmpl)
    method, caps = _speculative(body.speculative)
    prompt = infill.FimPrompt(state.model, body.input_prefix, body.input_suffix, body.prompt,
                              [(f.filename, f.text) for f in body.input_extra],
                              limit=context - (limit or context // 4))
    params = dict(max_new_tokens=limit or context, temperature=body.temperature,
                  top_k=body.top_k, top_p=body.top_p, min_p=body.min_p,
                  seed=None if body.seed in (None, -1) else body.seed, stop=tuple(body.stop),
                  stop_token_ids=stops)
    job = Job([prompt], method, caps, params, state.request_timeout, None,
              body.n_cmpl if body.temperature > 0 else 1)
    state.worker.submit(job)
    middles = _Middles(job, body, arrived)
    try:
        event = await _next_chunk(job, request)
        if body.stream:
            return _JobStream(_infill_events(job, event, middles, state, prompt), job)
        middles.push(*event)
        while not middles.done:
            middles.push(*await _next_chunk(job, request))
    except BaseException:
        job.cancel()
        raise
    job.cancel()  # a middle ended by a rule of llama.cpp's leaves the engine here
    return _infill_answer([middles.result(i, state, prompt) for i in range(job.choices)],
                          body.n_cmpl)


class _Middles:
    """The middles of one /infill request as their chunks arrive, each ended by the model or by
    llama.cpp's rules (`infill.MiddleEnd`), timed from the request's arrival."""

    def __init__(self, job: Job, body: InfillRequest, arrived: float) -> None:
        self.job, self.body, self.arrived = job, body, arrived
        self.ends = [infill.MiddleEnd(body.n_indent, body.t_max_predict_ms)
                     for _ in range(job.choices)]
        self.texts, self.tokens = [""] * job.choices, [0] * job.choices
        self.finished: list[str | None] = [None] * job.choices  # "eos" or "limit" once done
        self.first: float | None = None
        self.last = arrived

    @property
    def done(self) -> bool:
        return all(self.finished)

    def push(self, index: int, chunk: Chunk) -> str:
        """Take a chunk of choice `index`; returns the text it adds to that middle."""
        self.first = self.first or time.monotonic()
        if self.finished[index] is not None:
            return ""
        end = self.ends[index]
        delta = end.push(chunk.text, final=chunk.finish_reason is not None)
        self.texts[index] += delta
        self.tokens[index] += len(chunk.token_ids)
        if end.ended or chunk.finish_reason is not None:
            self.finished[index] = "eos" if chunk.finish_reason == "stop" else "limit"
            self.last = time.monotonic()
        return delta

    def result(self, index: int, state: ServerState, prompt: infill.FimPrompt) -> dict:
        job = self.job
        stats = responses.usage(job.prompt_tokens, [job.runs[index]], job.decoder,
                                job.budget)["speculative"]
        first = self.first or self.last
        return infill.result(self.body, state.model_id, state.model.context_length, index,
                             self.texts[index], self.finished[index] or "limit",
                             job.prompt_tokens, self.tokens[index], prompt.truncated,
                             first - self.arrived, self.last - first, stats)


def _infill_answer(results: list[dict], copies: int) -> JSONResponse:
    """One object, or an array of `copies` (a greedy answer copied, index by index)."""
    if copies == 1:
        return JSONResponse(results[0])
    return JSONResponse([{**results[i % len(results)], **({"index": i} if "index" in results[0]
                                                         else {})} for i in range(copies)])


async def _infill_events(job: Job, event: tuple[int, Chunk], middles: _Middles,
                         state: ServerState, prompt: infill.FimPrompt):
    """/infill streamed as llama.cpp streams it: a partial object per delta (stop false), then
    each completion's whole object with stop true and its content already sent."""
    try:
        while True:
            delta = middles.push(*event)
            if delta:
                yield infill.event({"index": event[0], "content": delta, "tokens": [],
                                    "stop": False, "id_slot": -1,
                                    "tokens_predicted": middles.tokens[event[0]],
                                    "tokens_evaluated": job.prompt_tokens})
            if middles.done:
                break
            event = await job.next_event()
        for i in range(job.choices):
            yield infill.event({**middles.result(i, state, prompt), "content": ""})
    except Exception as exc:
        yield f"error: {json.dumps(api_error(exc).body(), separators=(',', ':'))}\n\n"
    finally:
        job.cancel()


def _sampling_params(body: GenerationRequest, context_length: int, chat: bool) -> dict:
    """Engine keyword arguments from the request; max_tokens is checked against the model."""
    limit = body.token_limit
    if limit is None:
        limit = context_length if chat else COMPLETION_DEFAULT_MAX_TOKENS
    low = 0 if body.prompt_logprobs is not None else 1  # 0: the prompt echoed (and scored)
    if not low <= limit <= context_length:
        raise APIError(400, f"max_tokens must be between {low} and the context length "
                            f"{context_length}, got {limit}", param="max_tokens")
    return dict(max_new_tokens=limit, temperature=body.temperature, top_k=max(body.top_k, 0),
                top_p=body.top_p, min_p=body.min_p, seed=body.seed, stop=body.stop_strings,
                penalties=body.penalties, logprobs=body.token_logprobs,
                prompt_logprobs=body.prompt_logprobs)


async def _generate(request: Request, body: GenerationRequest,
                    prepares: list[Callable[[], list[int]]], chat: bool,
                    output_format: tuple[str, Any] | None = None,
                    tool_calls: tuple[str, ...] = (),
                    stop_token_ids: frozenset[int] = frozenset()) -> Response:
    """Serve one generation: `n` choices of each prompt (`prepares`), decoded side by side;
    `output_format` constrains them; `tool_calls`, the names of the tools the prompt declares,
    has their tool calls parsed into OpenAI's `tool_calls`; `stop_token_ids` end them as the
    model's EOS does."""
    state = _state(request)
    state.check_model(body.model)
    params = _sampling_params(body, state.model.context_length, chat)
    params["stop_token_ids"] = stop_token_ids
    if body.prediction is not None:  # tokenized once, here, not per choice on the engine thread
        params["prediction"] = state.model.encode_text(body.prediction.content)
    method, caps = _speculative(body.speculative)
    if len(prepares) * body.n > state.worker.max_batch:
        raise APIError(400, f"{len(prepares)} prompt(s) x n={body.n} make {len(prepares) * body.n}"
                            f" choices; this server decodes at most {state.worker.max_batch} "
                            f"together (serve --max-batch)", param="n")
    output_format = output_format or body.output_format
    # compiled here, on a thread of its own (llguidance releases the GIL): a slow schema holds
    # this request only, never the engine thread and the requests streaming there
    grammar = (None if output_format is None else await asyncio.get_running_loop()
               .run_in_executor(state.compiling, state.grammars.compile, *output_format))
    job = Job(prepares, method, caps, params, state.request_timeout, grammar, body.n,
              echo=getattr(body, "echo", False))
    state.worker.submit(job)
    fmt = responses.Formatter(state.model_id, chat)
    try:
        event = await _next_chunk(job, request)
        if body.stream:
            return _JobStream(_stream_events(job, event, fmt, body.include_usage_chunk,
                                             tool_calls), job)
        parts: list[list[Chunk]] = [[] for _ in range(job.choices)]
        while True:
            parts[event[0]].append(event[1])
            if all(p and p[-1].finish_reason is not None for p in parts):
                break
            event = await _next_chunk(job, request)
    except BaseException:
        job.cancel()
        raise
    choices = [_choice(fmt, job, i, chunks, tool_calls) for i, chunks in enumerate(parts)]
    usage = responses.usage(job.prompt_tokens, [p[-1].stats for p in parts], job.decoder,
                            job.budget)
    return JSONResponse(fmt.response(choices, usage))


def _choice(fmt: responses.Formatter, job: Job, index: int, chunks: list[Chunk],
            tool_calls: tuple[str, ...]) -> dict:
    """Choice `index` of a whole response from its chunks."""
    text, finish = "".join(c.text for c in chunks), chunks[-1].finish_reason
    echo, entries = _opening(job, index, chunks[0])
    entries += [e for c in chunks for e in _entries(c)]
    logprobs = (fmt.logprobs(entries, job.pieces)[0] if job.params["logprobs"] is not None
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
    if not job.echo:
        return "", []
    ids = job.prompt_ids[index // job.n]
    text = b"".join(job.pieces[t] for t in ids).decode("utf-8", "replace")
    scored = first.prompt_logprobs
    if scored is None or job.params["logprobs"] is None:
        return text, []
    return text, [(ids[0], None, ())] + [(e.token, e.logprob, e.top) for e in scored[1:]]


async def _next_chunk(job: Job, request: Request) -> tuple[int, Chunk]:
    """Wait for the job's next (choice, chunk) while nothing has been sent yet, noticing a
    client that gives up meanwhile (so its queued or running job does not hold the engine)."""
    while True:
        event = await job.next_event(poll=DISCONNECT_POLL_SECONDS)
        if event is not None:
            return event
        if await request.is_disconnected():
            raise APIError(499, "client closed the request", code="client_closed_request")


class _ChoiceStream:
    """One choice's part of a stream: its tool-call parser and its logprobs' text offset."""

    def __init__(self, tool_calls: tuple[str, ...]) -> None:
        self.calls = tools.CallStream(tool_calls) if tool_calls else None
        self.started, self.offset = False, 0


async def _stream_events(job: Job, event: tuple[int, Chunk], fmt: responses.Formatter,
                         usage_chunk: bool, tool_calls: tuple[str, ...] = ()):
    """The SSE body: each choice's deltas and closing chunk (the last closing one with the
    usage), [DONE]. An error after the headers were sent is reported as an `error` event, as the
    OpenAI API does. With `tool_calls` (tool names), text that may start a tool call is held
    until it is one (sent as a call: its name, then its arguments) or is not (sent as text)."""
    streams = [_ChoiceStream(tool_calls) for _ in range(job.choices)]
    last: dict[int, Chunk] = {}
    try:
        if fmt.chat:
            for i in range(job.choices):
                yield responses.sse(fmt.chunk(i, role=True))
        while True:
            index, chunk = event
            if chunk.finish_reason is not None:
                last[index] = chunk
            final = len(last) == job.choices  # its closing chunk carries the usage: sent below
            for obj in _chunk_events(fmt, job, index, chunk, streams[index], close=not final):
                yield responses.sse(obj)
            if final:
                break
            event = await job.next_event()
        usage = responses.usage(job.prompt_tokens, [last[i].stats for i in range(job.choices)],
                                job.decoder, job.budget)
        yield responses.sse(fmt.chunk(index, finish_reason=_finish_reason(
            chunk, streams[index]), usage=usage))
        if usage_chunk:
            yield responses.sse(fmt.usage_chunk(usage))
    except Exception as exc:
        job.cancel()
        yield responses.sse(api_error(exc).body())
    finally:
        job.cancel()
    yield responses.DONE


def _finish_reason(chunk: Chunk, stream: _ChoiceStream) -> str:
    if stream.calls and stream.calls.calls and chunk.finish_reason == "stop":
        return "tool_calls"
    return chunk.finish_reason


def _chunk_events(fmt: responses.Formatter, job: Job, index: int, chunk: Chunk,
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
    if job.params["logprobs"] is not None and entries:
        if not out:
            out.append(fmt.chunk(index, ""))
        out[0]["choices"][0]["logprobs"], stream.offset = fmt.logprobs(entries, job.pieces,
                                                                      stream.offset)
    if chunk.finish_reason is not None and close:
        out.append(fmt.chunk(index, finish_reason=_finish_reason(chunk, stream)))
    return out


def _delta(fmt: responses.Formatter, index: int, part: "str | tools.ToolCall",
           calls: tools.CallStream | None) -> list[dict]:
    """The stream chunks of one part: text, or a whole tool call. Blank text between tool calls
    is not content."""
    if isinstance(part, tools.ToolCall):
        return fmt.tool_call_chunks(index, part.index, part.to_dict())
    if not part or (calls and calls.calls and not part.strip()):
        return []
    return [fmt.chunk(index, part)]


class _JobStream(StreamingResponse):
    """A server-sent-event response that cancels its job however it ends (done, client gone,
    server stopping): the engine stops at its next step instead of generating for nobody."""

    def __init__(self, content, job: Job) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.job = job

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":  # no route: say which there are
            message = _no_route(app, request)
        return APIError(exc.status_code, message, code=code,
                        headers=getattr(exc, "headers", None)).response()

    for kind in (APIError, SpecDecodeError, ServerBusyError, ServerShutdownError,
                 RequestTimeoutError, InternalError):
        app.add_exception_handler(kind, _known_error)
    app.add_exception_handler(Exception, _unexpected_error)


# clients that default to OpenAI's Responses API, and the setting that moves each to the chat API
RESPONSES_API = ("the Responses API is not served: point the client at /v1/chat/completions "
                 "(the OpenAI Agents SDK: set_default_openai_api('chat_completions'); the AI "
                 "SDK: @ai-sdk/openai-compatible, or openai.chat(model))")


def _no_route(app: FastAPI, request: Request) -> str:
    """A 404's message: the route asked for, and the routes this server has."""
    served = ", ".join(f"{method} {route.path.replace(':path', '')}" for route in app.routes
                       if route.path.startswith(("/v1/", "/infill", "/health", "/metrics"))
                       for method in sorted(getattr(route, "methods", ())))
    hint = f"; {RESPONSES_API}" if request.url.path.rstrip("/").endswith("/responses") else ""
    return f"no route {request.method} {request.url.path}{hint}; this server has {served}"


async def _known_error(request: Request, exc: Exception) -> JSONResponse:
    return api_error(exc).response()


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return api_error(InternalError("internal server error; see the server log")).response()


def _validation_error(errors: list[dict]) -> APIError:
    """OpenAI's error shape for the first problem pydantic found (`param` names the field)."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return APIError(400, f"the request body is not valid JSON: {detail}".rstrip(": "),
                        code="invalid_json")
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown field: this server does not honour it"
    message = f"{param}: {msg}" if param else msg
    return APIError(400, message, param=param)
