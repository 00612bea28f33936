"""logprobs, echo, n and batches of prompts through the official `openai` client: the values the
library reports for the same prompt ids and parameters, in OpenAI's response and streaming
shapes; the choices of a request share one prefill and each equals its own seeded run."""

from __future__ import annotations

import math

import openai
import pytest
from server_helpers import running

import specdecode.app.server.worker
from specdecode.app.server import create_app
from specdecode.core.engine import collect
from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=64)) as srv:
        yield srv


class Client:
    """The `openai` client with the served model's name filled in."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.model = client.models.list().data[0].id
        self.client = client

    def complete(self, **kwargs):
        return self.client.completions.create(model=self.model, **kwargs)

    def chat(self, **kwargs):
        return self.client.chat.completions.create(model=self.model, **kwargs)


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.v1, api_key="x", max_retries=0, timeout=60) as c:
        yield Client(c)


def library(model, prompt, method="lookup", chat=False, **kwargs):
    """(result, the generated tokens' logprobs, the prompt's) as the library reports them."""
    kwargs = {"max_new_tokens": 12, "temperature": 0.0, **kwargs}
    chunks = list(SpecDecoder(model, method).stream(prompt, chat=chat, **kwargs))
    return (collect(chunks), [e for c in chunks for e in c.logprobs or ()],
            chunks[0].prompt_logprobs)


def test_chat_logprobs_are_the_librarys_with_each_tokens_text_and_bytes(client,
                                                                        reference_model):
    result, entries, _ = library(reference_model, "Say something.", chat=True, logprobs=3)
    resp = client.chat(
        messages=[{"role": "user", "content": "Say something."}], max_tokens=12,
        temperature=0, logprobs=True, top_logprobs=3)
    choice = resp.choices[0]
    assert choice.message.content == result.text
    content = choice.logprobs.content
    assert [c.logprob for c in content] == [e.logprob for e in entries]
    assert [[t.logprob for t in c.top_logprobs] for c in content] == [
        [lp for _, lp in e.top] for e in entries]
    pieces = reference_model.token_bytes([e.token for e in entries])
    assert [bytes(c.bytes) for c in content] == pieces
    assert b"".join(pieces[: len(result.token_ids)]).decode() == result.text
    streamed = list(client.chat(
        messages=[{"role": "user", "content": "Say something."}], max_tokens=12,
        temperature=0, logprobs=True, top_logprobs=3, stream=True))
    assert [c.logprob for chunk in streamed if chunk.choices and chunk.choices[0].logprobs
            for c in chunk.choices[0].logprobs.content] == [e.logprob for e in entries]


def test_completion_logprobs_in_the_legacy_shape(client, reference_model):
    result, entries, _ = library(reference_model, PROMPT, logprobs=2)
    resp = client.complete(prompt=PROMPT, max_tokens=12, temperature=0,
                                     logprobs=2)
    lp = resp.choices[0].logprobs
    assert lp.token_logprobs == [e.logprob for e in entries]
    assert "".join(lp.tokens[: len(result.token_ids)]) == resp.choices[0].text == result.text
    assert lp.text_offset == [sum(map(len, lp.tokens[:i])) for i in range(len(lp.tokens))]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert top[token] == logprob and len(top) in (2, 3)  # the token is among them
        assert max(top.values()) >= logprob


def test_speculative_and_plain_report_the_same_logprobs(tiny_real_vocab_model, monkeypatch):
    """Taken from the verifying forward, the values are plain decoding's. The tiny model drafts
    for itself (a copy of its own weights) and every draft is scored (no step cost: a drafter as
    slow as its target never pays), so draft tokens are accepted."""
    monkeypatch.setattr(specdecode.app.server.worker, "step_cost", lambda model: None)
    path = str(tiny_real_vocab_model)
    app = create_app(load_model(path), options={"draft_model": path, "draft_dtype": "auto",
                                                "draft_vocab": 0})
    with running(app) as srv, openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0) as c:
        client = Client(c)

        def ask(method):
            return client.complete(prompt=PROMPT, max_tokens=16, temperature=0, logprobs=5,
                                   extra_body={"speculative": {"method": method}})

        spec, plain = ask("draft"), ask("ar")
    assert spec.usage.model_dump()["speculative"]["accepted"] > 8
    assert spec.choices[0].text == plain.choices[0].text
    for a, b in zip(spec.choices[0].logprobs.token_logprobs,
                    plain.choices[0].logprobs.token_logprobs, strict=True):
        assert math.isclose(a, b, abs_tol=1e-4)
    for a, b in zip(spec.choices[0].logprobs.top_logprobs,
                    plain.choices[0].logprobs.top_logprobs, strict=True):
        assert a.keys() == b.keys() and all(math.isclose(a[k], b[k], abs_tol=1e-4) for k in a)


def test_echo_with_logprobs_scores_the_prompt_from_its_prefill(client, reference_model):
    """What lm-evaluation-harness's loglikelihood requests send: the prompt as token ids, echo,
    logprobs 1, max_tokens 1 (and 0)."""
    ids = reference_model.encode_prompt(PROMPT, chat=False)
    result, entries, scored = library(reference_model, ids, max_new_tokens=1, logprobs=1,
                                      prompt_logprobs=1)
    resp = client.complete(prompt=[ids], max_tokens=1, temperature=0,
                                     logprobs=1, echo=True)
    lp = resp.choices[0].logprobs
    assert len(lp.tokens) == len(ids) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == [e.logprob for e in scored[1:]] + [entries[0].logprob]
    assert resp.choices[0].text.startswith(PROMPT)
    only = client.complete(prompt=PROMPT, max_tokens=0, logprobs=0,
                                     echo=True)
    assert only.choices[0].text == PROMPT and only.choices[0].finish_reason == "length"
    assert only.choices[0].logprobs.token_logprobs == lp.token_logprobs[:-1]
    assert only.usage.completion_tokens == 0


def test_n_choices_share_one_prefill_and_each_equals_its_seeded_plain_run(client, served_model,
                                                                          reference_model,
                                                                          monkeypatch):
    """Choice i is seeded with seed + i, and a seeded answer is plain decoding's with its seed,
    whatever the server drafted (its draft budget reads this machine's timing) and batched."""
    rows = []
    real = served_model.target.hidden_batch
    monkeypatch.setattr(served_model.target, "hidden_batch", lambda steps: rows.append(
        sum(len(tokens) for _, tokens, _ in steps)) or real(steps))
    resp = client.complete(prompt=PROMPT, max_tokens=12, temperature=0.9,
                                     seed=40, n=4)
    texts = [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
    alone = [library(reference_model, PROMPT, "ar", temperature=0.9, seed=40 + i)[0]
             for i in range(4)]
    assert texts == [r.text for r in alone]
    assert len(set(texts)) > 1
    stats = resp.usage.model_dump()["speculative"]
    prompt = len(reference_model.encode_prompt(PROMPT, chat=False))
    assert sum(rows) == prompt - 1 + stats["target_forwards"] + stats["drafted"]
    assert resp.usage.prompt_tokens == prompt
    assert resp.usage.completion_tokens == sum(r.stats.new_tokens for r in alone)


def test_streamed_choices_assemble_to_the_whole_responses(client):
    kwargs = dict(prompt=["Once upon a time", PROMPT], max_tokens=10, temperature=0.8,
                  seed=3, n=2)
    whole = client.complete(**kwargs)
    assert [c.index for c in whole.choices] == [0, 1, 2, 3]
    parts: dict[int, str] = {}
    finished = []
    for chunk in client.complete(stream=True, **kwargs):
        for c in chunk.choices:
            parts[c.index] = parts.get(c.index, "") + c.text
            if c.finish_reason:
                finished.append(c.index)
    assert [parts[i] for i in range(4)] == [c.text for c in whole.choices]
    assert sorted(finished) == [0, 1, 2, 3]


def test_chat_n_streams_every_choice_with_its_role_and_closing_chunk(client):
    messages = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat(messages=messages, max_tokens=8,
                                           temperature=0.8, seed=5, n=3)
    parts: dict[int, str] = {}
    roles, finished = set(), []
    for chunk in client.chat(messages=messages, max_tokens=8,
                                                temperature=0.8, seed=5, n=3, stream=True):
        for c in chunk.choices:
            roles |= {c.index} if c.delta.role else set()
            parts[c.index] = parts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finished.append(c.index)
    assert [parts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    assert roles == {0, 1, 2} and sorted(finished) == [0, 1, 2]
