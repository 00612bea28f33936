"""The ingress of `serve --ray` going on with a stream whose replica died, without Ray: the
replica's side (`EngineReplica.forward`) runs in this process, a death is a stream cut after
any event, and what the client receives, the cut stream and then its continuation on a fresh
replica as the ingress relays it (`_Events`), is the uninterrupted stream, byte for byte, in
every dialect: text, a tool call, a JSON schema, logprobs, seeded sampling. A stream of several
choices is not continued (their chunks would come in another order)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

pytest.importorskip("ray", reason="the [ray] extra is not installed")
from ray.exceptions import ActorDiedError  # noqa: E402

from specdecode.app.server import create_app, relay  # noqa: E402
from specdecode.app.server.ray_ingress import (  # noqa: E402
    RESUMES, _Events, _Relayed, conversation_key)
from specdecode.app.server.ray_replica import EngineReplica, Forwarded  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
CHAT = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 24,
        "temperature": 0, "stream": True}
ASKED = {
    "chat": ("/v1/chat/completions", CHAT),
    "chat-usage-logprobs": ("/v1/chat/completions", {
        **CHAT, "logprobs": True, "top_logprobs": 2, "stream_options": {"include_usage": True}}),
    "chat-json-schema": ("/v1/chat/completions", {**CHAT, "max_tokens": 40, "response_format": {
        "type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}}),
    "chat-seeded": ("/v1/chat/completions", {**CHAT, "temperature": 1.0, "seed": 7}),
    "completions": ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24,
                                        "temperature": 0, "stream": True}),
    "responses": ("/v1/responses", {"input": "Tell me a story.", "max_output_tokens": 24,
                                    "temperature": 0, "stream": True}),
    "messages": ("/v1/messages", {"model": "any", "messages": [
        {"role": "user", "content": "Tell me a story."}],
                                  "max_tokens": 24, "temperature": 0, "stream": True}),
    "llamacpp": ("/completion", {"prompt": "Once upon a time", "n_predict": 24,
                                 "temperature": 0, "stream": True}),
}


@pytest.fixture(scope="module")
def replica(served_model):
    """What `EngineReplica.forward` needs of a replica: its app (its engine thread started)."""
    return SimpleNamespace(app=create_app(served_model), name="test")


def forward(replica, path: str, body: dict, sent=(), resumes: int = 0) -> list[bytes]:
    """The replica's answer to a relayed request, as the ASGI body parts it sends (a `model`
    in the body names the served one)."""
    if "model" in body:
        body = {**body, "model": replica.app.state.specdecode.model_id}
    asked = Forwarded("POST", path, b"", [(b"content-type", b"application/json")],
                      json.dumps(body).encode(), conversation_key(path, json.dumps(body).encode()),
                      relay.Relay("seed-of-the-test", 1_700_000_000, tuple(sent), resumes))

    async def collect() -> list[bytes]:
        parts = []
        async for batch in EngineReplica.forward(replica, asked):
            for message in batch:
                if message["type"] == "http.response.start":
                    status = message["status"]
                else:
                    parts.append(message.get("body", b""))
        assert status == 200, parts
        return parts

    return asyncio.run(collect())


def events(parts: list[bytes]) -> list[bytes]:
    raw = b"".join(parts)
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e]


def relayed(replica, path: str, body: dict, cut: int, first: list[bytes] | None = None) -> bytes:
    """What the client receives when the replica dies after the stream's first `cut` events
    (comments included; `first`: that stream's events, else a new one) and a fresh replica
    goes on."""
    delivered: list[bytes] = []

    async def send(message: dict) -> None:
        delivered.append(message.get("body", b""))

    stream = _Events(send)
    first = (first or events(forward(replica, path, body)))[:cut]
    asyncio.run(stream.feed([{"type": "http.response.body", "body": e} for e in first]))
    stream.resume()
    rest = forward(replica, path, body, stream.sent, resumes=1)
    asyncio.run(stream.feed([{"type": "http.response.body", "body": p} for p in rest]))
    asyncio.run(stream.close())
    return b"".join(delivered)


def without_comments(parts: list[bytes]) -> bytes:
    return b"".join(e for e in events(parts) if relay.sent_chunk(e) is None)


def _said(stream: bytes) -> list[bytes]:
    """A stream's events but keep-alives (an SSE comment, Anthropic's ping: they say nothing,
    and a continuation may send one more)."""
    return [e for e in events([_stable(stream)])
            if not (e.startswith(b":") or e.startswith(b"event: ping\n"))]


def test_a_comment_names_its_chunk_and_nothing_else_is_one():
    assert relay.sent_chunk(relay.comment(2, [5, 6]).encode()) == (2, (5, 6))
    assert relay.sent_chunk(b": keep-alive\n\n") is None
    assert relay.sent_chunk(b'data: {"a": 1}\n\n') is None


@pytest.mark.parametrize("name", ASKED)
def test_a_stream_cut_anywhere_and_continued_elsewhere_is_the_uninterrupted_stream(replica,
                                                                                 name):
    path, body = ASKED[name]
    whole = forward(replica, path, body)
    n = len(events(whole))
    assert sum(relay.sent_chunk(e) is not None for e in events(whole)) >= 3  # chunks to cut at
    expected = without_comments(whole)
    for cut in sorted({0, 1, 2, 3, n // 3, n // 2, n - 3, n - 1}):
        got = relayed(replica, path, body, cut)
        assert _said(got) == _said(expected), (name, cut)


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}}]


@pytest.mark.real_model  # the tiny model's 128-token context holds no tool list
def test_a_tool_call_cut_midway_and_continued_is_the_uninterrupted_call(default_model):
    replica = SimpleNamespace(app=create_app(default_model), name="test")
    path, body = "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "What is the weather in Paris this week?"}],
        "tools": TOOLS, "tool_choice": "required", "max_tokens": 64, "temperature": 0,
        "stream": True}
    whole = forward(replica, path, body)
    assert b'"tool_calls"' in b"".join(whole)
    n = len(events(whole))
    assert sum(relay.sent_chunk(e) is not None for e in events(whole)) >= 2
    for cut in sorted({1, n // 3, n // 2, n - 2}):
        assert _said(relayed(replica, path, body, cut)) == _said(without_comments(whole)), cut


def test_a_stream_whose_replicas_die_twice_is_still_the_uninterrupted_stream(replica):
    path, body = ASKED["chat-usage-logprobs"]
    delivered: list[bytes] = []

    async def send(message: dict) -> None:
        delivered.append(message.get("body", b""))

    stream = _Events(send)
    whole = events(forward(replica, path, body))
    asyncio.run(stream.feed([{"type": "http.response.body", "body": e} for e in whole[:4]]))
    stream.resume()
    again = events(forward(replica, path, body, stream.sent, resumes=1))
    asyncio.run(stream.feed([{"type": "http.response.body", "body": e} for e in again[:12]]))
    stream.resume()
    rest = forward(replica, path, body, stream.sent, resumes=2)
    asyncio.run(stream.feed([{"type": "http.response.body", "body": p} for p in rest]))
    asyncio.run(stream.close())
    assert _said(b"".join(delivered)) == _said(without_comments(whole))


def test_an_unseeded_sampled_stream_goes_on_from_exactly_the_text_sent(replica):
    path, body = "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24,
                                     "temperature": 1.0, "stream": True}
    whole = events(forward(replica, path, body))
    cut = len(whole) // 2
    got = _said(relayed(replica, path, body, cut, whole))
    sent = _said(b"".join(e for e in whole[:cut] if relay.sent_chunk(e) is None))
    assert got[: len(sent)] == sent  # what the client had, then the rest, nothing repeated
    texts = [json.loads(e[len(b"data: "):])["choices"][0]["text"] for e in got[:-1]]
    ids = [relay.sent_chunk(e) for e in whole[:cut] if relay.sent_chunk(e)]
    assert len(texts) == len(got) - 1 and got[-1] == b"data: [DONE]\n\n" and ids


class _Replica:
    """A replica's answer as the ingress reads it: batches of ASGI messages, then its death."""

    def __init__(self, batches: list[list[dict]]) -> None:
        self.batches, self.cancelled = batches, False

    def __aiter__(self):
        return self

    async def __anext__(self) -> list[dict]:
        if not self.batches:
            raise ActorDiedError()
        return self.batches.pop(0)

    def cancel(self) -> None:
        self.cancelled = True


