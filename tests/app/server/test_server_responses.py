"""OpenAI's Responses API through the official `openai` client: the same conversation gives the
same tokens as chat completions, whole and streamed in the API's numbered events; a stored
response continues with `previous_response_id` (its prompt's cache reused) and an unknown id is
a 400; the token limit makes an incomplete response; Codex's request shape is accepted; bad input
is refused by name; function tools (required, named, a round trip with a function_call_output)
on a model with tools."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from server_helpers import assert_openai_error, running

from specdecode.app.server import create_app
from specdecode.models import load_model

QUESTION = "Tell me a story about a fox."


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=16, prefix_cache_bytes=64 << 20)) as srv:
        yield srv


def test_a_response_is_the_chat_completions_answer_to_the_same_conversation(client, model_id):
    reply = client.responses.create(model=model_id, input=QUESTION, instructions="Be terse.",
                                    max_output_tokens=12, temperature=0)
    chat = client.chat.completions.create(model=model_id, max_tokens=12, temperature=0,
                                          messages=[{"role": "system", "content": "Be terse."},
                                                    {"role": "user", "content": QUESTION}])
    assert reply.object == "response" and reply.output_text == chat.choices[0].message.content
    assert [i.type for i in reply.output] == ["message"]
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 12 and reply.usage.model_dump()["speculative"]["tau"] >= 1
    items = client.responses.create(model=model_id, max_output_tokens=12, temperature=0, input=[
        {"role": "developer", "content": "Be terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    assert items.output_text == reply.output_text


def test_the_stream_is_numbered_events_that_assemble_to_the_whole_response(client, model_id):
    whole = client.responses.create(model=model_id, input=QUESTION, max_output_tokens=12,
                                    temperature=0)
    events = list(client.responses.create(model=model_id, input=QUESTION, max_output_tokens=12,
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete" and "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text


def test_a_stored_response_continues_with_its_cache_and_an_unknown_one_is_a_400(client,
                                                                              model_id):
    first = client.responses.create(model=model_id, input=QUESTION, max_output_tokens=8,
                                    temperature=0)
    follow = client.responses.create(model=model_id, input="And then?", max_output_tokens=8,
                                     temperature=0, previous_response_id=first.id)
    chat = client.chat.completions.create(model=model_id, max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And then?"}])
    assert follow.output_text == chat.choices[0].message.content
    assert follow.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 1
    unstored = client.responses.create(model=model_id, input=QUESTION, max_output_tokens=2,
                                       store=False)
    for missing in (unstored.id, "resp_nope"):
        with pytest.raises(openai.BadRequestError) as error:
            client.responses.create(model=model_id, input="x", previous_response_id=missing)
        assert error.value.body["code"] == "previous_response_not_found"


def test_a_request_shaped_as_the_codex_cli_sends_it_is_answered(server, model_id):
    """Codex CLI 0.171.0's request (captured against a recording server): developer messages,
    function tools with a namespace and web search beside them, reasoning, include, store
    false, a prompt cache key and its client metadata."""
    body = {"model": model_id, "stream": True, "tool_choice": "auto",
            "parallel_tool_calls": True, "reasoning": {"summary": "auto"}, "store": False,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
            "client_metadata": {"x-codex-installation-id": "i"}, "max_output_tokens": 4,
            "input": [{"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "You are Codex."}]},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "hi"}]}],
            "tools": [{"type": "namespace", "name": "multi_agent_v1", "description": "d",
                       "tools": []}, {"type": "web_search", "external_web_access": False}]}
    with httpx.stream("POST", server.v1 + "/responses", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        kinds = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed",
                                                           "response.incomplete")


BAD = {
    "no input": ({}, "input"),
    "image part": ({"input": [{"role": "user", "content": [{"type": "input_image",
                                                            "image_url": "x"}]}]}, "input_image"),
    "unknown item": ({"input": [{"type": "computer_call_output", "call_id": "c"}]},
                     "computer_call_output"),
    "unknown field": ({"input": "hi", "frobnicate": 1}, "frobnicate"),
    "tool_choice naming no tool": ({"input": "hi", "tool_choice": {"type": "function",
                                                                    "name": "f"}}, "tool_choice"),
    "truncation auto": ({"input": "hi", "truncation": "auto"}, "truncation"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_refused_by_name_in_openais_shape(server, name):
    body, says = BAD[name]
    error = assert_openai_error(httpx.post(server.v1 + "/responses", json=body, timeout=60), 400)
    assert says in json.dumps(error)


# --- function tools, on a model whose chat template has them ---------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": WEATHER}]
QWEN = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def qwen():
    with running(create_app(load_model(QWEN), max_queue=16)) as srv:
        with openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=300) as c:
            yield c


@pytest.mark.real_model
@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_a_required_function_call_is_a_valid_function_call_item(qwen, choice):
    reply = qwen.responses.create(model=QWEN, input="Weather in Paris?", tools=TOOLS,
                                  tool_choice=choice, temperature=0, max_output_tokens=64)
    calls = [i for i in reply.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)


@pytest.mark.real_model
def test_a_function_round_trip_streams_its_call_then_answers_from_the_output(qwen):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    events = list(qwen.responses.create(model=QWEN, input=[question], tools=TOOLS,
                                        tool_choice="required", temperature=0,
                                        max_output_tokens=64, stream=True))
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.done" in kinds
    call = next(i for i in events[-1].response.output if i.type == "function_call")
    answer = qwen.responses.create(model=QWEN, tools=TOOLS, temperature=0, max_output_tokens=48,
                                   input=[question, call.model_dump(exclude_none=True),
                                          {"type": "function_call_output",
                                           "call_id": call.call_id,
                                           "output": json.dumps({"celsius": 21})}])
    assert "21" in answer.output_text
