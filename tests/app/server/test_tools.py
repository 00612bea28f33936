"""The tool-call protocol pieces: blocks parsed into OpenAI's calls, streamed text split into
prose and whole calls however it is cut, the grammar of required calls accepting exactly
well-formed calls, and the template's view of earlier calls."""

from __future__ import annotations

import json

import pytest

from specdecode.app.server.tools import (CallStream, ToolCall, call_grammar, markers, parse,
                                         template_messages)
from specdecode.errors import InvalidParameterError
from specdecode.grammars import GrammarCompiler

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {}, "additionalProperties": False}}}]


def test_parse_turns_blocks_into_calls_and_keeps_the_prose():
    content, calls = parse("Let me check.\n" + CALL + "\n" + CALL.replace("Paris", "Rome"))
    assert content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")


def test_a_malformed_block_is_prose_and_no_call():
    text = "<tool_call>\n{not json}\n</tool_call>"
    assert parse(text) == (text, [])
    assert parse("just text") == ("just text", [])


@pytest.mark.parametrize("cut", [1, 3, 7, 11])
def test_streamed_text_splits_into_prose_and_whole_calls_however_it_is_cut(cut):
    text = "Sure <tool" + " thing. " + CALL + "\n" + CALL + " done"
    stream, parts = CallStream(), []
    for i in range(0, len(text), cut):
        parts += stream.push(text[i:i + cut])
    parts.append(stream.flush())
    calls = [p for p in parts if isinstance(p, ToolCall)]
    prose = "".join(p for p in parts if isinstance(p, str))
    assert [c.index for c in calls] == [0, 1] and stream.calls == 2
    assert prose == "Sure <tool thing. \n done"


def test_earlier_calls_reach_the_template_with_their_arguments_as_objects():
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}]
    out = template_messages(messages)
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    bad = [{**messages[0], "tool_calls": [{"id": "a", "type": "function", "function": {
        "name": "x", "arguments": "{"}}]}]
    with pytest.raises(InvalidParameterError, match="not JSON"):
        template_messages(bad)


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from specdecode.models.loader import _load_tokenizer_and_config, _resolve

    source, _, _ = _resolve("qwen2.5-coder-0.5b")
    tokenizer, config = _load_tokenizer_and_config(source, "qwen2.5-coder-0.5b")
    return tokenizer, config.vocab_size


def accepts(grammar, tokenizer, text: str) -> bool:
    matcher = grammar.matcher()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return all(matcher.accept(t) for t in ids)


@pytest.mark.real_model
def test_the_required_call_grammar_accepts_well_formed_calls_only(qwen_tokenizer):
    tokenizer, vocab = qwen_tokenizer
    marks = markers(tokenizer)
    assert marks is not None and marks[0].startswith("<[")  # one added token: by its id
    compiler = GrammarCompiler(tokenizer, vocab, frozenset([tokenizer.eos_token_id]))
    grammar = compiler.lark(call_grammar(TOOLS, None, True, marks))
    time_call = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    assert accepts(grammar, tokenizer, CALL)
    assert accepts(grammar, tokenizer, CALL + "\n" + time_call)
    assert not accepts(grammar, tokenizer, CALL.replace('"city"', '"town"'))
    assert not accepts(grammar, tokenizer, CALL.replace("get_weather", "get_wether"))
    assert not accepts(grammar, tokenizer, "It is sunny.")
    single = compiler.lark(call_grammar(TOOLS, "get_time", False, marks))
    assert accepts(single, tokenizer, time_call)
    assert not accepts(single, tokenizer, CALL)
    assert not accepts(single, tokenizer, time_call + "\n" + time_call)


def test_a_named_function_outside_the_tools_is_refused():
    with pytest.raises(InvalidParameterError, match="not among the tools"):
        call_grammar(TOOLS, "get_wether", True, ('"<tool_call>"', '"</tool_call>"'))
