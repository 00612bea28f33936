"""Fill-in-the-middle through the server: llama.cpp's `/infill` answered for the bodies its editor
plugins send (recorded in infill_bodies/), in the shape they read, streamed and not; OpenAI's
`suffix` on /v1/completions through the `openai` client; the middle is what the library decodes
for the same fill-in-the-middle prompt; a model without FIM tokens gets a clear 400."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import httpx
import openai
import pytest
from server_helpers import assert_openai_error, running

from specdecode.app.server import create_app
from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

BODIES = Path(__file__).parent / "infill_bodies"
# what llama.vim requires of an answer before it reads it (autoload/llama.vim, s:fim_on_response)
LLAMA_VIM_ACCEPTS = re.compile(r'^\s*{.*"content"\s*:"', re.S)


def body(name: str, **changes) -> dict:
    return {**json.loads((BODIES / f"{name}.json").read_text()), **changes}


@pytest.fixture(scope="module")
def fim_model(tiny_fim_model):
    return load_model(str(tiny_fim_model))


@pytest.fixture(scope="module")
def reference(tiny_fim_model):
    return load_model(str(tiny_fim_model))


@pytest.fixture(scope="module")
def server(fim_model):
    with running(create_app(fim_model, max_queue=64)) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.v1.removesuffix("/v1"), timeout=60) as c:
        yield c


def middle(model, prefix, suffix, before="", extra=(), max_new=128, method="lookup"):
    """The library's greedy middle for the same prompt."""
    ids, _ = model.encode_fim(prefix, suffix, before, list(extra))
    return SpecDecoder(model, method).generate(ids, max_new_tokens=max_new,
                                               stop_token_ids=model.fim.ends)


def post_as_curl(url: str, payload: dict) -> tuple[int, str]:
    """POST as llama.vim's curl command does, with its always-sent `Authorization: Bearer `
    (an empty key; HTTP client libraries refuse to send that header)."""
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    data = json.dumps(payload).encode()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer \r\nConnection: close\r\n"
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    head, _, text = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), text.decode()


def test_llama_vims_request_gets_an_answer_it_accepts(server, reference):
    """Compact JSON on one line, response_fields as flat keys, the library's middle (the body's
    n_indent rule and time limit may end it early: then a prefix of it, cut at a line)."""
    status, text = post_as_curl(server.v1, body("llama_vim"))
    assert status == 200, text
    assert LLAMA_VIM_ACCEPTS.match(text) and "\n" not in text
    answer = json.loads(text)
    assert set(answer) == set(body("llama_vim")["response_fields"])
    assert all(isinstance(answer[k], (int, float)) for k in answer if k.startswith("timings/"))
    full = middle(reference, "import os\n\n\ndef main():\n", "\n    return 0\n", "    print(",
                  [("src/utils.py", "def helper(x):\n    return x * 2\n")]).text
    assert full.startswith(answer["content"])
    assert answer["content"] == full or answer["content"].endswith("\n")
    assert answer["timings/predicted_n"] > 0 and answer["tokens_cached"] > answer[
        "timings/prompt_n"] > 20


def test_without_the_editors_limits_the_middle_is_the_librarys(http, reference):
    r = http.post("/infill", json=body("llama_vim", n_indent=0, t_max_predict_ms=-1,
                                       response_fields=None))
    answer = r.json()
    full = middle(reference, "import os\n\n\ndef main():\n", "\n    return 0\n", "    print(",
                  [("src/utils.py", "def helper(x):\n    return x * 2\n")])
    assert answer["content"] == full.text
    assert answer["tokens_predicted"] == full.stats.new_tokens
    assert answer["stop_type"] == ("eos" if full.finish_reason == "stop" else "limit")


def test_llama_vscodes_request_gets_n_cmpl_answers_with_its_status_fields(http):
    r = http.post("/infill", json=body("llama_vscode"))
    assert r.status_code == 200, r.text
    answers = r.json()
    assert isinstance(answers, list) and [a["index"] for a in answers] == [0, 1, 2]
    assert len({a["content"] for a in answers}) == 1  # greedy: one middle, copied
    for a in answers:
        assert isinstance(a["generation_settings"]["n_ctx"], int) and a["tokens_cached"] > 0
        assert all(isinstance(a["timings"][k], (int, float)) for k in (
            "prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
            "predicted_per_second"))


def test_the_warm_up_request_is_answered_at_once_with_nothing(http):
    r = http.post("/infill", json=body("llama_vim_warmup"))
    assert r.status_code == 200 and r.json() == {}


def test_streamed_infill_sends_deltas_then_the_whole_answer(http):
    request = body("llama_vim", n_indent=0, t_max_predict_ms=-1, response_fields=None)
    whole = http.post("/infill", json=request).json()
    with http.stream("POST", "/infill", json={**request, "stream": True}) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: {") and ": " not in line[6:] for line in lines)
    events = [json.loads(line[6:]) for line in lines]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert "".join(e["content"] for e in events) == whole["content"]
    assert events[-1]["tokens_predicted"] == whole["tokens_predicted"]


def test_an_infill_field_the_server_cannot_honour_is_refused_by_name(http):
    r = http.post("/infill", json=body("llama_vscode", lora=[{"id": 0, "scale": 0.5}]))
    assert r.status_code == 400 and "lora" in r.text
    r = http.post("/infill", json=body("llama_vscode", input_prefx="typo"))
    assert r.status_code == 400 and "input_prefx" in r.text


def test_openai_suffix_fills_the_middle(server, reference):
    with openai.OpenAI(base_url=server.v1, api_key="x", max_retries=0) as client:
        name = client.models.list().data[0].id
        kwargs = dict(model=name, prompt="def area(r):\n    ", suffix="\n    return a\n",
                      max_tokens=24, temperature=0)
        resp = client.completions.create(**kwargs)
        streamed = "".join(c.choices[0].text for c in client.completions.create(
            stream=True, **kwargs))
    ref = middle(reference, "def area(r):\n    ", "\n    return a\n", max_new=24)
    assert resp.choices[0].text == streamed == ref.text


def test_a_model_without_fim_tokens_gets_a_clear_400(tiny_real_vocab_model):
    with running(create_app(load_model(str(tiny_real_vocab_model)))) as srv, httpx.Client(
            timeout=60) as c:
        r = c.post(srv.v1.removesuffix("/v1") + "/infill", json=body("llama_vscode"))
        error = assert_openai_error(r, 400)
        assert "no fill-in-the-middle tokens" in error["message"]
        r = c.post(srv.v1 + "/completions", json={"prompt": "a", "suffix": "b", "max_tokens": 2})
        assert "no fill-in-the-middle tokens" in assert_openai_error(r, 400)["message"]
