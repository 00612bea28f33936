"""The official `openai` client against the server: completions and chat, streamed and not; the
text is exactly what the library produces for the same prompt ids, method and parameters."""

from __future__ import annotations

import httpx
import openai
import pytest
from server_helpers import running

import specdecode.app.server.worker
from specdecode.app.server import create_app
from specdecode.core.penalties import Penalties
from specdecode.pipeline import SpecDecoder

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=64)) as srv:
        yield srv


def reference(model, prompt, method="lookup", chat=False, **kwargs):
    kwargs = {"max_new_tokens": 24, "temperature": 0.0, **kwargs}
    return SpecDecoder(model, method).generate(prompt, chat=chat, **kwargs)


def speculative(usage) -> dict:
    return usage.model_dump()["speculative"]


def test_models_lists_the_served_model(client, served_model):
    models = client.models.list().data
    assert [m.id for m in models] == [served_model.name]
    assert client.models.retrieve(served_model.name).id == served_model.name


def test_completion_matches_library_output(client, model_id, reference_model):
    ref = reference(reference_model, PROMPT)
    resp = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=24, temperature=0)
    assert resp.object == "text_completion"
    assert resp.choices[0].text == ref.text
    assert resp.choices[0].finish_reason == ref.finish_reason
    prompt_tokens = len(reference_model.encode_prompt(PROMPT, chat=False))
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (prompt_tokens,
                                                                        ref.stats.new_tokens)
    assert resp.usage.total_tokens == prompt_tokens + ref.stats.new_tokens
    stats = speculative(resp.usage)
    assert stats["method"] == "lookup"
    assert (stats["target_forwards"], stats["drafted"], stats["accepted"]) == (
        ref.stats.target_forwards, ref.stats.drafted, ref.stats.accepted)
    assert stats["tau"] == round(ref.stats.tau, 4)


