"""Request bodies of Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`), as
the `anthropic` SDKs and Claude Code send them, validated as strictly as the OpenAI bodies
(`schemas`): every field is honoured or refused by name.

Honoured: `output_config.format` (a JSON schema the answer follows, through the grammar path),
`temperature`, `top_p` and `top_k` (which older clients send; the default is Anthropic's
temperature 1). Accepted and not needed: `metadata` (a user id for abuse tracking),
`cache_control` on the request, its blocks and tools (every prompt's cache is kept anyway,
`--prompt-cache`), `thinking`, `output_config.effort` and `context_management` (the
served models do not reason: no thinking blocks are written, none to clear), `speed` and `service_tier` (one server, one speed: its
speculation). Refused by name, as every unknown field: `container`, `inference_geo`,
`diagnostics`, `user_profile_id`, `workspace_id`, `mcp_servers` and the like.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .schema_base import Number, SpeculativeOptions, Strict

# more than OpenAI's 4: clients of this dialect send a few stop sequences of their own
MAX_STOP_SEQUENCES = 16


def _text_of(blocks: Any, where: str) -> str:
    """A string, or text blocks joined (a system prompt, a tool result's content)."""
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                        and isinstance(b.get("text"), str) for b in blocks):
        return "".join(b["text"] for b in blocks)
    raise ValueError(f"{where} must be a string or a list of text blocks "
                     '({"type": "text", "text": ...}); other blocks are not supported')


def _block(block: Any) -> dict:
    """One content block, checked: text, tool_use or tool_result (the kinds a text model reads).
    A field sent as null is taken as absent: the SDKs echo a reply's blocks back with their
    unset fields (a tool_use's `caller`, a text's `citations`) as null."""
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if v is not None}
    kind = block.get("type") if isinstance(block, dict) else None
    extra = set(block) - {"type", "cache_control", "citations"} if kind else set()
    if kind == "text" and isinstance(block.get("text"), str) and extra == {"text"}:
        return {"type": "text", "text": block["text"]}
    if kind == "tool_use" and extra == {"id", "name", "input"} \
            and isinstance(block["id"], str) and isinstance(block["name"], str) \
            and isinstance(block["input"], dict):
        return {"type": "tool_use", "id": block["id"], "name": block["name"],
                "input": block["input"]}
    if kind == "tool_result" and isinstance(block.get("tool_use_id"), str) \
            and extra <= {"tool_use_id", "content", "is_error"}:
        content = _text_of(block.get("content", ""), "a tool_result's content")
        return {"type": "tool_result", "tool_use_id": block["tool_use_id"], "content": content}
    # an earlier turn's reasoning, as a client replays it (from a model that reasons): passed
    # to the template as the turn's reasoning_content (templates of models that reason write
    # it); a redacted one has no text to pass
    if kind == "thinking" and isinstance(block.get("thinking"), str) \
            and extra <= {"thinking", "signature"}:
        return {"type": "thinking", "thinking": block["thinking"]}
    if kind == "redacted_thinking" and extra <= {"data"}:
        return {"type": "redacted_thinking"}
    if kind in ("text", "tool_use", "tool_result", "thinking"):
        raise ValueError(f"a {kind} block has missing, extra or mistyped fields")
    raise ValueError(f"content blocks of type {kind!r} are not supported by this server "
                     "(text, tool_use, tool_result and thinking are)")


