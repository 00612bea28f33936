"""Concurrency: one engine, a bounded queue, 503 when full, disconnects and time limits free the
engine, and shutdown never hangs."""

from __future__ import annotations

import json
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import httpx
from server_helpers import assert_openai_error, check_stream, running, stream_post

from specdecode.app.server import create_app

LONG = 120  # tokens; on the slow model ≈ 5 s of generation


def test_32_concurrent_streams_all_complete(served_model):
    with running(create_app(served_model, max_queue=32)) as srv:
        def one(i: int) -> tuple[int, list[str]]:
            with httpx.Client(timeout=120) as client:
                body = {"prompt": f"request number {i}:", "max_tokens": 8, "temperature": 0}
                return stream_post(client, srv.v1 + "/completions", body)

        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(one, range(32)))
    assert [status for status, _ in results] == [200] * 32, results
    for _, events in results:
        final = check_stream(events, "text_completion")
        assert final["usage"]["completion_tokens"] >= 1


def first_event_of_long_stream(client: httpx.Client, url: str):
    """Start a long streamed generation and return (response, its line iterator) once the first
    chunk arrived, i.e. once the job runs on the engine rather than waiting in the queue."""
    request = client.build_request("POST", url, json={"prompt": "hello", "max_tokens": LONG,
                                                      "temperature": 0, "stream": True})
    response = client.send(request, stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    assert next(line for line in lines if line.startswith("data: "))
    return response, lines


def test_full_queue_answers_503_then_recovers(slow_decoder):
    with running(create_app(slow_decoder, max_queue=1)) as srv, httpx.Client(timeout=60) as client:
        url = srv.v1 + "/completions"
        running_stream, _ = first_event_of_long_stream(client, url)
        with ThreadPoolExecutor(4) as pool:  # one fits in the queue, the others are turned away
            futures = [pool.submit(httpx.post, url, json={"prompt": "hi", "max_tokens": 2},
                                   timeout=60) for _ in range(4)]
            # the first answer is a 503, at once, while the long one holds the engine (a fixed
            # sleep was too short for 4 connections on a busy machine: all came after the close)
            wait(futures, timeout=30, return_when=FIRST_COMPLETED)
            running_stream.close()  # drop the long one, so the queued request runs soon
            responses = [f.result() for f in futures]
        statuses = sorted(r.status_code for r in responses)
        assert statuses.count(503) >= 1 and set(statuses) <= {200, 503}, statuses
        for r in responses:
            if r.status_code == 503:
                assert int(r.headers["Retry-After"]) >= 1
                assert assert_openai_error(r, 503)["code"] == "server_busy"
        later = client.post(url, json={"prompt": "hi", "max_tokens": 2})
        assert later.status_code == 200 and later.json()["choices"][0]["finish_reason"]


def test_disconnect_frees_the_engine(slow_decoder):
    with running(create_app(slow_decoder)) as srv:
        url = srv.v1 + "/completions"
        with httpx.Client(timeout=60) as client:
            response, _ = first_event_of_long_stream(client, url)
            response.close()  # the client goes away after one chunk of LONG tokens
        started = time.monotonic()
        with httpx.Client(timeout=60) as client:
            response, _ = first_event_of_long_stream(client, url)
            waited = time.monotonic() - started
            response.close()
    assert waited < 2.0, f"the next request waited {waited:.1f} s for the engine"


def test_request_timeout(slow_decoder):
    with running(create_app(slow_decoder, request_timeout=1.0)) as srv, \
            httpx.Client(timeout=60) as client:
        url = srv.v1 + "/completions"
        body = {"prompt": "hello", "max_tokens": LONG, "temperature": 0}
        started = time.monotonic()
        error = assert_openai_error(client.post(url, json=body), 504)
        assert error["code"] == "request_timeout" and time.monotonic() - started < 3
        status, events = stream_post(client, url, body)  # after the headers: an error event
        assert status == 200 and events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "request_timeout"
        assert client.post(url, json={"prompt": "hi", "max_tokens": 2}).status_code == 200


def test_shutdown_cancels_running_stream_after_grace(slow_decoder):
    app = create_app(slow_decoder)
    with httpx.Client(timeout=60) as client:
        with running(app, grace=0.5) as srv:
            response, lines = first_event_of_long_stream(client, srv.v1 + "/completions")
            srv.server.should_exit = True
            started = time.monotonic()
            rest = [line[len("data: "):] for line in lines if line.startswith("data: ")]
            srv.thread.join(15)
            assert not srv.thread.is_alive()
        assert time.monotonic() - started < 5
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["error"]["code"] == "server_shutdown"