def test_streamed_completion_matches(client, model_id, reference_model):
    ref = reference(reference_model, PROMPT)
    chunks = list(client.completions.create(model=model_id, prompt=PROMPT, max_tokens=24,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == ref.text
    assert [c.choices[0].finish_reason for c in chunks][-1] == ref.finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert speculative(chunks[-1].usage)["target_forwards"] == ref.stats.target_forwards


@pytest.mark.parametrize("method,depth", [("ar", None), ("lookup", 6)])
def test_speculative_extension_picks_the_method_and_its_caps(client, model_id, reference_model,
                                                             method, depth):
    ref = SpecDecoder(reference_model, method, max_draft_depth=depth).generate(
        PROMPT, chat=False, max_new_tokens=24, temperature=0.0)
    spec = {"method": method} | ({"max_draft_depth": depth} if depth else {})
    resp = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=24, temperature=0,
                                     extra_body={"speculative": spec})
    assert resp.choices[0].text == ref.text
    stats = speculative(resp.usage)
    assert stats["method"] == method and stats["target_forwards"] == ref.stats.target_forwards
    if depth:
        assert stats["max_draft_depth"] == depth and stats["max_draft_nodes"] == 10


def test_sampling_parameters_and_seed(client, model_id, reference_model):
    params = dict(temperature=0.9, top_p=0.8, seed=123)
    ref = reference(reference_model, PROMPT, top_k=50, **params)
    texts = [client.completions.create(model=model_id, prompt=PROMPT, max_tokens=24,
                                       extra_body={"top_k": 50}, **params).choices[0].text
             for _ in range(2)]
    assert texts == [ref.text, ref.text]


def test_penalties_bias_and_min_p_reach_the_engine(client, model_id, reference_model):
    """OpenAI's penalties and logit_bias and the extensions repetition_penalty and min_p give the
    library's output with the same values, and they change it (the bias bans the text's most
    frequent token)."""
    banned = max(set(ids := reference_model.encode_prompt(PROMPT, chat=False)), key=ids.count)
    penalties = Penalties(presence=0.5, frequency=0.5, repetition=1.3, bias=((banned, -100.0),))
    ref = reference(reference_model, PROMPT, penalties=penalties)
    plain = reference(reference_model, PROMPT)
    resp = client.completions.create(
        model=model_id, prompt=PROMPT, max_tokens=24, temperature=0, presence_penalty=0.5,
        frequency_penalty=0.5, logit_bias={str(banned): -100},
        extra_body={"repetition_penalty": 1.3, "min_p": 0.1})
    assert resp.choices[0].text == ref.text != plain.text
    assert banned not in reference_model.encode_prompt(ref.text, chat=False)
    sampled = dict(temperature=0.9, seed=7, min_p=0.2, penalties=penalties)
    ref = reference(reference_model, PROMPT, **sampled)
    resp = client.completions.create(
        model=model_id, prompt=PROMPT, max_tokens=24, temperature=0.9, seed=7,
        presence_penalty=0.5, frequency_penalty=0.5, logit_bias={str(banned): -100},
        extra_body={"repetition_penalty": 1.3, "min_p": 0.2})
    assert resp.choices[0].text == ref.text


def test_stop_string(client, model_id, reference_model):
    full = reference(reference_model, PROMPT).text
    stop = full[len(full) // 2:][:3]
    ref = reference(reference_model, PROMPT, stop=(stop,))
    resp = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=24, temperature=0,
                                     stop=[stop])
    assert resp.choices[0].text == ref.text and stop not in ref.text
    assert resp.choices[0].finish_reason == "stop"


def test_chat_matches_library_output(client, model_id, reference_model):
    ref = reference(reference_model, PROMPT, chat=True)  # the chat template, one user message
    messages = [{"role": "user", "content": PROMPT}]
    resp = client.chat.completions.create(model=model_id, messages=messages, max_tokens=24,
                                          temperature=0)
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == ref.text
    assert resp.usage.prompt_tokens == len(reference_model.encode_prompt(PROMPT, chat=True))
    assert resp.usage.completion_tokens == ref.stats.new_tokens


def test_streamed_chat_with_system_message(client, model_id, reference_model):
    messages = [{"role": "system", "content": "You answer briefly."},
                {"role": "user", "content": PROMPT}]
    tok = reference_model.tokenizer
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ref = reference(reference_model, ids)
    chunks = list(client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == ref.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == len(ids)
    assert chunks[-1].usage.completion_tokens == ref.stats.new_tokens


def test_a_prediction_of_the_answer_leaves_it_unchanged_and_takes_fewer_steps(served_model,
                                                                             monkeypatch):
    # drafts priced by no measured curve (up to the caps): how many rows pay on this machine,
    # under whatever else it runs, is not what this checks
    monkeypatch.setattr(specdecode.app.server.worker, "step_cost", lambda model: None)
    messages = [{"role": "user", "content": "Write the numbers from one to ten in words."}]
    with running(create_app(served_model)) as srv, openai.OpenAI(
            base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as client:
        ask = dict(model=served_model.name, messages=messages, max_tokens=24, temperature=0)
        plain = client.chat.completions.create(**ask)
        answer = plain.choices[0].message.content
        predicted = client.chat.completions.create(
            **ask, prediction={"type": "content", "content": [{"type": "text", "text": answer}]})
    assert predicted.choices[0].message.content == answer
    steps = [speculative(r.usage)["target_forwards"] for r in (plain, predicted)]
    assert steps[1] < steps[0], steps


def test_more_names_or_any_name_may_be_served_and_answers_name_the_served_id(served_model):
    ask = dict(prompt="Once", max_tokens=2, temperature=0)
    with running(create_app(served_model, model_id="mine, claude-x")) as srv, httpx.Client(
            base_url=srv.v1, timeout=60) as c:
        assert c.get("/models").json()["data"][0]["id"] == "mine"
        assert c.post("/completions", json={**ask, "model": "claude-x"}).json()["model"] == "mine"
        assert c.post("/completions", json={**ask, "model": "gpt-4"}).status_code == 404
    with running(create_app(served_model, model_id="mine,*")) as srv, httpx.Client(
            base_url=srv.v1, timeout=60) as c:
        assert c.post("/completions", json={**ask, "model": "gpt-4"}).json()["model"] == "mine"


def test_model_field_may_be_omitted(server):
    r = httpx.post(server.v1 + "/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 3


def test_health(server):
    r = httpx.get(server.url + "/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_a_conversations_next_turn_reports_the_prompt_tokens_it_took_from_the_cache(
        served_model, reference_model):
    with running(create_app(served_model, prefix_cache_bytes=64 << 20)) as srv, \
            openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as client:
        messages = [{"role": "user", "content": PROMPT}]
        first = client.chat.completions.create(model=served_model.name, messages=messages,
                                               max_tokens=8, temperature=0)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And then?"}]
        second = client.chat.completions.create(model=served_model.name, messages=messages,
                                                max_tokens=8, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens - 1 <= cached < second.usage.prompt_tokens
    tok = reference_model.tokenizer
    ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
              add_special_tokens=False)["input_ids"]
    assert second.usage.prompt_tokens == len(ids)
    ref = reference(reference_model, ids, max_new_tokens=8)
    assert second.choices[0].message.content == ref.text  # what a whole prefill gives


def test_a_restarted_server_reads_a_known_prompt_from_the_disk_cache_and_answers_the_same(
        served_model, tmp_path):
    ask = dict(model=served_model.name, messages=[{"role": "system", "content": PROMPT * 3},
                                                  {"role": "user", "content": "Hi"}],
               max_tokens=8, temperature=0)
    answers = []
    for _ in range(2):  # one server, stopped, then another on the same directory
        with running(create_app(served_model, prefix_cache_bytes=64 << 20,
                                prompt_cache_dir=str(tmp_path))) as srv, \
                openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as c:
            answers.append(c.chat.completions.create(**ask))
    first, after = answers
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert after.usage.prompt_tokens_details.cached_tokens == after.usage.prompt_tokens - 1
    assert after.choices[0].message.content == first.choices[0].message.content


def test_n_choices_of_a_prompt_asked_before_share_its_kept_cache(served_model):
    # the whole prompt kept from the first request: its choices need no prefill (this was a 500)
    with running(create_app(served_model, prefix_cache_bytes=64 << 20)) as srv, \
            openai.OpenAI(base_url=srv.v1, api_key="x", max_retries=0, timeout=60) as client:
        ask = dict(model=served_model.name, messages=[{"role": "user", "content": PROMPT}],
                   max_tokens=8, temperature=0.9, seed=7, n=2)
        first, again = (client.chat.completions.create(**ask) for _ in range(2))
    assert again.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens - 1
    assert [c.message.content for c in again.choices] == [
        c.message.content for c in first.choices]


def test_the_routes_without_v1_answer_as_those_with_it(server, client, model_id):
    """Clients whose base URL lacks /v1 (llama.cpp's server takes both) get the same answers."""
    with openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=60) as bare:
        assert bare.models.list().data[0].id == model_id
        for route in ("completions", "chat"):
            kwargs = dict(model=model_id, max_tokens=6, temperature=0)
            if route == "chat":
                kwargs["messages"] = [{"role": "user", "content": "Hi"}]
                got = [c.chat.completions.create(**kwargs).choices[0].message.content
                       for c in (bare, client)]
            else:
                got = [c.completions.create(prompt="Once", **kwargs).choices[0].text
                       for c in (bare, client)]
            assert got[0] == got[1]


def test_every_answer_names_one_system_fingerprint(client, model_id):
    """OpenAI's field for what a seeded answer depends on besides the request: the same for every
    answer of one server, whole and streamed."""
    kwargs = dict(model=model_id, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    whole = client.chat.completions.create(**kwargs).system_fingerprint
    streamed = {c.system_fingerprint for c in client.chat.completions.create(stream=True,
                                                                              **kwargs)}
    assert whole.startswith("fp_") and streamed == {whole}


def test_a_predictions_tokens_are_counted_as_openai_counts_them(client, model_id):
    """completion_tokens_details: the prediction's tokens that the answer took up, in order, and
    the rest; whole and streamed alike. (The prediction is tokenized alone, so a token at a
    boundary of the answer's may differ.)"""
    messages = [{"role": "user", "content": "Write the numbers from one to ten in words."}]
    ask = dict(model=model_id, messages=messages, max_tokens=24, temperature=0)
    answer = client.chat.completions.create(**ask)
    text, tokens = answer.choices[0].message.content, answer.usage.completion_tokens
    counts = []
    for prediction in (text, text + " and some words it will not write"):
        whole = client.chat.completions.create(**ask, prediction={"type": "content",
                                                                  "content": prediction})
        details = whole.usage.completion_tokens_details
        streamed = [c for c in client.chat.completions.create(
            **ask, prediction={"type": "content", "content": prediction}, stream=True,
            stream_options={"include_usage": True})][-1].usage.completion_tokens_details
        assert streamed == details
        counts.append((details.accepted_prediction_tokens, details.rejected_prediction_tokens))
    (accepted, rejected), (accepted_longer, rejected_longer) = counts
    assert tokens - 4 <= accepted <= tokens and rejected <= 4
    assert accepted_longer == accepted and rejected_longer >= rejected + 6
    assert answer.usage.completion_tokens_details is None


def test_with_include_usage_only_the_last_chunk_carries_usage(client, model_id):
    """So clients that add usage up count it once; without it the finishing chunk carries the
    run's usage (with its speculative statistics), as before."""
    ask = dict(model=model_id, max_tokens=6, messages=[{"role": "user", "content": "Hi"}],
               stream=True)
    chunks = list(client.chat.completions.create(**ask, stream_options={"include_usage": True}))
    assert [c.usage is not None for c in chunks].count(True) == 1 and chunks[-1].usage
    chunks = list(client.chat.completions.create(**ask))
    assert chunks[-1].usage is not None and chunks[-1].choices[0].finish_reason
