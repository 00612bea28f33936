"""Anthropic's Messages API through the official `anthropic` client: the same conversation gives
the same tokens as chat completions, whole and streamed in Anthropic's events; stop sequences,
the token limit and token counting as Anthropic reports them; every bad input is answered in
Anthropic's error shape; `x-api-key`, `HEAD /` and `?beta=true` as Claude Code sends them; tool
calls (any, a named tool, a round trip with a tool result) on a model with tools."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import openai
import pytest
from server_helpers import running

import specdecode.app.server.streaming
from specdecode.app.server import create_app
from specdecode.models import load_model

MESSAGES = [{"role": "user", "content": "Tell me a story about a fox."}]
GREEDY = {"temperature": 0}  # Anthropic's client no longer has the field; the API takes it


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=16, api_key="sekrit")) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with anthropic.Anthropic(base_url=server.url, api_key="sekrit", max_retries=0,
                             timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def model_id(server):
    return httpx.get(server.v1 + "/models", headers={"x-api-key": "sekrit"}).json()["data"][0]["id"]


def chat(server, model_id, messages, **kwargs):
    with openai.OpenAI(base_url=server.v1, api_key="sekrit", max_retries=0) as c:
        return c.chat.completions.create(model=model_id, messages=messages, extra_body=GREEDY,
                                         **kwargs).choices[0]


def test_a_message_is_the_chat_completions_answer_to_the_same_conversation(client, server,
                                                                          model_id):
    system = "You are terse."
    reply = client.messages.create(model=model_id, max_tokens=16, extra_body=GREEDY,
                                   system=system, messages=MESSAGES)
    same = chat(server, model_id, [{"role": "system", "content": system}, *MESSAGES],
                max_tokens=16)
    assert reply.type == "message" and reply.role == "assistant" and reply.model == model_id
    assert [b.type for b in reply.content] == ["text"]
    assert reply.content[0].text == same.message.content
    assert reply.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[same.finish_reason]
    blocks = client.messages.create(model=model_id, max_tokens=16, extra_body=GREEDY,
                                    messages=MESSAGES,
                                    system=[{"type": "text", "text": system,
                                             "cache_control": {"type": "ephemeral"}}])
    assert blocks.content[0].text == reply.content[0].text


def test_usage_counts_the_prompt_as_count_tokens_does_and_carries_the_speculative_stats(
        client, model_id):
    reply = client.messages.create(model=model_id, max_tokens=8, extra_body=GREEDY,
                                   messages=MESSAGES)
    counted = client.messages.count_tokens(model=model_id, messages=MESSAGES)
    usage = reply.usage.model_dump()
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == counted.input_tokens
    assert usage["output_tokens"] == 8 and reply.stop_reason == "max_tokens"
    assert usage["speculative"]["tau"] >= 1.0


def test_the_stream_is_anthropics_events_and_assembles_to_the_whole_message(client, model_id):
    whole = client.messages.create(model=model_id, max_tokens=16, extra_body=GREEDY,
                                   messages=MESSAGES)
    with client.messages.stream(model=model_id, max_tokens=16, extra_body=GREEDY,
                                messages=MESSAGES) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta" and "content_block_start" in kinds
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_stop_sequence_ends_the_message_and_is_named(client, model_id):
    text = client.messages.create(model=model_id, max_tokens=16, extra_body=GREEDY,
                                  messages=MESSAGES).content[0].text
    stop = text[len(text) // 2:][:3]
    assert stop.strip()
    reply = client.messages.create(model=model_id, max_tokens=16, extra_body=GREEDY,
                                   messages=MESSAGES, stop_sequences=["\u2603", stop])
    assert reply.stop_reason == "stop_sequence" and reply.stop_sequence == stop
    assert reply.content[0].text == text[:text.index(stop)]


def test_claude_codes_probe_its_beta_query_and_its_api_key_header_work(server, model_id):
    assert httpx.head(server.url + "/").status_code == 200
    r = httpx.post(server.v1 + "/messages?beta=true", headers={
        "x-api-key": "sekrit", "anthropic-version": "2023-06-01",
        "anthropic-beta": "claude-code-20250219"}, json={
        "model": model_id, "max_tokens": 4, "messages": MESSAGES}, timeout=60)
    assert r.status_code == 200 and r.json()["type"] == "message"


def test_a_request_shaped_as_claude_code_sends_it_is_answered(server, model_id):
    """Claude Code 2.1.337's request, its fields and shapes (captured from its binary against a
    recording server): system blocks with cache_control, a system turn after the user's, a
    deferred tool sent without a schema, adaptive thinking, effort, context management."""
    body = {"model": model_id, "max_tokens": 32000, "stream": True, "metadata": {"user_id": "u"},
            "system": [{"type": "text", "text": "You are Claude Code."},
                       {"type": "text", "text": "Be brief.", "cache_control": {
                           "type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                         {"role": "system", "content": [{"type": "text", "text": "# Env",
                                                         "cache_control": {
                                                             "type": "ephemeral"}}]}],
            "tools": [{"name": "Later", "defer_loading": True}],
            "thinking": {"type": "adaptive", "display": "omitted"},
            "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015",
                                              "keep": "all"}]}}
    with httpx.stream("POST", server.v1 + "/messages?beta=true", json=body, timeout=60,
                      headers={"x-api-key": "sekrit"}) as r:
        assert r.status_code == 200, r.read()
        kinds = [line[len("event: "):] for line in r.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


BAD = {
    "no max_tokens": ({"messages": MESSAGES}, 400, "max_tokens"),
    "unknown field": ({"max_tokens": 4, "messages": MESSAGES, "inference_geo": "eu"}, 400,
                      "inference_geo"),
    "image block": ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "AA=="}}]}]}, 400, "'image' are not supported"),
    "temperature above 1": ({"max_tokens": 4, "messages": MESSAGES, "temperature": 1.5}, 400,
                            "temperature"),
    "tool_choice without tools": ({"max_tokens": 4, "messages": MESSAGES,
                                   "tool_choice": {"type": "any"}}, 400, "tool_choice needs"),
    "unknown tool named": ({"max_tokens": 4, "messages": MESSAGES, "tools": [
        {"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "g"}}, 400, "'g'"),
    "tool role message": ({"max_tokens": 4, "messages": [{"role": "tool",
                                                             "content": "x"}]}, 400, "role"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_answered_in_anthropics_error_shape(server, model_id, name):
    body, status, says = BAD[name]
    r = httpx.post(server.v1 + "/messages", headers={"x-api-key": "sekrit"},
                   json={"model": model_id, **body}, timeout=60)
    assert r.status_code == status
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert says in error["error"]["message"]


def test_a_wrong_key_and_an_unknown_model_are_anthropics_401_and_404(server, model_id):
    with anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0) as c:
        with pytest.raises(anthropic.AuthenticationError):
            c.messages.create(model=model_id, max_tokens=4, messages=MESSAGES)
    r = httpx.post(server.v1 + "/messages", headers={"x-api-key": "sekrit"},
                   json={"model": "claude-nonesuch", "max_tokens": 4, "messages": MESSAGES})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(server.v1 + "/messages/nowhere", headers={"x-api-key": "sekrit"}, json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    assert "this server has" in r.json()["error"]["message"]


# --- tools, on a model whose chat template has them -----------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"name": "get_weather", "description": "The current weather in a city",
          "input_schema": WEATHER}]
QWEN = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def qwen():
    with running(create_app(load_model(QWEN), max_queue=16)) as srv:
        with anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0,
                                 timeout=300) as c:
            yield c


@pytest.mark.real_model
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_a_required_tool_call_is_a_valid_tool_use_block(qwen, choice):
    reply = qwen.messages.create(model=QWEN, max_tokens=64, extra_body=GREEDY, tools=TOOLS,
                                 tool_choice=choice, messages=[
                                     {"role": "user", "content": "Weather in Paris?"}])
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER)
    assert reply.stop_reason == "tool_use"


@pytest.mark.real_model
def test_a_tool_round_trip_streams_its_call_then_answers_from_the_result(qwen):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    with qwen.messages.stream(model=QWEN, max_tokens=64, extra_body=GREEDY, tools=TOOLS,
                              tool_choice={"type": "any"}, messages=[question]) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        call = stream.get_final_message()
    assert "input_json_delta" in deltas and call.stop_reason == "tool_use"
    use = next(b for b in call.content if b.type == "tool_use")
    answer = qwen.messages.create(model=QWEN, max_tokens=48, extra_body=GREEDY, tools=TOOLS,
                                  messages=[question, {"role": "assistant", "content": [
                                      b.model_dump() for b in call.content]},
                                      {"role": "user", "content": [{
                                          "type": "tool_result", "tool_use_id": use.id,
                                          "content": json.dumps({"celsius": 21})}]}])
    text = "".join(b.text for b in answer.content if b.type == "text")
    assert "21" in text


def test_a_stream_starts_once_its_prompt_is_checked_and_pings_through_a_slow_prefill(
        slow_model, monkeypatch):
    """A stream's headers and message_start go out once the prompt joined the batch, and pings
    follow until the first token, so a client does not give up on a long prefill (Claude Code
    drops a connection silent for about 5 minutes); a prompt past the context is still a 400."""
    monkeypatch.setattr(specdecode.app.server.streaming, "KEEPALIVE_SECONDS", 0.01)
    with running(create_app(slow_model)) as srv:
        model = httpx.get(srv.v1 + "/models").json()["data"][0]["id"]
        body = {"model": model, "max_tokens": 3, "stream": True, "messages": MESSAGES}
        with httpx.stream("POST", srv.v1 + "/messages", json=body, timeout=60) as r:
            kinds = [line[len("event: "):] for line in r.iter_lines()
                     if line.startswith("event: ")]
        first = kinds.index("content_block_start")
        assert kinds[0] == "message_start" and kinds[1:first].count("ping") >= 2
        r = httpx.post(srv.v1 + "/messages", json={**body, "messages": [
            {"role": "user", "content": "word " * 300}]}, timeout=60)
        assert r.status_code == 400 and "context window" in r.json()["error"]["message"]


def test_an_earlier_turns_thinking_is_passed_to_the_template_as_its_reasoning(server, model_id):
    from specdecode.app.server.anthropic_schemas import Message

    turn = Message(role="assistant", content=[
        {"type": "thinking", "thinking": "A fox story.", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "Once..."}])
    assert turn.to_template() == [{"role": "assistant", "content": "Once...",
                                   "reasoning_content": "A fox story."}]
    plain = [*MESSAGES, {"role": "assistant", "content": "Once..."},
             {"role": "user", "content": "Go on."}]
    replayed = [*MESSAGES, {"role": "assistant", "content": turn.model_dump()["content"]},
                {"role": "user", "content": "Go on."}]
    counts = [httpx.post(server.v1 + "/messages/count_tokens", headers={"x-api-key": "sekrit"},
                         json={"model": model_id, "messages": m}, timeout=60).json()
              for m in (plain, replayed)]
    # this model's template writes no reasoning: the same prompt
    assert counts[0] == counts[1] and counts[0]["input_tokens"] > 0
