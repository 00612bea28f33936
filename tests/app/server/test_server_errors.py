"""Bad input never crashes the server: each case gets a 4xx with OpenAI's error body, and the
server keeps answering afterwards."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import assert_openai_error, running

from specdecode.app.server import create_app

C, CH = "/v1/completions", "/v1/chat/completions"
P = {"prompt": "hello", "max_tokens": 4}
M = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
LONG_TEXT = "word " * 300  # far more than the tiny model's 128-token context

# name: (path, body (dict, list or raw bytes), status, expected param, text in the message)
BAD = {
    "malformed_json": (C, b'{"prompt": "hi",', 400, None, "not valid JSON"),
    "nan_literal": (C, b'{"prompt": "hi", "temperature": NaN}', 400, "temperature", None),
    "body_is_a_list": (C, [1, 2], 400, None, None),
    "empty_body": (C, b"", 400, None, None),
    "missing_prompt": (C, {"max_tokens": 4}, 400, "prompt", None),
    "prompt_wrong_type": (C, {**P, "prompt": 5}, 400, "prompt", None),
    "prompt_empty_list": (C, {**P, "prompt": []}, 400, "prompt", None),
    "prompt_mixed_list": (C, {**P, "prompt": ["a", [1, 2]]}, 400, "prompt", None),
    "token_id_outside_vocabulary": (C, {**P, "prompt": [10**9]}, 400, None, "token ids"),
    "empty_prompt": (C, {**P, "prompt": ""}, 400, None, "empty"),
    "prompt_longer_than_context": (C, {**P, "prompt": LONG_TEXT}, 400, None, "context window"),
    "max_tokens_string": (C, {**P, "max_tokens": "abc"}, 400, "max_tokens", None),
    "max_tokens_numeric_string": (C, {**P, "max_tokens": "5"}, 400, "max_tokens", None),
    "max_tokens_float": (C, {**P, "max_tokens": 4.5}, 400, "max_tokens", None),
    "max_tokens_zero": (C, {**P, "max_tokens": 0}, 400, "max_tokens", None),
    "max_tokens_negative": (C, {**P, "max_tokens": -5}, 400, "max_tokens", None),
    "max_tokens_huge": (C, {**P, "max_tokens": 10**12}, 400, "max_tokens", "context length"),
    "temperature_negative": (C, {**P, "temperature": -0.5}, 400, "temperature", None),
    "temperature_string": (C, {**P, "temperature": "hot"}, 400, "temperature", None),
    "top_p_zero": (C, {**P, "top_p": 0}, 400, "top_p", None),
    "top_p_above_one": (C, {**P, "top_p": 1.5}, 400, "top_p", None),
    "top_k_negative": (C, {**P, "top_k": -3}, 400, "top_k", None),
    "seed_too_large": (C, {**P, "seed": 2**70}, 400, "seed", None),
    "n_zero": (C, {**P, "n": 0}, 400, "n", None),
    "n_past_the_batch": (C, {**P, "n": 9}, 400, "n", "at most 8 together"),
    "prompts_times_n_past_the_batch": (C, {**P, "prompt": ["a", "b", "c"], "n": 3}, 400, "n",
                                       "make 9 choices"),
    "best_of_not_n": (C, {**P, "n": 2, "best_of": 3}, 400, None, "best_of must equal n"),
    "stream_not_bool": (C, {**P, "stream": "yes"}, 400, "stream", None),
    "stop_wrong_type": (C, {**P, "stop": 5}, 400, "stop", None),
    "too_many_stops": (C, {**P, "stop": list("abcde")}, 400, "stop", None),
    "completion_logprobs_above_5": (C, {**P, "logprobs": 6}, 400, "logprobs", None),
    "completion_logprobs_bool": (C, {**P, "logprobs": True}, 400, "logprobs", None),
    "chat_top_logprobs_above_20": (CH, {**M, "logprobs": True, "top_logprobs": 21}, 400,
                                   "top_logprobs", None),
    "chat_top_logprobs_without_logprobs": (CH, {**M, "top_logprobs": 2}, 400, None,
                                           "top_logprobs needs logprobs"),
    "max_tokens_zero_without_echo": (C, {**P, "max_tokens": 0, "logprobs": 1}, 400, "max_tokens",
                                     None),
    "presence_penalty_too_large": (C, {**P, "presence_penalty": 2.5}, 400, "presence_penalty",
                                   None),
    "repetition_penalty_zero": (C, {**P, "repetition_penalty": 0}, 400, "repetition_penalty",
                                None),
    "min_p_above_one": (C, {**P, "min_p": 1.5}, 400, "min_p", None),
    "logit_bias_key_not_an_id": (C, {**P, "logit_bias": {"hello": 1}}, 400, "logit_bias",
                                 "token ids"),
    "logit_bias_value_too_large": (C, {**P, "logit_bias": {"5": 200}}, 400, "logit_bias",
                                   "[-100, 100]"),
    "logit_bias_token_past_vocabulary": (C, {**P, "logit_bias": {str(10**7): 1}}, 400, None,
                                         "logit bias token ids must be in"),
    "suffix_without_fim_tokens": (C, {**P, "suffix": "x"}, 400, None,
                                  "no fill-in-the-middle tokens"),
    "suffix_with_token_ids": (C, {**P, "prompt": [1, 2], "suffix": "x"}, 400, None,
                              "suffix needs text prompts"),
    "unknown_model": (C, {**P, "model": "gpt-4"}, 404, "model", "does not exist"),
    "unknown_method": (C, {**P, "speculative": {"method": "nosuch"}}, 400,
                       "speculative.method", "unknown speculative method"),
    "draft_nodes_zero": (C, {**P, "speculative": {"method": "lookup", "max_draft_nodes": 0}},
                         400, "speculative.max_draft_nodes", None),
    "draft_depth_huge": (C, {**P, "speculative": {"max_draft_depth": 10**6}}, 400,
                         "speculative.max_draft_depth", None),
    "speculative_typo": (C, {**P, "speculative": {"methd": "ar"}}, 400, "speculative.methd", None),
    "draft_without_draft_model": (C, {**P, "speculative": {"method": "draft"}}, 400, None,
                                  "--draft-model"),
    "chat_messages_missing": (CH, {"max_tokens": 4}, 400, "messages", None),
    "chat_messages_empty": (CH, {**M, "messages": []}, 400, "messages", None),
    "chat_messages_not_list": (CH, {**M, "messages": "hi"}, 400, "messages", None),
    "chat_bad_role": (CH, {**M, "messages": [{"role": "wizard", "content": "hi"}]}, 400,
                      "messages.0.role", None),
    "chat_content_wrong_type": (CH, {**M, "messages": [{"role": "user", "content": 5}]}, 400,
                                "messages.0.content", None),
    "chat_image_part": (CH, {**M, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, 400,
        "messages.0.content", "text parts"),
    "chat_max_completion_tokens_huge": (CH, {**M, "max_completion_tokens": 10**6}, 400,
                                        "max_tokens", None),
    "chat_unknown_model_streamed": (CH, {**M, "model": "nope", "stream": True}, 404, "model", None),
    "chat_too_long_streamed": (CH, {**M, "stream": True, "messages": [
        {"role": "user", "content": LONG_TEXT}]}, 400, None, "context window"),
    "chat_temperature_negative": (CH, {**M, "temperature": -1}, 400, "temperature", None),
    "unknown_field": (CH, {**M, "frobnicate": 1}, 400, "frobnicate", "unknown field"),
    "tool_choice_without_tools": (CH, {**M, "tool_choice": "required"}, 400, None,
                                  "tool_choice needs tools"),
    "tool_choice_malformed": (CH, {**M, "tool_choice": {"name": "f"}}, 400, "tool_choice", None),
    "tool_call_arguments_not_json": (CH, {**M, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {
            "name": "f", "arguments": "{"}}]}]}, 400, None, "not JSON"),
    "unknown_field_in_message": (CH, {**M, "messages": [{"role": "user", "content": "hi",
                                                        "nickname": "x"}]}, 400,
                                 "messages.0.nickname", "unknown field"),
    "schema_invalid": (CH, {**M, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, 400, None, "cannot be compiled"),
    "schema_not_an_object": (C, {**P, "json_schema": "{}"}, 400, "json_schema", None),
    "json_schema_format_without_schema": (CH, {**M, "response_format": {"type": "json_schema"}},
                                          400, "response_format", "json_schema is required"),
    "response_format_unknown_type": (CH, {**M, "response_format": {"type": "yaml"}}, 400,
                                     "response_format.type", None),
    "gbnf_invalid": (C, {**P, "grammar": 'root ::= "yes" | ('}, 400, None, "cannot be compiled"),
    "two_output_formats": (C, {**P, "grammar": 'root ::= "a"', "json_schema": {}}, 400, None,
                           "not json_schema and grammar"),
    "prediction_of_an_unknown_type": (CH, {**M, "prediction": {"type": "diff", "content": "x"}},
                                      400, "prediction.type", None),
    "prediction_of_an_image": (CH, {**M, "prediction": {"type": "content", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}}, 400, "prediction.content",
        "list of text parts"),
}


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_is_a_4xx_with_openai_error(client, name):
    path, body, status, param, text = BAD[name]
    if isinstance(body, bytes):
        r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        r = client.post(path, json=body)
    error = assert_openai_error(r, status)
    if param is not None:
        assert error["param"] == param, error
    if text is not None:
        assert text in error["message"], error


@pytest.mark.parametrize("method,path,status", [("GET", "/v1/nothing", 404),
                                                ("GET", C, 405), ("GET", "/v1/models/nope", 404)])
def test_unknown_routes(client, method, path, status):
    assert_openai_error(client.request(method, path), status)


def test_an_unknown_route_is_named_with_the_routes_served(client):
    error = assert_openai_error(client.post("/v1/embeddings", json={"input": "hi"}), 404)
    assert error["message"].startswith("no route POST /v1/embeddings; this server has ")
    for route in ("POST /v1/chat/completions", "POST /v1/responses", "POST /v1/messages",
                  "GET /v1/models", "POST /completion", "POST /tokenize", "GET /props"):
        assert route in error["message"]


@pytest.mark.parametrize("path,body", [(C, {**P, "prompt": LONG_TEXT}), (CH, {**M, "messages": [
    {"role": "user", "content": LONG_TEXT}]})])
def test_a_prompt_past_the_context_has_the_code_openais_clients_check(client, path, body):
    assert assert_openai_error(client.post(path, json=body), 400)["code"] == \
        "context_length_exceeded"


# every field of a request set to values of every JSON type: never a 5xx
FUZZ_VALUES = [None, True, -1, 0, 1, 1.5, 10**30, "", "x", [], [1], ["x"], {}, {"a": 1}]
FUZZ_FIELDS = ["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k",
               "seed", "stop", "n", "stream", "stream_options", "speculative", "logit_bias",
               "presence_penalty", "frequency_penalty", "repetition_penalty", "min_p"]


def test_fuzzed_fields_never_answer_5xx(client):
    for path, base in ((C, {**P, "max_tokens": 2}), (CH, {**M, "max_tokens": 2})):
        for field in FUZZ_FIELDS:
            for value in FUZZ_VALUES:
                r = client.post(path, json={**base, field: value})
                assert r.status_code in (200, 400, 404), (path, field, value, r.text)
                if r.status_code != 200:
                    assert_openai_error(r, r.status_code)


def test_server_still_answers_after_bad_input(client):
    r = client.post(C, json=P)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    r = client.post(CH, json=M)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_failed_step_answers_its_request_with_the_kernels_line_and_the_server_goes_on(
        tiny_real_vocab_model):
    """A kernel that fails mid-step (here: the target's first batched forward, as if its scratch
    could not be allocated) ends the requests of that step with a 500 naming the kernel; the
    next request is served as usual."""
    from specdecode.errors import KernelError
    from specdecode.models import load_model
    from specdecode.pipeline import SpecDecoder

    model = load_model(str(tiny_real_vocab_model))
    forward, failures = model.target.hidden_batch, ["kernel attention failed with status 2 (no "
                                                     "memory for its scratch)"]

    def fails_once(*args, **kwargs):
        if failures:
            raise KernelError(failures.pop())
        return forward(*args, **kwargs)

    model.target.hidden_batch = fails_once
    body = {"prompt": "hello", "max_tokens": 4, "temperature": 0}
    with running(create_app(SpecDecoder(model, "ar"))) as srv, httpx.Client(timeout=60) as client:
        failed = client.post(srv.v1 + "/completions", json=body)
        assert assert_openai_error(failed, 500)["code"] == "kernel_error"
        assert "kernel attention failed with status 2" in failed.json()["error"]["message"]
        served = client.post(srv.v1 + "/completions", json=body)
    assert served.status_code == 200 and served.json()["usage"]["completion_tokens"] >= 1


def deep_schema(depth: int) -> bytes:
    return (b'{"prompt": "hi", "max_tokens": 4, "json_schema": '
            + b'{"type": "array", "items": ' * depth + b'{"type": "string"}' + b"}" * depth + b"}")


@pytest.mark.parametrize("depth", [200, 5000])
def test_a_schema_nested_too_deeply_is_a_400(client, depth):
    r = client.post(C, content=deep_schema(depth), headers={"Content-Type": "application/json"})
    assert_openai_error(r, 400)
    assert client.get("/health").status_code == 200


def test_a_schema_beyond_the_grammar_engines_limits_is_a_400(client):
    schema = {"enum": [f"v{i}" for i in range(300_000)]}
    r = client.post(C, json={**P, "json_schema": schema})
    error = assert_openai_error(r, 400)
    assert "too big" in error["message"]
