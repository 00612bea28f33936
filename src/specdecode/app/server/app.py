"""The FastAPI app: one module per dialect in front of one `EngineWorker`.

The dialects (`openai_api`: chat completions and completions; `responses_api`: OpenAI's
Responses; `anthropic_api`: Anthropic's Messages; `infill` and `llamacpp_api`: llama.cpp's own
routes) each turn their requests into one `request.EngineRequest` and the engine's chunks into
their own wire format; streaming (`streaming`) and OpenAI's error shape (`errors`) are written once. This
module builds the app around one loaded model and serves what belongs to no dialect: health,
metrics, the model list, and `POST /completions`, which two dialects claim.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ...core.engine import Speculation
from ...core.prefix_cache import PrefixCache
from ...core.prompt_store import DEFAULT_DISK_BYTES, PromptStore
from ...errors import InvalidParameterError
from ...models import LoadedModel
from ...pipeline import SpecDecoder
from . import anthropic_api, infill, llamacpp_api, openai_api, responses_api, tools
from .cors import Cors
from .errors import add_error_handlers
from .guard import DEFAULT_MAX_BODY_BYTES, RequestGuard
from .header_case import CanonicalHeaderCase
from .llamacpp_schemas import CompletionBody
from .metrics import RequestMetricsMiddleware, ServerMetrics
from .openai_schemas import CompletionRequest
from .state import ServerState, server_state
from .worker import DecoderCache, EngineWorker


def create_app(decoder: SpecDecoder | LoadedModel, *, options: dict[str, Any] | None = None,
               max_queue: int = 16, max_batch: int = 8, speculation: Speculation = "adaptive",
               request_timeout: float = 300.0, model_id: str | None = None,
               api_key: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               prefix_cache_bytes: int = 0, prompt_cache_dir: str | None = None,
               prompt_cache_disk_bytes: int = DEFAULT_DISK_BYTES,
               cors_origins: tuple[str, ...] = ("*",), slots: bool = False) -> FastAPI:
    """Build the app around one loaded model.

    `decoder` serves requests that name no `speculative` method (a bare LoadedModel gets the
    tuned or default method); `model_id` is the id reported (default: the model's name), and
    after commas other names requests may give ("*": any); `options` (drafter options by name) configure the drafters that
    requests ask for by name. Up to `max_batch` requests generate together (`core.batch`), their
    draft rows chosen as `speculation` says; `api_key` (None: open) and `max_body_bytes` guard
    the routes (`guard.RequestGuard`); up to `prefix_cache_bytes` of prompts' caches are kept for
    prompts that start alike (`core.prefix_cache`; 0: none), and with `prompt_cache_dir` up to
    `prompt_cache_disk_bytes` of them on disk for the next process (`core.prompt_store`); browser pages of
    `cors_origins` ("*": any; none: no page) may call it (`cors.Cors`); `slots`:
    llama.cpp's GET /slots answers (else 501)."""
    options = dict(options or {})
    # the reported id, then other names requests may give ("*": any, as llama.cpp's server takes)
    names = [n.strip() for n in (model_id or "").split(",") if n.strip()] or [None]
    if isinstance(decoder, LoadedModel):
        decoder = SpecDecoder(decoder, **options)
    names[0] = names[0] or decoder.model.name
    if request_timeout <= 0:
        raise InvalidParameterError(f"request timeout must be > 0, got {request_timeout}")
    metrics = ServerMetrics()
    prefixes = prefix_cache(decoder.model, prefix_cache_bytes, prompt_cache_dir,
                            prompt_cache_disk_bytes)
    worker = EngineWorker(DecoderCache(decoder, options), metrics, max_queue, max_batch,
                          speculation, prefixes)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        yield
        await asyncio.to_thread(worker.stop)
        if prefixes is not None and prefixes.store is not None:
            await asyncio.to_thread(prefixes.store.close)  # the next process finds every save
        # its thread ends with the server: one that ran the grammar engine and lived on to the
        # interpreter's exit aborted the process there ("terminate called ...")
        state.compiling.shutdown()

    app = FastAPI(title="specdecode", summary="OpenAI-compatible speculative decoding server",
                  lifespan=lifespan)
    state = app.state.specdecode = ServerState(
        decoder.model, worker, metrics, names[0], request_timeout,
        int(time.time()), tools.markers(decoder.model.tokenizer), decoder.model.fim,
        decoder.grammars.ready(), tuple(names[1:]), slots)
    app.add_middleware(RequestGuard, api_key=api_key, max_body_bytes=max_body_bytes)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)  # counts 401 and 413
    if cors_origins:  # before the key is asked for: a browser's preflight carries none
        app.add_middleware(Cors, origins=cors_origins)
    app.add_middleware(CanonicalHeaderCase)  # outermost: every answer's header names
    add_error_handlers(app)
    _add_routes(app)
    for dialect in (openai_api, responses_api, anthropic_api, infill, llamacpp_api):
        app.include_router(dialect.router)
    return app


def prefix_cache(model: LoadedModel, max_bytes: int, directory: str | None,
                 disk_bytes: int) -> PrefixCache | None:
    """The kept prompts' caches of a server (None: none kept, or a target whose rows depend on
    the call, which keeps none: `core.prefix_cache`)."""
    if not max_bytes or not model.target.row_invariant:
        return None
    store = (None if directory is None else
             PromptStore(directory, model.identity, model.target.new_cache, disk_bytes))
    return PrefixCache(max_bytes, store)


def _add_routes(app: FastAPI) -> None:
    @app.api_route("/", methods=["GET", "HEAD"])
    async def root(request: Request) -> dict:
        """What a client's first probe finds (Claude Code sends `HEAD /`): the served model."""
        return {"status": "ok", "model": server_state(request).model_id}

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        state = server_state(request)
        ok = state.worker.accepting
        body = {"status": "ok" if ok else "shutting_down", "model": state.model_id,
                "kernels": state.model.kernels, "queue_length": state.worker.queue_length}
        return JSONResponse(body, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        m = server_state(request).metrics
        return Response(m.render(), media_type=m.content_type)

    @app.get("/v1/models")
    @app.get("/models")  # for clients whose base URL lacks /v1
    async def models(request: Request) -> dict:
        return {"object": "list", "data": [_model_card(server_state(request))]}

    @app.post("/completions")
    async def completions(request: Request, body: dict[str, Any] = Body()) -> Response:
        """OpenAI's completions for clients whose base URL lacks /v1, and llama.cpp's alias of
        its `/completion`: a body that names a `model` is OpenAI's (its API requires one and its
        SDKs always send it), one that names none is llama.cpp's (its clients send none)."""
        schema, answer = ((CompletionRequest, openai_api.completions) if "model" in body else
                          (CompletionBody, llamacpp_api.completion))
        try:
            parsed = schema.model_validate(body)
        except ValidationError as e:  # answered as FastAPI answers a route's own body
            raise RequestValidationError(e.errors()) from None
        return await answer(parsed, request)

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> dict:
        state = server_state(request)
        state.check_model(model_id)
        return _model_card(state)


def _model_card(state: ServerState) -> dict:
    return {"id": state.model_id, "object": "model", "created": state.created,
            "owned_by": "specdecode", "context_length": state.model.context_length}
