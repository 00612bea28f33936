"""llama.cpp's own routes, for the tools written against its server: `/completion` (its native
completions: prompts as text or tokens, its sampling defaults and fields, `n_probs`, timings),
`/tokenize`, `/detokenize`, `/apply-template`, `/props` and, with `serve --slots`, `/slots`.
`/infill` is `infill`'s; the OpenAI routes take llama.cpp's extension fields
(`llamacpp_schemas.LlamaCppExtensions`).

Errors are in OpenAI's shape, as llama.cpp's server writes them on these routes too.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...models.loader import gguf_file
from .errors import APIError
from .llamacpp_answers import engine_request, serve, unread
from .llamacpp_format import settings
from .llamacpp_schemas import CompletionBody, DetokenizeRequest, LlamaCppRequest, TokenizeRequest
from .chat_schemas import ConversationRequest
from .state import chat_text, ids_text, raw_prompt, server_state

router = APIRouter()


@router.post("/completion")
async def completion(body: CompletionBody, request: Request) -> Response:
    """`n_cmpl` completions of each prompt, whole (one object; a list for several prompts or
    completions) or streamed as llama.cpp streams them."""
    state = server_state(request)
    if body.model:
        state.check_model(body.model)
    if body.token_limit == 0:
        return unread(state, body, len(body.prompts), body.batch)
    asked = await engine_request(state, body, [raw_prompt(state.model, p) for p in body.prompts])
    return await serve(request, state, body, asked, lambda: False, listed=body.batch)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict:
    """Token ids of the text; `with_pieces`: each with its text (its bytes, where they are no
    UTF-8 text on their own)."""
    model = server_state(request).model

    def run() -> dict:
        ids = model.tokenize(body.content, body.add_special, body.parse_special)
        if not body.with_pieces:
            return {"tokens": ids}
        return {"tokens": [{"id": i, "piece": _piece(b)}
                           for i, b in zip(ids, model.token_bytes(ids))]}

    return await server_state(request).worker.call(run)


def _piece(data: bytes) -> str | list[int]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return list(data)


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict:
    """The text of token ids, special tokens written out."""
    state = server_state(request)
    ids = raw_prompt(state.model, body.tokens)
    return {"content": await state.worker.call(lambda: ids_text(state.model, ids()))}


@router.post("/apply-template")
async def apply_template(body: ConversationRequest, request: Request) -> dict:
    """The chat template's prompt for a conversation, as a chat completion would read it."""
    state = server_state(request)
    tool_list = [t.model_dump(exclude_none=True) for t in body.tools or ()] or None
    text = chat_text(state, [m.to_template() for m in body.messages], tool_list,
                     body.continue_final_message, body.add_generation_prompt)
    return {"prompt": await state.worker.call(text)}



@router.get("/props")
async def props(request: Request) -> dict:
    """What llama.cpp's clients read of the server: the model, its context, the chat template
    and /completion's default settings."""
    state = server_state(request)
    model = state.model
    defaults = LlamaCppRequest()
    return {"default_generation_settings": {"n_ctx": model.context_length,
                                            "params": settings(defaults, model.context_length)},
            "total_slots": state.worker.max_batch, "model_alias": state.model_id,
            # the GGUF file, as llama.cpp's clients expect (else the model's directory)
            "model_path": str(gguf_file(model.name) or model.source),
            "chat_template": getattr(model.tokenizer, "chat_template", None) or "",
            "modalities": {"vision": False, "audio": False},
            "build_info": state.fingerprint, "is_sleeping": False}


@router.get("/slots")
async def slots(request: Request) -> list[dict]:
    """llama.cpp's slots: the batch's places (`--max-batch`), the choices decoding now first;
    a choice's context is the model's whole (there is no per-slot split). Off unless `--slots`."""
    state = server_state(request)
    if not state.slots:
        raise APIError(501, "the /slots endpoint is off: start the server with --slots",
                       type="not_supported_error")
    running = await state.worker.call(state.worker.running)
    return [{"id": i, "n_ctx": state.model.context_length, "is_processing": i < len(running),
             **(running[i] if i < len(running) else {})} for i in range(state.worker.max_batch)]
