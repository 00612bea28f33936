"""The server batches: concurrent requests share the engine's steps, each gets the output it gets
alone, many clients at once lose nothing, and the metrics show the batch."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import check_stream, running, stream_post

from specdecode.app.server import create_app
from specdecode.pipeline import SpecDecoder

PROMPTS = ["The quick brown fox jumps over the lazy dog. The quick brown fox",
           "one two three one two three one two", "hello", "a b c d e f g a b c d",
           "Once upon a time there was", "1 2 3 4 5 6 7 8 9 10 11 12", "red green blue red green",
           "the cat sat on the mat and the cat"]
METHODS = ["ar", "lookup", "suffix"]


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, max_queue=64, max_batch=16)) as srv:
        yield srv


def test_sixteen_concurrent_greedy_requests_of_mixed_methods_get_what_each_gets_alone(
        server, reference_model):
    cases = [(PROMPTS[i % len(PROMPTS)], METHODS[i % len(METHODS)], 12 + i % 5)
             for i in range(16)]
    expected = [SpecDecoder(reference_model, method).generate(prompt, chat=False,
                                                              max_new_tokens=n)
                for prompt, method, n in cases]

    def one(case):
        prompt, method, n = case
        with httpx.Client(timeout=120) as client:
            r = client.post(server.v1 + "/completions", json={
                "prompt": prompt, "max_tokens": n, "temperature": 0,
                "speculative": {"method": method}})
            return r.status_code, r.json()

    steps = metric(server, "specdecode_steps_total")
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, cases))
    assert [status for status, _ in answers] == [200] * 16
    forwards = sum(body["usage"]["speculative"]["target_forwards"] for _, body in answers)
    assert metric(server, "specdecode_steps_total") - steps < forwards  # steps were shared
    for (_, body), ref, (_, method, _) in zip(answers, expected, cases):
        assert body["choices"][0]["text"] == ref.text
        assert body["usage"]["completion_tokens"] == ref.stats.new_tokens
        assert body["usage"]["speculative"]["method"] == method


def test_sixty_four_concurrent_streaming_clients_all_get_well_formed_answers(server):
    def one(i: int):
        with httpx.Client(timeout=300) as client:
            body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 6 + i % 7,
                    "temperature": 0.7 if i % 2 else 0, "seed": i}
            return stream_post(client, server.v1 + "/completions", body)

    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, range(64)))
    assert [status for status, _ in results] == [200] * 64
    for _, events in results:
        final = check_stream(events, "text_completion")
        assert 1 <= final["usage"]["completion_tokens"] <= 12


def metric(server, name: str) -> float:
    return metrics(server)[name]


def metrics(server) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics").text
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_metrics_show_the_batch_and_its_rows(server):
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: httpx.post(server.v1 + "/completions", timeout=120, json={
            "prompt": PROMPTS[i], "max_tokens": 8, "temperature": 0}), range(4)))
    values = metrics(server)
    assert values["specdecode_steps_total"] > 0
    assert values["specdecode_step_rows_total"] >= values["specdecode_steps_total"]
    assert values["specdecode_prefill_rows_total"] > 0
    assert "specdecode_batch_size" in values and "specdecode_draft_rows_total" in values


def test_a_slow_grammar_compile_holds_its_request_only(served_model, monkeypatch):
    """A schema is compiled beside the engine, not on its thread: while one compiles for seconds,
    another request is answered."""
    import threading

    from specdecode.grammars import grammar_compiler

    compiler = grammar_compiler(served_model)
    real = compiler.compile
    slow_schema = {"type": "object", "properties": {"slow": {"type": "string"}}}
    started = threading.Event()

    def slow(kind, source=None):
        if source == slow_schema:
            started.set()
            time.sleep(3)
        return real(kind, source)

    monkeypatch.setattr(compiler, "compile", slow)
    with running(create_app(served_model)) as srv, httpx.Client(base_url=srv.url,
                                                                 timeout=60) as client:
        done = {}

        def post_slow():
            r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4,
                                                     "json_schema": slow_schema})
            done["slow"] = (time.monotonic(), r.status_code)

        thread = threading.Thread(target=post_slow)
        thread.start()
        assert started.wait(30)
        r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 4})
        done["fast"] = (time.monotonic(), r.status_code)
        thread.join()
    assert done["fast"][1] == done["slow"][1] == 200
    assert done["fast"][0] < done["slow"][0]
