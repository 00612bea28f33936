"""One conversation through every chat dialect (chat completions, Responses, Messages), greedy:
each answers the library's plain decoding of the same prompt ids, token for token, whichever
drafter serves it."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import running

from specdecode.app.server import create_app
from specdecode.pipeline import SpecDecoder

SYSTEM = "You are terse."
TURNS = [{"role": "user", "content": "Name a fox."},
         {"role": "assistant", "content": "Rusty."},
         {"role": "user", "content": "Tell me a story about him."}]
LIMIT = 20


@pytest.fixture(scope="module")
def http(served_model):
    with running(create_app(served_model, max_queue=16)) as srv, httpx.Client(
            base_url=srv.url, timeout=60) as c:
        yield c


def chat_completions(http: httpx.Client, spec: dict) -> tuple[str, int]:
    r = http.post("/v1/chat/completions", json={
        "messages": [{"role": "system", "content": SYSTEM}, *TURNS], "max_tokens": LIMIT,
        "temperature": 0, **spec}).json()
    return r["choices"][0]["message"]["content"], r["usage"]["completion_tokens"]


def responses(http: httpx.Client, spec: dict) -> tuple[str, int]:
    r = http.post("/v1/responses", json={
        "instructions": SYSTEM, "input": TURNS, "max_output_tokens": LIMIT, "temperature": 0,
        **spec}).json()
    text = "".join(part["text"] for item in r["output"] if item["type"] == "message"
                   for part in item["content"])
    return text, r["usage"]["output_tokens"]


def messages(http: httpx.Client, spec: dict) -> tuple[str, int]:
    model = http.get("/v1/models").json()["data"][0]["id"]  # Anthropic's requests name it
    r = http.post("/v1/messages", json={
        "model": model, "system": SYSTEM, "messages": TURNS, "max_tokens": LIMIT, "temperature": 0,
        **spec}).json()
    return "".join(b["text"] for b in r["content"]), r["usage"]["output_tokens"]


@pytest.mark.parametrize("method", ["ar", "lookup", "suffix"])
def test_every_dialect_answers_plain_decodings_tokens_whatever_drafts(http, reference_model,
                                                                      method):
    ids = reference_model.encode_chat([{"role": "system", "content": SYSTEM}, *TURNS])
    plain = SpecDecoder(reference_model, "ar").generate(ids, max_new_tokens=LIMIT,
                                                        temperature=0.0)
    spec = {"speculative": {"method": method}}
    answers = {dialect.__name__: dialect(http, spec)
               for dialect in (chat_completions, responses, messages)}
    assert set(answers.values()) == {(plain.text, plain.stats.new_tokens)}, answers
