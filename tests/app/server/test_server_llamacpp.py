"""llama.cpp's own routes (`/completion`, `/tokenize`, `/detokenize`, `/apply-template`, `/props`)
and its extension fields on OpenAI's routes, as llama.cpp's clients send them: greedy answers are
the library's plain decoding of the same prompt ids, whole and streamed, speculative or not;
fields the engine cannot honour are refused by name."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest
from server_helpers import assert_openai_error, read_events, running

from specdecode.app.server import create_app
from specdecode.pipeline import SpecDecoder

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=64)) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def plain(model, ids: list[int], n: int):
    return SpecDecoder(model, "ar").generate(ids, max_new_tokens=n, temperature=0.0)


def complete(http: httpx.Client, **body) -> dict | list:
    r = http.post("/completion", json={"temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("method", ["ar", "lookup"])
def test_a_greedy_completion_is_plain_decoding_of_the_prompt(http, reference_model, method):
    ids = reference_model.tokenize(PROMPT, add_special=True, parse_special=True)
    ref = plain(reference_model, ids, 12)
    answer = complete(http, prompt=PROMPT, n_predict=12, return_tokens=True,
                      speculative={"method": method})
    assert answer["content"] == ref.text and answer["tokens"] == ref.token_ids
    assert answer["stop"] is True and answer["stop_type"] == (
        "eos" if ref.finish_reason == "stop" else "limit")
    timings = answer["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == len(ids) == answer["tokens_evaluated"]
    assert timings["predicted_n"] == len(ref.token_ids) == answer["tokens_predicted"]
    assert answer["generation_settings"]["n_predict"] == 12
    assert answer["speculative"]["method"] == method
    assert complete(http, prompt=PROMPT, n_predict=12)["tokens"] == []  # only when asked


def test_a_streamed_completion_sends_the_whole_answers_text_then_its_summary(http):
    whole = complete(http, prompt=PROMPT, n_predict=10)
    with http.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 10,
                                                  "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: {") for line in lines)  # no [DONE]: llama.cpp sends none
    events = [json.loads(line[6:]) for line in lines]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert all(e["tokens"] and all(type(t) is int for t in e["tokens"]) for e in events[:-1])
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["timings"]["predicted_n"] == whole["timings"]["predicted_n"]


def test_prompts_as_tokens_mixed_or_objects_answer_as_the_same_text(http, reference_model):
    ids = reference_model.tokenize(PROMPT, add_special=True, parse_special=True)
    text = complete(http, prompt=PROMPT, n_predict=6)["content"]
    assert complete(http, prompt=ids, n_predict=6)["content"] == text
    assert complete(http, prompt={"prompt_string": PROMPT}, n_predict=6)["content"] == text
    half = PROMPT.index(" jumps")
    mixed = reference_model.tokenize(PROMPT[:half], add_special=True, parse_special=True)
    assert complete(http, prompt=[*mixed, PROMPT[half:]], n_predict=6)["content"] == (
        complete(http, prompt=mixed + reference_model.tokenize(
            PROMPT[half:], add_special=False, parse_special=True), n_predict=6)["content"])
    batch = complete(http, prompt=[ids, PROMPT, {"prompt_string": PROMPT}], n_predict=6)
    assert isinstance(batch, list) and [a["content"] for a in batch] == [text] * 3
    assert [a["index"] for a in batch] == [0, 1, 2]


def test_completions_without_a_model_is_llamacpps_completion_and_with_one_openais(http):
    native = complete(http, prompt=PROMPT, n_predict=6)
    r = http.post("/completions", json={"prompt": PROMPT, "n_predict": 6, "temperature": 0})
    assert r.status_code == 200 and r.json()["content"] == native["content"]
    model = http.get("/models").json()["data"][0]["id"]
    r = http.post("/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 6,
                                        "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == native["content"]
    # each reading refuses what its dialect does not take, in the route's error shape
    wrong = http.post("/completions", json={"prompt": PROMPT, "max_token": 1})
    assert "max_token" in assert_openai_error(wrong, 400)["message"]
    wrong = http.post("/completions", json={"model": model, "prompt": 3.5})
    assert assert_openai_error(wrong, 400)["param"] == "prompt"
    assert_openai_error(http.post("/completions", content=b"[1]",
                                  headers={"content-type": "application/json"}), 400)


def test_n_probs_gives_each_tokens_probability_and_its_alternatives(http):
    answer = complete(http, prompt=PROMPT, n_predict=5, n_probs=3, return_tokens=True)
    probs = answer["completion_probabilities"]
    assert [p["id"] for p in probs] == answer["tokens"]
    for p in probs:
        assert p["logprob"] <= 0 and len(p["top_logprobs"]) == 3
        assert p["top_logprobs"][0]["id"] == p["id"]  # greedy: the most likely one
        assert bytes(p["bytes"]).decode("utf-8", "replace") == p["token"]


def test_post_sampling_probs_are_the_distribution_each_token_was_drawn_from(http):
    body = dict(prompt=PROMPT, n_predict=6, n_probs=10, temperature=1.0, top_k=3, top_p=1.0,
                min_p=0.0, seed=7, return_tokens=True)
    drawn = complete(http, **body, post_sampling_probs=True)
    model = complete(http, **body)
    assert drawn["tokens"] == model["tokens"]  # reporting changes no draw
    for p, raw in zip(drawn["completion_probabilities"], model["completion_probabilities"]):
        alternatives = p["top_probs"]
        assert 0 < p["prob"] <= 1 and "logprob" not in p
        assert len(alternatives) == 3 and all(a["prob"] > 0 for a in alternatives)
        assert sum(a["prob"] for a in alternatives) == pytest.approx(1.0, abs=1e-4)
        # top-k 3 renormalized: each of the three is its raw probability over theirs
        top3 = raw["top_logprobs"][:3]
        assert [a["id"] for a in alternatives] == [a["id"] for a in top3]
        total = sum(math.exp(a["logprob"]) for a in top3)
        assert alternatives[0]["prob"] == pytest.approx(math.exp(top3[0]["logprob"]) / total,
                                                        abs=1e-4)
    greedy = complete(http, prompt=PROMPT, n_predict=3, n_probs=5, post_sampling_probs=True)
    assert all(p["prob"] == 1.0 and len(p["top_probs"]) == 1
               for p in greedy["completion_probabilities"])


def test_a_logit_bias_of_false_bans_the_tokens_of_a_text(http, reference_model):
    first = complete(http, prompt=PROMPT, n_predict=1, return_tokens=True)["tokens"][0]
    word = reference_model.decode([first])
    for bias in ([[word, False]], {word: -100}, [[first, False]], {str(first): -100}):
        answer = complete(http, prompt=PROMPT, n_predict=3, return_tokens=True, logit_bias=bias)
        assert first not in answer["tokens"], bias


def test_n_predict_zero_reads_nothing_and_answers_at_once(http):
    answer = complete(http, prompt=PROMPT, n_predict=0)
    assert answer["content"] == "" and answer["tokens_predicted"] == 0


def test_tokenize_and_detokenize_round_trip_with_pieces_and_special_tokens(http, reference_model):
    r = http.post("/tokenize", json={"content": PROMPT}).json()
    assert r["tokens"] == reference_model.tokenize(PROMPT, add_special=False, parse_special=True)
    assert http.post("/detokenize", json=r).json()["content"] == PROMPT
    pieces = http.post("/tokenize", json={"content": "héllo", "with_pieces": True}).json()
    assert "".join(p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode(
        "latin-1") for p in pieces["tokens"]) in ("héllo", "héllo".encode().decode("latin-1"))
    eos = reference_model.tokenizer.eos_token
    special = http.post("/tokenize", json={"content": eos}).json()["tokens"]
    literal = http.post("/tokenize", json={"content": eos, "parse_special": False}).json()
    assert len(special) == 1 and len(literal["tokens"]) > 1
    assert http.post("/detokenize", json={"tokens": special}).json()["content"] == eos
    assert_openai_error(http.post("/detokenize", json={"tokens": [10**9]}), 400)


def test_apply_template_gives_the_chat_templates_prompt(http, reference_model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = http.post("/apply-template", json={"messages": messages})
    assert r.status_code == 200, r.text
    assert r.json()["prompt"] == reference_model.chat_text(messages)


def test_props_report_the_model_its_context_and_the_completion_defaults(http, served_model):
    props = http.get("/props").json()
    settings = props["default_generation_settings"]
    assert settings["n_ctx"] == served_model.context_length
    assert settings["params"]["temperature"] == 0.8 and settings["params"]["top_k"] == 40
    assert props["chat_template"] == served_model.tokenizer.chat_template
    assert props["modalities"] == {"vision": False, "audio": False}
    assert props["model_path"] == str(served_model.source)  # a directory: no GGUF file behind it


@pytest.mark.parametrize("field,value", [
    ("mirostat", 2), ("typical_p", 0.5), ("ignore_eos", True),
    ("dry_multiplyer", 0.0), ("lora", [{"id": 0, "scale": 1.0}]),
])
def test_a_field_the_engine_cannot_honour_is_refused_by_name(http, field, value):
    r = http.post("/completion", json={"prompt": PROMPT, "n_predict": 2, field: value})
    assert field in assert_openai_error(r, 400)["message"] + str(
        r.json()["error"]["param"])


def test_samplers_at_their_off_values_and_pure_hints_are_accepted(http):
    base = complete(http, prompt=PROMPT, n_predict=4)["content"]
    off = complete(http, prompt=PROMPT, n_predict=4, mirostat=0, typical_p=1.0, dry_multiplier=0,
                   xtc_probability=0.0, dynatemp_range=0.0, mirostat_tau=5.0, cache_prompt=True,
                   id_slot=-1, timings_per_token=True, samplers=["top_k", "temperature"],
                   backend_sampling=True)
    assert off["content"] == base
    multimodal = http.post("/completion", json={
        "prompt": {"prompt_string": "x", "multimodal_data": ["AAAA"]}})
    assert "multimodal" in assert_openai_error(multimodal, 400)["message"]


def test_openai_routes_honour_llamacpps_limit_penalty_and_n_probs(http):
    ask = {"prompt": PROMPT, "temperature": 0}
    r = http.post("/v1/completions", json={**ask, "n_predict": 5, "cache_prompt": True,
                                           "id_slot": 0, "timings_per_token": False})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 5
    assert r.json()["choices"][0]["text"] == http.post(
        "/v1/completions", json={**ask, "max_tokens": 5}).json()["choices"][0]["text"]
    llama = http.post("/v1/completions", json={**ask, "max_tokens": 8, "repeat_penalty": 1.3,
                                               "repeat_last_n": -1}).json()
    vllm = http.post("/v1/completions", json={**ask, "max_tokens": 8,
                                              "repetition_penalty": 1.3}).json()
    assert llama["choices"][0]["text"] == vllm["choices"][0]["text"]
    r = http.post("/v1/completions", json={**ask, "max_tokens": 3, "n_probs": 2})
    assert len(r.json()["choices"][0]["logprobs"]["top_logprobs"][0]) >= 2
    r = http.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "Hi"}], "n_predict": 3, "n_probs": 2,
        "temperature": 0})
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) <= 3 and all(len(c["top_logprobs"]) == 2 for c in content)


def test_an_answer_carries_its_prompt_as_the_model_read_it(http, reference_model):
    answer = complete(http, prompt=PROMPT, n_predict=2)
    ids = reference_model.tokenize(PROMPT, add_special=True, parse_special=True)
    assert answer["prompt"] == b"".join(reference_model.token_bytes(ids)).decode()
    only = complete(http, prompt=PROMPT, n_predict=2, response_fields=["prompt", "content"])
    assert set(only) == {"prompt", "content"}


def test_a_final_assistant_message_is_continued_and_templated_as_llamacpp_asks(
        http, reference_model):
    turns = [{"role": "user", "content": "Count to five."},
             {"role": "assistant", "content": "One, two,"}]
    r = http.post("/apply-template", json={"messages": turns, "continue_final_message": True,
                                           "add_generation_prompt": False}).json()
    assert r["prompt"] == reference_model.chat_text(turns, continue_final=True)
    assert r["prompt"].endswith("One, two,")
    bare = http.post("/apply-template", json={"messages": turns[:1],
                                              "add_generation_prompt": False}).json()
    assert bare["prompt"] == reference_model.chat_text(turns[:1], generation_prompt=False)
    ids = reference_model.encode_chat(turns, continue_final=True)
    ref = plain(reference_model, ids, 6)
    answer = http.post("/v1/chat/completions", json={
        "messages": turns, "continue_final_message": True, "add_generation_prompt": False,
        "max_tokens": 6, "temperature": 0}).json()
    assert answer["choices"][0]["message"]["content"] == ref.text
    both = http.post("/v1/chat/completions", json={"messages": turns, "max_tokens": 2,
                                                   "continue_final_message": True})
    assert "add_generation_prompt" in assert_openai_error(both, 400)["message"]


def test_token_counts_of_a_chat_and_a_response_are_their_prompts(http, reference_model):
    messages = [{"role": "user", "content": "Hi"}]
    expected = len(reference_model.encode_chat(messages))
    chat = http.post("/chat/completions/input_tokens", json={"messages": messages}).json()
    response = http.post("/v1/responses/input_tokens", json={"input": "Hi"}).json()
    assert chat["input_tokens"] == response["input_tokens"] == expected


def test_llamacpps_response_formats_and_an_assistants_reasoning_are_taken(http):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for fmt in ({"type": "json_object", "schema": schema},
                {"type": "json_schema", "json_schema": {"schema": schema}}):  # no name
        r = http.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "A number?"}], "response_format": fmt,
            "max_tokens": 24, "temperature": 0})
        assert r.status_code == 200, r.text
        assert set(json.loads(r.json()["choices"][0]["message"]["content"])) == {"n"}
    r = http.post("/v1/chat/completions", json={"max_tokens": 2, "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."},
        {"role": "user", "content": "Bye"}]})
    assert r.status_code == 200, r.text


def test_return_progress_reports_the_prompts_read_before_the_first_token(slow_decoder,
                                                                        monkeypatch):
    from specdecode.app.server import streaming

    monkeypatch.setattr(streaming, "PROGRESS_POLL_SECONDS", 0.005)  # see every chunk's step
    prompt = "the fox and the dog " * 22  # past one prefill chunk of the tiny model
    app = create_app(slow_decoder, prefix_cache_bytes=1 << 26)
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        body = {"prompt": prompt, "max_tokens": 3, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        events = [json.loads(e) for e in read_events(c.send(c.build_request(
            "POST", "/v1/completions", json={**body, "return_progress": True}), stream=True))
            if e != "[DONE]"]
        plain = [json.loads(e) for e in read_events(c.send(c.build_request(
            "POST", "/v1/completions", json=body), stream=True)) if e != "[DONE]"]
        again = [json.loads(e)["prompt_progress"] for e in read_events(c.send(c.build_request(
            "POST", "/v1/completions", json={**body, "return_progress": True}), stream=True))
            if e != "[DONE]" and "prompt_progress" in e]
    # a kept prompt: its read starts at its cached tokens and ends at the whole
    assert again[0]["cache"] == again[0]["processed"] > 0
    assert again[-1]["processed"] == again[-1]["total"] > again[0]["cache"]
    reports = [e["prompt_progress"] for e in events if "prompt_progress" in e]
    total = events[-1]["usage"]["prompt_tokens"]
    assert len(reports) >= 2 and reports[0]["processed"] == reports[0]["cache"] == 0
    assert [r["processed"] for r in reports] == sorted({r["processed"] for r in reports})
    assert reports[-1]["processed"] == reports[-1]["total"] == total
    assert all(e["choices"] == [] for e in events if "prompt_progress" in e)
    assert not any("prompt_progress" in e for e in plain)
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert text == "".join(e["choices"][0]["text"] for e in plain if e["choices"])


def test_timings_per_token_times_a_chat_streams_chunks_and_its_end(http):
    events = [json.loads(e) for e in read_events(http.send(http.build_request(
        "POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True},
            "timings_per_token": True}), stream=True)) if e != "[DONE]"]
    opening, chunks, end = events[0], events[1:-1], events[-1]
    assert opening["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "timings" not in opening and chunks and all("timings" in c for c in chunks)
    assert end["choices"] == [] and end["timings"]["predicted_n"] == (
        end["usage"]["completion_tokens"])
    assert end["timings"]["prompt_n"] + end["timings"]["cache_n"] == end["usage"]["prompt_tokens"]


def test_a_responses_stream_reports_its_prompts_read_and_timings_when_asked(http):
    body = {"input": "Say hi", "max_output_tokens": 5, "temperature": 0, "stream": True}
    asked = [json.loads(e) for e in read_events(http.send(http.build_request(
        "POST", "/v1/responses", json={**body, "return_progress": True,
                                       "timings_per_token": True}), stream=True))]
    plain = [json.loads(e) for e in read_events(http.send(http.build_request(
        "POST", "/v1/responses", json=body), stream=True))]
    reads = [e["prompt_progress"] for e in asked if "prompt_progress" in e]
    completed = asked[-1]
    assert reads and reads[-1]["processed"] == reads[-1]["total"] == (
        completed["response"]["usage"]["input_tokens"])
    assert all(e["type"] == "response.in_progress" for e in asked if "prompt_progress" in e)
    deltas = [e for e in asked if e["type"] == "response.output_text.delta"]
    assert deltas and all("timings" in e for e in deltas)
    assert completed["timings"]["predicted_n"] == completed["response"]["usage"]["output_tokens"]
    assert not any("timings" in e or "prompt_progress" in e for e in plain)
    assert [e["sequence_number"] for e in asked] == list(range(len(asked)))


def test_verbose_answers_carry_the_prompt_as_the_model_read_it(http, reference_model):
    messages = [{"role": "system", "content": "Book"}, {"role": "user", "content": "Best?"}]
    body = {"messages": messages, "max_tokens": 2}
    answer = http.post("/v1/chat/completions", json={**body, "verbose": True}).json()
    assert answer["__verbose"]["prompt"] == reference_model.chat_text(messages)
    assert "__verbose" not in http.post("/v1/chat/completions", json=body).json()
    streamed = http.post("/v1/chat/completions", json={**body, "verbose": True, "stream": True})
    assert "verbose" in assert_openai_error(streamed, 400)["message"]


def test_a_conversation_ending_in_two_assistant_messages_is_refused(http):
    r = http.post("/v1/chat/completions", json={"max_tokens": 2, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
        {"role": "assistant", "content": "there"}]})
    assert "two assistant messages" in assert_openai_error(r, 400)["message"]


@pytest.mark.real_model
def test_llamacpps_penalties_count_its_window_as_plain_decoding_does(default_model):
    """repeat_penalty, presence and frequency over the last repeat_last_n tokens, prompt
    included (llama.cpp's penalties), on /completion and the OpenAI routes alike: the library's
    plain decoding with that window, speculative or not (SmolLM2-135M, whose answer the window
    changes)."""
    from specdecode.core.penalties import Penalties

    ids = default_model.tokenize(PROMPT, add_special=True, parse_special=True)
    penalties = Penalties(presence=0.4, frequency=0.3, repetition=1.3, window=8)
    ref = SpecDecoder(default_model, "ar").generate(ids, max_new_tokens=12, temperature=0.0,
                                                    penalties=penalties)
    fields = {"repeat_penalty": 1.3, "repeat_last_n": 8, "presence_penalty": 0.4,
              "frequency_penalty": 0.3}
    with running(create_app(default_model)) as srv, httpx.Client(base_url=srv.url,
                                                                 timeout=60) as c:
        answers = [c.post("/completion", json={"prompt": PROMPT, "n_predict": 12,
                                               "temperature": 0, **fields,
                                               "speculative": {"method": m}}).json()["content"]
                   for m in ("ar", "lookup")]
        answers.append(c.post("/v1/completions", json={
            "prompt": PROMPT, "max_tokens": 12, "temperature": 0, **fields}).json()[
            "choices"][0]["text"])
        # OpenAI's and vLLM's counts: the generated text, no window
        unwindowed = c.post("/v1/completions", json={
            "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "presence_penalty": 0.4,
            "frequency_penalty": 0.3, "repetition_penalty": 1.3}).json()["choices"][0]["text"]
        default = c.post("/completion", json={"prompt": PROMPT, "n_predict": 2,
                                               "repeat_penalty": 1.3}).json()
    assert answers == [ref.text] * 3 and unwindowed != ref.text
    assert default["generation_settings"]["repeat_last_n"] == 64



def test_slots_are_off_unless_asked_for(http):
    r = http.get("/slots")
    assert r.status_code == 501 and "--slots" in r.json()["error"]["message"]


def test_slots_show_a_running_request_and_free_its_place_when_its_client_leaves(slow_decoder):
    app = create_app(slow_decoder, max_batch=2, slots=True)
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        assert [s["is_processing"] for s in c.get("/slots").json()] == [False, False]
        with c.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 40,
                                                    "temperature": 0, "stream": True}) as r:
            next(line for line in r.iter_lines() if line.startswith("data: "))  # decoding
            busy = c.get("/slots").json()
        assert [s["is_processing"] for s in busy] == [True, False]
        assert busy[0]["n_decoded"] >= 1 and busy[0]["n_prompt_tokens"] > 0
        assert busy[0]["n_ctx"] == slow_decoder.model.context_length
        deadline = time.monotonic() + 30  # the engine drops a gone client's job at a step
        while c.get("/slots").json()[0]["is_processing"]:
            assert time.monotonic() < deadline, "the place was not freed"
            time.sleep(0.05)


def test_a_whole_answer_whose_client_left_frees_its_place_while_its_tokens_still_come(
        slow_decoder):
    app = create_app(slow_decoder, max_batch=1, slots=True)
    with running(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        with pytest.raises(httpx.ReadTimeout):  # a token every step: never a silent 0.5 s
            c.post("/completion", json={"prompt": PROMPT, "n_predict": 400, "temperature": 0},
                   timeout=0.3)
        deadline = time.monotonic() + 3  # 400 steps would take 16 s
        while c.get("/slots").json()[0]["is_processing"]:
            assert time.monotonic() < deadline, "the place was not freed"
            time.sleep(0.05)


@pytest.mark.real_model
def test_props_name_the_gguf_file_a_model_was_loaded_from(default_model):
    with running(create_app(default_model)) as srv, httpx.Client(base_url=srv.url,
                                                                 timeout=60) as c:
        path = c.get("/props").json()["model_path"]
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
