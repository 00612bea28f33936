"""llama.cpp's `/infill` dialect, for the editor plugins written for it (llama.vscode, llama.vim):
the prompt from its fields (fill-in-the-middle prompts are `models.fim`'s), served as llama.cpp's
completions are (`llamacpp_answers`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...models import LoadedModel
from .llamacpp_answers import engine_request, serve, unread
from .llamacpp_schemas import InfillRequest
from .state import fim_ends, server_state

router = APIRouter()


class FimPrompt:
    """A prepare function (`job.Job`) for a fill-in-the-middle prompt, cut to `limit` tokens;
    remembers whether it was cut."""

    def __init__(self, model: LoadedModel, prefix: str, suffix: str, before_cursor: str = "",
                 extra: list[tuple[str, str]] = (), limit: int | None = None) -> None:
        self.model, self.limit, self.truncated = model, limit, False
        self.parts = (prefix, suffix, before_cursor, list(extra))

    def __call__(self) -> list[int]:
        ids, self.truncated = self.model.encode_fim(*self.parts, limit=self.limit)
        return ids


@router.post("/infill")
async def infill(body: InfillRequest, request: Request) -> Response:
    """llama.cpp's /infill: `n_cmpl` completions of the middle, whole (one object, an
    array for several) or streamed as llama.cpp streams them."""
    state = server_state(request)
    if body.model:
        state.check_model(body.model)
    stops = fim_ends(state)
    context, limit = state.model.context_length, body.token_limit
    if limit == 0:
        return unread(state, body, 1)
    prompt = FimPrompt(state.model, body.input_prefix, body.input_suffix, body.prompt,
                       [(f.filename, f.text) for f in body.input_extra],
                       limit=context - (limit or context // 4))
    asked = await engine_request(state, body, [prompt], stops)
    return await serve(request, state, body, asked, lambda: prompt.truncated, listed=False)
