"""Tool calls in OpenAI's shape, through the model's own chat template.

Templates that describe tools the Hermes way (Qwen2.5, Qwen3, Hermes: the template itself writes
`<tool_call>` into the prompt) have the model answer

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

one block per call. The server renders `tools` and the conversation's earlier calls and results
with that template, parses the blocks of the answer into `tool_calls`, and, for `tool_choice`
"required" or a named function, constrains the answer with a grammar built from the functions'
JSON-schema parameters, so the call is always well formed. A model whose template has no tool
format gets a 400.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidParameterError
from ...grammars import JSON_OPTIONS

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


NO_TOOLS = ("this model's chat template describes no tool calls, so tools cannot be served "
            "for it")


def markers(tokenizer: Any) -> tuple[str, str] | None:
    """How a grammar writes the block's opening and closing markers for this tokenizer (None:
    its chat template has no Hermes tool calls). A marker that is one token of its own is
    written as that token (`<[id]>`): grammar engines keep such added tokens apart from text."""
    if OPEN not in (getattr(tokenizer, "chat_template", None) or ""):
        return None
    vocab = tokenizer.get_vocab()
    return tuple(f"<[{vocab[m]}]>" if m in vocab else json.dumps(m) for m in (OPEN, CLOSE))


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as chat templates take them: an assistant's tool-call arguments (a JSON string
    on the wire) as objects, since templates write them with `tojson`."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = call["function"]
                try:
                    arguments = json.loads(fn["arguments"])
                except ValueError:
                    raise InvalidParameterError(
                        f"tool call {call.get('id')!r}: arguments are not JSON") from None
                calls.append({**call, "function": {"name": fn["name"], "arguments": arguments}})
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def call_grammar(tools: list[dict], only: str | None, parallel: bool,
                 marks: tuple[str, str]) -> str:
    """A Lark grammar (llguidance's `%json`) of one or more tool-call blocks (one when not
    `parallel`) between the `markers`, each naming a function of `tools` (only `only` when
    given) with arguments valid against its parameters."""
    functions = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    if not functions:
        raise InvalidParameterError(f"tool_choice names {only!r}, which is not among the tools")
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": f["name"]},
                             "arguments": f.get("parameters") or {"type": "object"}}}
             for f in functions]
    schema = {"x-guidance": JSON_OPTIONS, **(calls[0] if len(calls) == 1 else {"anyOf": calls})}
    repeat = ' ("\\n" call)*' if parallel else ""
    return (f"start: call{repeat}\n"
            f'call: {marks[0]} "\\n" %json {json.dumps(schema)} "\\n" {marks[1]}\n')


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str
    index: int = 0  # its place among the answer's calls

    def to_dict(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


def parse(text: str) -> tuple[str | None, list[ToolCall]]:
    """The answer's prose (None when there is none) and its well-formed tool-call blocks; a
    block that is not a call stays in the prose."""
    calls, prose, at = [], [], 0
    for match in _BLOCK.finditer(text):
        call = _call(match.group(1))
        if call is None:
            continue
        prose.append(text[at:match.start()])
        at = match.end()
        calls.append(call)
    prose.append(text[at:])
    content = "".join(prose).strip()
    return (content or None) if calls else text, calls


def _call(block: str) -> ToolCall | None:
    try:
        obj = json.loads(block)
    except ValueError:
        return None
    if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)
            and isinstance(obj.get("arguments", {}), dict)):
        return None
    return ToolCall(obj["name"], json.dumps(obj.get("arguments", {}), ensure_ascii=False),
                    "call_" + uuid.uuid4().hex[:24])


class CallStream:
    """Splits streamed text into prose deltas and whole tool calls: text that may begin a
    `<tool_call>` block is held until the block closes (then a call) or cannot be one (prose)."""

    def __init__(self) -> None:
        self.held = ""
        self.calls = 0

    def push(self, text: str) -> list[str | ToolCall]:
        self.held += text
        out: list[str | ToolCall] = []
        while self.held:
            start = self.held.find(OPEN)
            if start < 0:  # keep only what could still grow into OPEN
                keep = next((k for k in range(min(len(OPEN) - 1, len(self.held)), 0, -1)
                             if OPEN.startswith(self.held[-k:])), 0)
                cut = len(self.held) - keep
                if cut:
                    out.append(self.held[:cut])
                    self.held = self.held[cut:]
                break
            if start:
                out.append(self.held[:start])
                self.held = self.held[start:]
            end = self.held.find(CLOSE)
            if end < 0:
                break
            block, self.held = self.held[:end + len(CLOSE)], self.held[end + len(CLOSE):]
            _, calls = parse(block)
            for call in calls:
                call.index, self.calls = self.calls, self.calls + 1
            out.extend(calls or [block])
        return [o for o in out if not (isinstance(o, str) and not o)]

    def flush(self) -> str:
        """What is still held at the end: prose."""
        held, self.held = self.held, ""
        return held
