"""Tool calls in OpenAI's shape, through the model's own chat template.

Templates that describe tools the Hermes way (Qwen2.5, Qwen3, Hermes: the template itself writes
`<tool_call>` into the prompt) have the model answer

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

one block per call. The server renders `tools` and the conversation's earlier calls and results
with that template, parses the blocks of the answer into `tool_calls`, and, for `tool_choice`
"required" or a named function, constrains the answer with a grammar built from the functions'
JSON-schema parameters, so the call is always well formed (a named function: called once). A
model whose template has no tool format (SmolLM2, Gemma 3) gets the same blocks described in a
system turn of the server's own (`described`), as llama.cpp's server falls back to a generic
format: its calls are read, and constrained, the same way.

Qwen2.5-Coder, though its template asks for those blocks, often answers a tool question with the
call alone: bare, in a ```json fence or in <tools> tags (vLLM's bug report 32926 measures it;
llama.cpp's server takes bare calls too). An answer that is nothing but such calls, each naming a
declared tool, is read as those calls; anything else around them, or a name not declared, leaves
it text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidParameterError
from ...grammars import JSON_OPTIONS
from . import relay

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


# the markers as a grammar writes them in text, for a template without them (`described`)
TEXT_MARKERS = (json.dumps(OPEN), json.dumps(CLOSE))


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


def described(messages: list[dict], tool_list: list[dict]) -> list[dict]:
    """The conversation (`template_messages`' shape) for a template that has no tool format: the
    tools and the block format described in a system turn, earlier calls written into their
    assistant turns as blocks, results as user turns of `<tool_response>` blocks (consecutive
    user turns joined: some templates want turns to alternate)."""
    functions = "\n".join(json.dumps(t["function"]) for t in tool_list)
    intro = ("You can call functions to answer. They are, as JSON schemas:\n" + functions
             + "\nTo call functions, answer with nothing but one block per call:\n" + OPEN
             + '\n{"name": <function name>, "arguments": <arguments object>}\n' + CLOSE
             + "\nTheir results come back in <tool_response> blocks.")
    system = [m for m in messages[:1] if m["role"] in ("system", "developer")]
    rest = messages[len(system):]
    out = [{"role": "system", "content": "\n\n".join(
        [*(m["content"] for m in system if m["content"]), intro])}]
    for m in rest:
        if m["role"] == "tool":
            m = {"role": "user",
                 "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
        elif m.get("tool_calls"):
            blocks = [f"{OPEN}\n{json.dumps(_call_object(c))}\n{CLOSE}" for c in m["tool_calls"]]
            m = {"role": "assistant", "content": "\n".join(filter(None, [m["content"], *blocks]))}
        if out[-1]["role"] == m["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + m["content"]}
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def _call_object(call: dict) -> dict:
    return {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}


def call_grammar(tools: list[dict], only: str | None, parallel: bool,
                 marks: tuple[str, str]) -> str:
    """A Lark grammar (llguidance's `%json`) of one or more tool-call blocks (one when not
    `parallel`, or when a function is named: `only`, as OpenAI calls a named function once)
    between the `markers`, each naming a function of `tools` with arguments valid against its
    parameters."""
    functions = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    if not functions:
        raise InvalidParameterError(f"tool_choice names {only!r}, which is not among the tools")
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": f["name"]},
                             "arguments": f.get("parameters") or {"type": "object"}}}
             for f in functions]
    schema = {"x-guidance": JSON_OPTIONS, **(calls[0] if len(calls) == 1 else {"anyOf": calls})}
    repeat = ' ("\\n" call)*' if parallel and only is None else ""
    # a newline may end the answer: Qwen2.5-Coder writes one after its last block before it
    # stops, and a grammar that took a newline only before another block made it call on and on
    return (f"start: call{repeat} \"\\n\"?\n"
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


def parse(text: str, names: Collection[str] = ()) -> tuple[str | None, list[ToolCall]]:
    """The answer's prose (None when there is none) and its well-formed tool-call blocks; a
    block that is not a call stays in the prose. Without blocks, an answer of bare calls naming
    tools of `names` (`bare_calls`) is those calls."""
    if OPEN not in text:
        bare = bare_calls(text, names)
        if bare:
            return None, bare
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
        return _call_of(json.loads(_unbraced(block.strip())))
    except ValueError:
        return None


def _unbraced(text: str) -> str:
    """A call in doubled braces without its outer pair: Qwen2.5's template shows the call as
    `{{"name": <function-name>, "arguments": <args-json-object>}}` (a format string's escaped
    braces, printed as they are), and models answer in kind."""
    return text[1:-1] if text.startswith("{{") and text.endswith("}}") else text


def _call_of(obj: Any) -> ToolCall | None:
    if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)
            and isinstance(obj.get("arguments", {}), dict)):
        return None
    return ToolCall(obj["name"], json.dumps(obj.get("arguments", {}), ensure_ascii=False),
                    relay.new_id("call_")[:29])  # OpenAI's length


# what such an answer may wrap its calls in: a json fence, or the <tools> tags the template puts
# around the tools' descriptions
_WRAPPERS = (re.compile(r"```(?:json)?[ \t]*\n(.*?)\s*```", re.S),
             re.compile(r"<tools>\s*(.*?)\s*</tools>", re.S))
_DECODER = json.JSONDecoder()


def bare_calls(text: str, names: Collection[str]) -> list[ToolCall]:
    """The calls of an answer that is nothing but calls naming tools of `names`: JSON objects
    of the call's shape, one after another or in one array: bare, in one ```json fence or in
    <tools> tags; [] for any other answer."""
    body = text.strip()
    for wrapper in _WRAPPERS:
        wrapped = wrapper.fullmatch(body)
        if wrapped:
            body = wrapped.group(1)
            break
    body, values, at = _unbraced(body.strip()), [], 0
    while at < len(body):
        try:
            value, at = _DECODER.raw_decode(body, at)
        except ValueError:
            return []
        values += value if isinstance(value, list) else [value]
        while at < len(body) and body[at] in " \t\r\n":
            at += 1
    calls = []
    for value in values:
        call = _call_of(value)
        if call is None or call.name not in names:
            return []
        calls.append(call)
    return calls


def _opens_bare_call(held: str, names: Collection[str]) -> bool | None:
    """Whether an answer beginning with `held` opens with a bare call naming a tool of `names`
    (`bare_calls`): True once its first object is one, False once it cannot be, None while
    not yet known."""
    body = held.lstrip()
    if body.startswith("`"):  # a fence: its first line must be one of a json fence
        line, newline, rest = body.partition("\n")
        if not newline:
            return None if "```json".startswith(line.rstrip()) else False
        if line.strip() not in ("```", "```json"):
            return False
        body = rest.lstrip()
    elif body.startswith("<"):  # <tools> (where <tool_call> parts, the blocks' parser takes it)
        if not body.startswith("<tools>"):
            return None if "<tools>".startswith(body) else False
        body = body[len("<tools>"):].lstrip()
    if body.startswith(("[", "{{")):
        body = body[1:].lstrip()
    if not body:
        return None
    if not body.startswith("{"):
        return False
    try:
        value, _ = _DECODER.raw_decode(body)
    except ValueError:
        return None  # not whole yet (or never: then the end decides, `CallStream.flush`)
    call = _call_of(value)
    return call is not None and call.name in names


class CallStream:
    """Splits streamed text into prose deltas and whole tool calls: text that may begin a
    `<tool_call>` block is held until the block closes (then a call) or cannot be one (prose).
    With tool `names`, an answer that opens like bare calls (`bare_calls`) is held to its end,
    then sent as those calls, or as text if it is not only calls."""

    def __init__(self, names: Collection[str] = ()) -> None:
        self.held = ""
        self.calls = 0
        self.names = names
        self.bare: bool | None = None if names else False  # the answer is bare calls

    def push(self, text: str) -> list[str | ToolCall]:
        self.held += text
        if self.bare is None:
            self.bare = _opens_bare_call(self.held, self.names)
        if self.bare is not False:
            return []
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

    def flush(self) -> list[str | ToolCall]:
        """What is still held at the end: bare calls, or prose."""
        held, self.held = self.held, ""
        calls = bare_calls(held, self.names) if self.bare is not False else []
        for call in calls:
            call.index, self.calls = self.calls, self.calls + 1
        return calls or [held]