def test_a_stream_whose_client_left_is_not_continued_and_its_replica_stops(replica):
    path, body = ASKED["completions"]
    parts = forward(replica, path, body)
    start = [{"type": "http.response.start", "status": 200,
              "headers": [(b"content-type", b"text/event-stream")]}]
    dying = _Replica([[{"type": "http.response.body", "body": p, "more_body": True}]
                      for p in parts[:3]])
    asked_again = []

    class Ingress:
        async def start(self, forwarded):
            asked_again.append(forwarded)
            raise AssertionError("a stream whose client left was sent again")

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            raise asyncio.CancelledError  # Ray's proxy cancels the ingress when its client leaves

    relayed_answer = _Relayed(start, dying, Ingress(), None)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(relayed_answer(None, None, send))
    assert dying.cancelled and not asked_again
    # and a stream whose client stays is continued when its replica dies
    delivered = []

    async def keep(message: dict) -> None:
        delivered.append(message)

    again = _Replica([])

    class Continuing:
        async def start(self, forwarded):
            asked_again.append(forwarded)
            return start, again

    dying = _Replica([[{"type": "http.response.body", "body": p, "more_body": True}]
                      for p in parts[:3]])
    asyncio.run(_Relayed(start, dying, Continuing(), _forwarded(path, body))(None, None, keep))
    assert len(asked_again) == RESUMES  # again each time the continuation died too, no more
    assert delivered[-1]["body"].endswith(b"data: [DONE]\n\n")  # the error event's end


