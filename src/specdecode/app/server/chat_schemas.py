"""A conversation as OpenAI's chat completions carry it (messages, an assistant's tool calls, tool
results, function tools), for the chat request (`openai_schemas`) and for llama.cpp's
`/apply-template`, which templates one without generating.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from .schema_base import Strict, text_content


class FunctionCall(Strict):
    name: str
    arguments: str  # JSON text


class ToolCallMessage(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Any = ""  # a string, or a list of {"type": "text", "text": ...} parts
    tool_calls: list[ToolCallMessage] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool result's call (the template orders results by turn)
    # an assistant turn's reasoning, as vLLM and llama.cpp send it back: templates of reasoning
    # models write it (others leave it out)
    reasoning_content: str | None = None

    def to_template(self) -> dict:
        """The message as chat templates take it."""
        out = {"role": self.role, "content": self.content}
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    @field_validator("content")
    @classmethod
    def _text_only(cls, content: Any) -> str:
        return "" if content is None else text_content(content)


class FunctionDefinition(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments
    strict: bool | None = None  # calls constrained by the grammar are always valid


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class ConversationRequest(Strict):
    """llama.cpp's `/apply-template`: a chat request's conversation and tools, templated only."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False

