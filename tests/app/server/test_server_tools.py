"""Tool calls with the official `openai` client against the server on a model whose chat template
has tools (Qwen2.5-Coder-0.5B): `tool_choice` "required" and a named function always give valid
calls (checked with jsonschema against the function's parameters), streamed as OpenAI streams
them; with "auto" the model's calls written without the template's tags (in a json fence or
bare, as Qwen2.5-Coder writes them) are calls too; a round trip (call, tool result, answer); an
unknown function is a 400."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from server_helpers import running

from specdecode.app.server import create_app
from specdecode.models import load_model

pytestmark = pytest.mark.real_model
MODEL = "qwen2.5-coder-0.5b"
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string"},
                                            "max_results": {"type": "integer"}},
          "required": ["query"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                           "description": "The current weather in a city"}},
         {"type": "function", "function": {"name": "search_web", "parameters": SEARCH,
                                           "description": "Search the web"}}]
SCHEMAS = {"get_weather": WEATHER, "search_web": SEARCH}
PROMPTS = ["What is the weather in Paris?", "Is it raining in Tokyo right now, in fahrenheit?",
           "Find recent news about the Mars rover.", "How warm is it in Cairo today?",
           "Look up the population of Iceland, three results at most."]


@pytest.fixture(scope="module")
def client():
    with running(create_app(load_model(MODEL), max_queue=16)) as srv:
        with openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=300) as c:
            yield c


def ask(client, content, **kwargs):
    """One call a turn unless asked otherwise."""
    kwargs = {"parallel_tool_calls": False, "max_tokens": 96, **kwargs}
    return client.chat.completions.create(model=MODEL, temperature=0,
                                          messages=[{"role": "user", "content": content}],
                                          tools=TOOLS, **kwargs)


def assert_valid(calls, names=tuple(SCHEMAS)):
    assert calls
    for call in calls:
        assert call.type == "function" and call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_required_gives_a_valid_call(client, prompt):
    resp = ask(client, prompt, tool_choice="required")
    assert resp.choices[0].finish_reason == "tool_calls"
    assert resp.choices[0].message.content is None
    assert_valid(resp.choices[0].message.tool_calls)


@pytest.mark.parametrize("prompt", [PROMPTS[0], PROMPTS[3]])
def test_with_parallel_calls_allowed_a_question_of_one_call_gets_one(client, prompt):
    # the model writes a newline after its last block before it stops: a grammar that took a
    # newline only before another block made it call on (Paris, London, Tokyo, ...) until cut
    resp = ask(client, prompt, tool_choice="required", parallel_tool_calls=True)
    assert resp.choices[0].finish_reason == "tool_calls"
    assert len(resp.choices[0].message.tool_calls) == 1
    assert_valid(resp.choices[0].message.tool_calls)


def test_a_call_cut_by_max_tokens_stays_text(client):
    resp = ask(client, PROMPTS[0], tool_choice="required", max_tokens=12)
    assert resp.choices[0].finish_reason == "length"  # the output as is: the cut block is text
    assert not resp.choices[0].message.tool_calls
    assert resp.choices[0].message.content.startswith("<tool_call>")


def test_a_named_function_is_the_one_called_once(client):
    resp = ask(client, PROMPTS[0],
               tool_choice={"type": "function", "function": {"name": "search_web"}})
    calls = resp.choices[0].message.tool_calls
    assert len(calls) == 1
    assert_valid(calls, names=("search_web",))


def streamed_calls(chunks) -> list[dict]:
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    return [calls[i] for i in sorted(calls)]


def test_streamed_calls_are_the_calls_of_the_whole_answer(client):
    whole = ask(client, PROMPTS[0], tool_choice="required").choices[0].message.tool_calls
    chunks = list(ask(client, PROMPTS[0], tool_choice="required", stream=True))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert streamed_calls(chunks) == [
        {"name": c.function.name, "arguments": c.function.arguments} for c in whole]


@pytest.mark.parametrize("prompt", PROMPTS[:2], ids=["fenced", "bare"])
def test_auto_reads_calls_written_without_the_templates_tags(client, prompt):
    # this model answers these two with the call alone, in a json fence and bare: text before
    # such answers were read as calls
    resp = ask(client, prompt, tool_choice="auto")
    assert resp.choices[0].finish_reason == "tool_calls"
    assert resp.choices[0].message.content is None
    assert_valid(resp.choices[0].message.tool_calls, names=("get_weather",))
    chunks = list(ask(client, prompt, tool_choice="auto", stream=True))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert [c["arguments"] for c in streamed_calls(chunks)] == [
        c.function.arguments for c in resp.choices[0].message.tool_calls]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_round_trip_ends_in_an_answer(client, stream):
    first = ask(client, PROMPTS[0], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    messages = [{"role": "user", "content": PROMPTS[0]},
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id,
                 "content": json.dumps({"temperature": 18, "condition": "sunny"})}]
    resp = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=48,
                                          messages=messages, tools=TOOLS, tool_choice="none",
                                          stream=stream)
    if stream:
        chunks = list(resp)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = chunks[-1].choices[0].finish_reason
    else:
        text, finish = resp.choices[0].message.content, resp.choices[0].finish_reason
    assert text.strip() and finish in ("stop", "length")


def test_an_unknown_named_function_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="not among the tools"):
        ask(client, PROMPTS[0], tool_choice={"type": "function", "function": {"name": "nope"}})


@pytest.mark.real_model
def test_a_model_whose_template_has_no_tools_is_told_them_and_its_calls_are_read(default_model):
    """SmolLM2's template has no tool format: the tools are described in a system turn (as
    llama.cpp's server falls back to a generic format), a required call is constrained to a
    valid block and read as a call, and a round trip's call and result are written as text."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    question = [{"role": "user", "content": "Weather in Paris?"}]
    with running(create_app(default_model)) as srv, openai.OpenAI(
            base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
        ask = dict(model=c.models.list().data[0].id, tools=[weather], temperature=0,
                   max_tokens=40)
        called = c.chat.completions.create(messages=question, tool_choice="required", **ask)
        assert called.choices[0].message.tool_calls, (called.choices[0], called.usage)
        (call,) = called.choices[0].message.tool_calls
        assert call.function.name == "get_weather"
        assert set(json.loads(call.function.arguments)) == {"city"}
        turns = [*question, called.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        answer = c.chat.completions.create(messages=turns, **ask)
        assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
        counted = httpx.post(srv.v1 + "/chat/completions/input_tokens", json={
            "messages": turns, "tools": [weather]}).json()["input_tokens"]
    assert counted == answer.usage.prompt_tokens > called.usage.prompt_tokens