class Message(Strict):
    role: Literal["user", "assistant", "system"]  # Claude Code sends system turns too
    content: Any  # a string, or a list of content blocks

    @field_validator("content")
    @classmethod
    def _blocks(cls, content: Any) -> list[dict]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise ValueError("content must be a string or a list of content blocks")
        return [_block(b) for b in content]

    def to_template(self) -> list[dict]:
        """The message as chat templates take it: an assistant turn with its tool calls; a user
        turn's tool results, each a tool message, then its text."""
        text = "".join(b["text"] for b in self.content if b["type"] == "text")
        if self.role == "system":
            return [{"role": "system", "content": text}]
        if self.role == "assistant":
            calls = [{"id": b["id"], "type": "function", "function": {
                "name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
                for b in self.content if b["type"] == "tool_use"]
            reasoning = "".join(b["thinking"] for b in self.content if b["type"] == "thinking")
            return [{"role": "assistant", "content": text,
                     **({"tool_calls": calls} if calls else {}),
                     **({"reasoning_content": reasoning} if reasoning else {})}]
        results = [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
                   for b in self.content if b["type"] == "tool_result"]
        return results + ([{"role": "user", "content": text}] if text or not results else [])


class Tool(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    description: str | None = None
    input_schema: dict[str, Any] | None = None  # required unless the tool is deferred
    type: Literal["custom"] | None = None  # Anthropic's own server tools are not run here
    cache_control: dict[str, Any] | None = None
    # not described to the model until a later request sends it undeferred (Claude Code's tool
    # search sends a placeholder so)
    defer_loading: bool = False

    @model_validator(mode="after")
    def _schema(self) -> "Tool":
        if self.input_schema is None and not self.defer_loading:
            raise ValueError("input_schema is required (unless defer_loading is true)")
        return self

    def to_openai(self) -> dict:
        """The tool as the chat templates describe tools (OpenAI's function shape)."""
        function = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


class ToolChoice(Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _named(self) -> "ToolChoice":
        if (self.type == "tool") != (self.name is not None):
            raise ValueError('tool_choice needs a name with type "tool", and only then')
        return self


class JSONOutputFormat(Strict):
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")


class OutputConfig(Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None  # not a reasoner
    format: JSONOutputFormat | None = None


class CountTokensRequest(Strict):
    model: str
    messages: list[Message] = Field(min_length=1)
    system: Any = None  # a string or a list of text blocks
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: dict[str, Any] | None = None

    @field_validator("system")
    @classmethod
    def _system(cls, system: Any) -> str | None:
        return None if system is None else _text_of(system, "system")

    @model_validator(mode="after")
    def _tools_named(self) -> "CountTokensRequest":
        if self.tool_choice is not None and self.tool_choice.type != "none" and not self.tools:
            raise ValueError("tool_choice needs tools")
        names = {t.name for t in self.tools or ()}
        if self.tool_choice is not None and self.tool_choice.name not in names | {None}:
            raise ValueError(f"tool_choice names {self.tool_choice.name!r}, which is not among "
                             "the tools")
        return self

    def template_messages(self) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [t for m in self.messages for t in m.to_template()]

    @property
    def tools_in_prompt(self) -> list[dict] | None:
        """The tools the template describes (none for tool_choice "none")."""
        if not self.tools or (self.tool_choice and self.tool_choice.type == "none"):
            return None
        return [t.to_openai() for t in self.tools if not t.defer_loading] or None

    @property
    def forced_tool_call(self) -> tuple[str | None] | None:
        """(the named tool, or None for any) when the answer must be tool calls."""
        if self.tool_choice is None or self.tool_choice.type in ("auto", "none"):
            return None
        return (self.tool_choice.name,)


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] = Field(default_factory=list, max_length=MAX_STOP_SEQUENCES)
    temperature: Number = Field(1.0, ge=0, le=1)  # Anthropic's default and range; 0 = greedy
    top_p: Number = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # 0: off
    stream: bool = False
    metadata: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None  # edits of thinking blocks: none written
    output_config: OutputConfig | None = None
    speed: Literal["standard", "fast"] | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    speculative: SpeculativeOptions | None = None  # extension, as on the OpenAI routes

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, stops: list[str]) -> list[str]:
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    @model_validator(mode="after")
    def _one_format(self) -> "MessagesRequest":
        if self.forced_tool_call and self.output_format is not None:
            raise ValueError("a required tool call cannot also follow output_config.format")
        return self

    @property
    def output_format(self) -> tuple[str, Any] | None:
        """("json_schema", schema) when the answer must follow one."""
        fmt = self.output_config.format if self.output_config else None
        return None if fmt is None else ("json_schema", fmt.json_schema)

    @property
    def parallel_tool_calls(self) -> bool:
        return not (self.tool_choice and self.tool_choice.disable_parallel_tool_use)
