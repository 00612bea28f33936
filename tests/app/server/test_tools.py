"""The tool-call protocol pieces: blocks parsed into OpenAI's calls, streamed text split into
prose and whole calls however it is cut, answers of bare calls (Qwen2.5-Coder's habit) read as
calls only when they are nothing else, the grammar of required calls accepting exactly
well-formed calls, and the template's view of earlier calls."""

from __future__ import annotations

import json

import pytest

from specdecode.app.server import tools
from specdecode.app.server.tools import (CallStream, ToolCall, call_grammar, markers, parse,
                                         template_messages)
from specdecode.errors import InvalidParameterError
from specdecode.grammars import GrammarCompiler
from model_fixtures import accepts

BARE = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
CALL = "<tool_call>\n" + BARE + "\n</tool_call>"
NAMES = ("get_weather", "get_time")
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


def test_a_block_in_the_doubled_braces_of_qwens_template_is_a_call():
    content, calls = parse(CALL.replace(BARE, "{" + BARE + "}"))
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})]


def test_a_malformed_block_is_prose_and_no_call():
    text = "<tool_call>\n{not json}\n</tool_call>"
    assert parse(text) == (text, [])
    assert parse("just text") == ("just text", [])


@pytest.mark.parametrize("names", [(), NAMES], ids=["no-names", "names"])
@pytest.mark.parametrize("cut", [1, 3, 7, 11])
def test_streamed_text_splits_into_prose_and_whole_calls_however_it_is_cut(cut, names):
    text = "Sure <tool" + " thing. " + CALL + "\n" + CALL + " done"
    stream, parts = CallStream(names), []
    for i in range(0, len(text), cut):
        parts += stream.push(text[i:i + cut])
    parts += stream.flush()
    calls = [p for p in parts if isinstance(p, ToolCall)]
    prose = "".join(p for p in parts if isinstance(p, str))
    assert [c.index for c in calls] == [0, 1] and stream.calls == 2
    assert prose == "Sure <tool thing. \n done"


@pytest.mark.parametrize("text", [
    BARE, "  " + BARE + "\n", "```json\n" + BARE + "\n```", "```\n" + BARE + "\n```",
    "[" + BARE + ", " + BARE.replace("Paris", "Rome") + "]",
    BARE + "\n" + BARE.replace("Paris", "Rome"),
    "{" + BARE + "}",  # in the doubled braces of Qwen2.5's template
    "<tools>\n" + BARE + "\n</tools>"])
def test_an_answer_of_bare_calls_naming_declared_tools_is_those_calls(text):
    content, calls = parse(text, NAMES)
    assert content is None and calls
    assert all(c.name == "get_weather" for c in calls)
    assert json.loads(calls[0].arguments) == {"city": "Paris"}


@pytest.mark.parametrize("text", [
    "Here it is: " + BARE,  # prose around it
    BARE + " and then some text",
    BARE.replace("get_weather", "get_wether"),  # a tool not declared
    '{"city": "Paris"}',  # JSON, not a call
    "```python\nprint(" + BARE + ")\n```",
    "```json\n" + BARE + "\n```\nDone.",
    BARE[:-1]])  # cut
def test_anything_else_stays_text(text):
    assert parse(text, NAMES) == (text, [])


def test_bare_calls_need_declared_tools():
    assert parse(BARE) == (BARE, [])


@pytest.mark.parametrize("cut", [1, 4, 9])
@pytest.mark.parametrize("answer", ["```json\n" + BARE + "\n```", BARE + "\n" + BARE,
                                    "{" + BARE + "}", "<tools>\n" + BARE + "\n</tools>"])
def test_a_streamed_answer_of_bare_calls_is_held_and_sent_as_calls(cut, answer):
    stream, parts = CallStream(NAMES), []
    for i in range(0, len(answer), cut):
        parts += stream.push(answer[i:i + cut])
    assert parts == []  # nothing sent before the end
    parts += stream.flush()
    assert all(isinstance(p, ToolCall) for p in parts) and parts
    assert [p.index for p in parts] == list(range(len(parts))) and stream.calls == len(parts)


@pytest.mark.parametrize("answer", [
    "```python\nprint('hi')\n" + "x = 1\n" * 20 + "```",
    '{"city": "Paris", "note": "' + "long " * 40 + '"}\nMore text.',
    "Sunny in Paris."])
def test_a_streamed_answer_that_is_not_bare_calls_streams_as_text_before_its_end(answer):
    stream, parts = CallStream(NAMES), []
    for i in range(0, len(answer), 5):
        parts += stream.push(answer[i:i + 5])
    sent_before_end = "".join(parts)
    parts += stream.flush()
    assert "".join(parts) == answer
    assert len(sent_before_end) >= len(answer) - 12


@pytest.mark.parametrize("cut", [1, 5])
def test_an_answer_opening_with_a_block_streams_its_calls_as_they_close(cut):
    stream, parts = CallStream(NAMES), []
    for i in range(0, len(CALL), cut):
        parts += stream.push(CALL[i:i + cut])
    assert [p.name for p in parts] == ["get_weather"]  # before the end


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
    assert accepts(grammar, tokenizer, CALL + "\n")  # a newline may end it, not two
    assert not accepts(grammar, tokenizer, CALL + "\n\n")
    assert not accepts(grammar, tokenizer, CALL.replace('"city"', '"town"'))
    assert not accepts(grammar, tokenizer, CALL.replace("get_weather", "get_wether"))
    assert not accepts(grammar, tokenizer, "It is sunny.")
    for parallel in (False, True):  # a named function is called once (as OpenAI calls it)
        single = compiler.lark(call_grammar(TOOLS, "get_time", parallel, marks))
        assert accepts(single, tokenizer, time_call)
        assert not accepts(single, tokenizer, CALL)
        assert not accepts(single, tokenizer, time_call + "\n" + time_call)


def test_a_named_function_outside_the_tools_is_refused():
    with pytest.raises(InvalidParameterError, match="not among the tools"):
        call_grammar(TOOLS, "get_wether", True, ('"<tool_call>"', '"</tool_call>"'))


def test_a_template_without_tools_is_told_them_and_their_calls_and_results_become_text():
    fn = {"name": "get_weather", "parameters": {"type": "object"}}
    messages = tools.template_messages([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "a"},
        {"role": "tool", "content": "rain", "tool_call_id": "b"}])
    out = tools.described(messages, [{"type": "function", "function": fn}])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\n") and json.dumps(fn) in out[0]["content"]
    assert out[2]["content"] == ('<tool_call>\n{"name": "get_weather", "arguments": {"city": '
                                 '"Paris"}}\n</tool_call>')
    assert tools.parse(out[2]["content"], ["get_weather"])[1][0].name == "get_weather"
    assert out[3]["content"] == ("<tool_response>\nsunny\n</tool_response>\n"
                                 "<tool_response>\nrain\n</tool_response>")