def _forwarded(path: str, body: dict) -> Forwarded:
    raw = json.dumps(body).encode()
    return Forwarded("POST", path, b"", [], raw, None, relay.Relay("s", 0))


def test_a_stream_of_several_choices_is_not_continued(replica):
    body = {**CHAT, "n": 2}
    first = events(forward(replica, "/v1/chat/completions", body))
    sent = [chunk for e in first if (chunk := relay.sent_chunk(e)) is not None]
    with pytest.raises(AssertionError, match="several choices is not continued"):
        forward(replica, "/v1/chat/completions", body, sent[:1])


def test_the_replica_that_continues_a_stream_counts_it_and_the_tokens_it_read_again(replica):
    metrics = replica.app.state.specdecode.metrics
    before = (metrics.resumed._value.get(), metrics.resumed_tokens._value.get())
    path, body = ASKED["completions"]
    sent = [c for e in events(forward(replica, path, body)) if (c := relay.sent_chunk(e))]
    forward(replica, path, body, sent[:2], resumes=1)
    assert metrics.resumed._value.get() == before[0] + 1
    assert metrics.resumed_tokens._value.get() == before[1] + sum(len(ids) for _, ids in sent[:2])


def _stable(stream: bytes) -> bytes:
    """A stream without what measures the run that wrote it: llama.cpp's timings and the
    `speculative` statistics (a continuation reports its own run's, and what it read again)."""
    out = []
    for event in events([stream]):
        head, _, data = event.partition(b"data: ")
        try:
            obj = json.loads(data.strip())
        except ValueError:
            out.append(event)
            continue
        out.append(head + b"data: " + json.dumps(_untimed(obj)).encode() + b"\n\n")
    return b"".join(out)


def _untimed(obj):
    if isinstance(obj, dict):
        return {k: _untimed(v) for k, v in obj.items()
                if k not in ("timings", "speculative")}
    if isinstance(obj, list):
        return [_untimed(v) for v in obj]
    return obj
