"""Request bodies of OpenAI's Responses API (`/v1/responses`), as the Codex CLI, the Agents SDK
and the AI SDK send them, validated as strictly as the chat bodies (`schemas`): every field is
honoured or refused by name.

Honoured: `input` (a string, or items: messages of any role, `function_call`,
`function_call_output` with string or text-part output), `instructions`, function `tools`,
`tool_choice`, `parallel_tool_calls`, `text.format` (json_schema and json_object through the
grammar path), `max_output_tokens`, `temperature`, `top_p`, `store` and `previous_response_id`
(`responses_api.Store`), `metadata` (echoed). Accepted and not needed: `include` (nothing beyond
the output is kept), `reasoning` and `reasoning` input items (the served models do not reason),
`prompt_cache_key` (prompts' caches are kept anyway), `text.verbosity`, `service_tier`, `user`,
`safety_identifier`, `client_metadata` (the Codex CLI's), `truncation: "disabled"`. Tools of
other types (web search, file search, shells, custom tools, the Codex CLI's namespaces) are not
described to the model, which cannot call them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .schema_base import Number, SpeculativeOptions, Strict

_TEXT_PARTS = ("input_text", "output_text", "text")


def _text(content: Any, where: str) -> str:
    """A string, or text parts joined (input_text, output_text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") in _TEXT_PARTS
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    kinds = sorted({str(p.get("type")) for p in content if isinstance(p, dict)}
                   - set(_TEXT_PARTS)) if isinstance(content, list) else []
    raise ValueError(f"{where} must be a string or text parts (input_text, output_text)"
                     + (f"; parts of type {', '.join(kinds)} are not supported" if kinds else ""))


def _item(item: Any) -> dict | None:
    """One input item as the chat templates take it (None: an item with nothing to render)."""
    if isinstance(item, dict):
        item = {k: v for k, v in item.items() if v is not None}
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if kind == "message" and item.get("role") in ("user", "assistant", "system", "developer"):
        role = "system" if item["role"] == "developer" else item["role"]
        return {"role": role, "content": _text(item.get("content", ""), "a message's content")}
    if kind == "function_call" and all(isinstance(item.get(k), str)
                                       for k in ("call_id", "name", "arguments")):
        return {"role": "assistant", "content": "", "tool_calls": [{
            "id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}]}
    if kind == "function_call_output" and isinstance(item.get("call_id"), str):
        return {"role": "tool", "tool_call_id": item["call_id"],
                "content": _text(item.get("output", ""), "a function_call_output's output")}
    if kind == "reasoning":  # none is written here; a client may send back another's
        return None
    if kind in ("message", "function_call", "function_call_output"):
        raise ValueError(f"a {kind} item has missing or mistyped fields")
    raise ValueError(f"input items of type {kind!r} are not supported by this server "
                     "(message, function_call, function_call_output and reasoning are)")


def merged(messages: list[dict]) -> list[dict]:
    """A function call after an assistant turn (its text, or another call) joins that turn."""
    out: list[dict] = []
    for m in messages:
        if m.get("tool_calls") and out and out[-1]["role"] == "assistant":
            out[-1] = {**out[-1], "tool_calls": (out[-1].get("tool_calls") or [])
                       + m["tool_calls"]}
        else:
            out.append(m)
    return out


class TextFormat(Strict):
    type: Literal["text", "json_schema", "json_object"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema(self) -> "TextFormat":
        if (self.type == "json_schema") != (self.schema_ is not None):
            raise ValueError('schema is required with type "json_schema" and only then')
        return self


class TextConfig(Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # one length is all it writes


class ResponsesRequest(Strict):
    model: str | None = None
    input: Any  # a string, or a list of items
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None  # "none", "auto", "required", or {"type": "function", "name"}
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: Number = Field(1.0, ge=0, le=2)
    top_p: Number = Field(1.0, gt=0, le=1)
    store: bool = True
    previous_response_id: str | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    client_metadata: dict[str, Any] | None = None  # the Codex CLI's turn record
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: Literal["auto", "default", "flex", "priority"] | None = None
    truncation: Literal["disabled"] | None = None
    speculative: SpeculativeOptions | None = None  # extension, as on the chat routes
    # llama.cpp's telemetry, as on the chat routes: the prompt's read in response.in_progress
    # events before the first token; llama.cpp's timings on each text delta and the end
    return_progress: bool = False
    timings_per_token: bool | None = None

    @field_validator("input")
    @classmethod
    def _items(cls, value: Any) -> list[dict]:
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        if not isinstance(value, list) or not value:
            raise ValueError("input must be a string or a non-empty list of items")
        return merged([m for m in map(_item, value) if m is not None])

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[dict] | None) -> list[dict] | None:
        for tool in tools or ():
            if tool.get("type") == "function" and not (
                    isinstance(tool.get("name"), str)
                    and set(tool) <= {"type", "name", "description", "parameters", "strict"}):
                raise ValueError("a function tool needs a name, and takes description, "
                                 "parameters and strict")
        return tools

    @model_validator(mode="after")
    def _choice(self) -> "ResponsesRequest":
        choice, names = self.tool_choice, {t["name"] for t in self.functions}
        if isinstance(choice, dict):
            if choice.get("type") != "function" or choice.get("name") not in names:
                raise ValueError("tool_choice names no function tool of the request")
        elif choice not in (None, "none", "auto", "required"):
            raise ValueError('tool_choice must be "none", "auto", "required" or '
                             '{"type": "function", "name": ...}')
        if self.forced_tool_call and self.output_format is not None:
            raise ValueError("a required tool call cannot also follow text.format")
        return self

    @property
    def functions(self) -> list[dict]:
        return [t for t in self.tools or () if t.get("type") == "function"]

    @property
    def tools_in_prompt(self) -> list[dict] | None:
        """The function tools as the chat templates describe tools (none for "none")."""
        if self.tool_choice == "none" or not self.functions:
            return None
        return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
                for t in self.functions]

    @property
    def forced_tool_call(self) -> tuple[str | None] | None:
        if self.tool_choice == "required":
            return (None,)
        return (self.tool_choice["name"],) if isinstance(self.tool_choice, dict) else None

    @property
    def output_format(self) -> tuple[str, Any] | None:
        fmt = self.text.format if self.text else None
        if fmt is None or fmt.type == "text":
            return None
        return ("json_object", None) if fmt.type == "json_object" else ("json_schema",
                                                                        fmt.schema_)
