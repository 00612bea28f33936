"""What every route reads of the server: the model, the engine worker, the metrics, and the
checks that do not depend on a dialect (the model's name, the speculative method asked for, the
model's fill-in-the-middle tokens)."""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import Request

from ...drafters import DRAFTERS
from ...core.constraint import Grammar
from ...errors import InvalidParameterError
from . import tools
from ...grammars import GrammarCompiler
from ...models import LoadedModel
from ...models.fim import FimTokens
from .errors import APIError
from .metrics import ServerMetrics
from .schema_base import SpeculativeOptions
from .worker import EngineWorker


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
    aliases: tuple[str, ...] = ()  # other names requests may give ("*": any name)
    slots: bool = False  # whether llama.cpp's GET /slots answers (`serve --slots`)
    compiling: ThreadPoolExecutor = field(  # where grammars compile, beside the engine thread
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="specdecode-grammar"))

    @property
    def fingerprint(self) -> str:
        """OpenAI's `system_fingerprint`: what a seeded answer depends on besides the request
        (the model file, its weight formats, the kernel path and the kernels' build): answers
        under one fingerprint are reproducible (README, what `seed` promises)."""
        return "fp_" + hashlib.sha256(self.model.identity.encode()).hexdigest()[:12]

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in (self.model_id, self.model.name, *self.aliases) \
                and "*" not in self.aliases:
            raise APIError(404, f"The model `{name}` does not exist; this server serves "
                                f"`{self.model_id}`", param="model", code="model_not_found")


def server_state(request: Request) -> ServerState:
    return request.app.state.specdecode


def speculative(spec: SpeculativeOptions | None) -> dict:
    """The request's method and draft caps (None: the server's), as `EngineRequest` fields."""
    method = spec.method if spec else None
    if method is not None and method not in DRAFTERS:
        raise APIError(400, f"unknown speculative method {method!r} (choose from "
                            f"{', '.join(sorted(DRAFTERS))})", param="speculative.method")
    return dict(method=method, max_draft_nodes=spec.max_draft_nodes if spec else None,
                max_draft_depth=spec.max_draft_depth if spec else None)


def fim_ends(state: ServerState) -> frozenset[int]:
    """The tokens that end a middle besides the model's EOS (a 400 for a model without FIM
    tokens)."""
    if state.fim is None:
        raise InvalidParameterError(f"{state.model.name} has no fill-in-the-middle tokens "
                                    "(<|fim_prefix|>, <fim-prefix>, <PRE>, ...): it cannot fill "
                                    "a middle")
    return state.fim.ends


async def compile_grammar(state: ServerState, output_format: tuple[str, Any] | None
                          ) -> Grammar | None:
    """The grammar of ("json_schema", schema), ("gbnf", text), ... (None: free text), compiled on
    a thread of its own (llguidance releases the GIL): a slow schema holds its request only,
    never the engine thread and the requests streaming there."""
    if output_format is None:
        return None
    return await asyncio.get_running_loop().run_in_executor(
        state.compiling, state.grammars.compile, *output_format)


def tool_marks(state: ServerState) -> tuple[str, str]:
    """The model's tool-call markers: its template's, or the text of those the server describes
    to a model whose template has none (`tools.described`)."""
    return state.tool_markers or tools.TEXT_MARKERS


def required_calls(state: ServerState, tool_list: list[dict], forced: tuple[str | None],
                   parallel: bool) -> tuple[str, str]:
    """The output format of an answer that must be tool calls: of `forced`'s one function, or
    of any (None); one or, with `parallel`, several."""
    return "lark", tools.call_grammar(tool_list, *forced, parallel, tool_marks(state))


def chat_prompt(state: ServerState, messages: list[dict], tool_list: list[dict] | None = None,
                continue_final: bool = False) -> Callable[[], list[int]]:
    """A conversation's prompt ids in every dialect, made on the worker thread: the model's chat
    template over `messages` (OpenAI's chat shape), describing `tool_list` (OpenAI's function
    tools; the server describes them for a template that has no tool format), ready for the
    assistant's turn or, with `continue_final`, to continue the last (assistant) message. A model
    without a template is refused: the library's fallback (contents joined) is no chat format a
    client could rely on."""
    model, (messages, tool_list) = state.model, _templated(state, messages, tool_list)
    return lambda: _checked(model).encode_chat(messages, tool_list, continue_final)


def chat_text(state: ServerState, messages: list[dict], tool_list: list[dict] | None = None,
              continue_final: bool = False, generation_prompt: bool = True
              ) -> Callable[[], str]:
    """`chat_prompt`'s text (without `generation_prompt`: the conversation alone)."""
    model, (messages, tool_list) = state.model, _templated(state, messages, tool_list)
    return lambda: _checked(model).chat_text(messages, tool_list, continue_final,
                                             generation_prompt)


def _templated(state: ServerState, messages: list[dict], tool_list: list[dict] | None
               ) -> tuple[list[dict], list[dict] | None]:
    """The messages and the tools the template is given."""
    messages = tools.template_messages(messages)
    if tool_list and state.tool_markers is None:
        return tools.described(messages, tool_list), None
    return messages, tool_list


def _checked(model: LoadedModel) -> LoadedModel:
    if not model.has_chat_template:
        raise InvalidParameterError("this model has no chat template; use /v1/completions")
    return model


def raw_prompt(model: LoadedModel, prompt: str | list[int | str]) -> Callable[[], list[int]]:
    """Prompt ids of a completion (no chat template), made on the worker thread: text with the
    tokenizer's own special tokens (a BOS) and special tokens' spellings read as those tokens,
    or token ids, checked against the vocabulary (an out-of-range id would index past the
    embedding table), with text mixed in as llama.cpp allows (special tokens added only before
    text that comes first)."""

    def prepare() -> list[int]:
        vocab, ids = model.target.vocab_size, []
        for i, part in enumerate([prompt] if isinstance(prompt, str) else prompt):
            if isinstance(part, str):
                ids += model.tokenize(part, add_special=i == 0, parse_special=True)
            elif 0 <= part < vocab:
                ids.append(part)
            else:
                raise InvalidParameterError(f"prompt token ids must be in [0, {vocab})")
        return ids

    return prepare


def ids_text(model: LoadedModel, ids: list[int]) -> str:
    """The text of token ids as the model reads them, special tokens written out (on the worker
    thread)."""
    return b"".join(model.token_bytes(ids)).decode("utf-8", "replace")

