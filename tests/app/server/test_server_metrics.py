"""/metrics is Prometheus text and its counters follow the requests."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import running

from specdecode.app.server import create_app


def scrape(client: httpx.Client) -> dict[tuple[str, frozenset], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_move_with_a_request(served_model):
    with running(create_app(served_model)) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as client:
        before = scrape(client)
        assert value(before, "specdecode_queue_length") == 0
        body = {"prompt": "one two three one two three", "max_tokens": 12, "temperature": 0}
        usage = client.post("/v1/completions", json=body).json()["usage"]
        assert client.post("/v1/completions", json={"prompt": 5}).status_code == 400
        after = scrape(client)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    spec = usage["speculative"]
    method = {"method": "lookup"}
    assert moved("specdecode_requests_total", endpoint="/v1/completions", status="200") == 1
    assert moved("specdecode_requests_total", endpoint="/v1/completions", status="400") == 1
    assert moved("specdecode_generated_tokens_total", **method) == usage["completion_tokens"]
    assert moved("specdecode_target_forwards_total", **method) == spec["target_forwards"]
    assert moved("specdecode_drafted_tokens_total", **method) == spec["drafted"]
    assert moved("specdecode_accepted_tokens_total", **method) == spec["accepted"]
    tau = moved("specdecode_confirmed_tokens_total", **method) / spec["target_forwards"]
    assert abs(tau - spec["tau"]) < 1e-3
    assert sum(moved("specdecode_generations_total", method="lookup", finish_reason=reason)
               for reason in ("stop", "length")) == 1
    assert moved("specdecode_time_to_first_token_seconds_count", **method) == 1
    assert moved("specdecode_request_duration_seconds_count", endpoint="/v1/completions") == 2


def test_every_streams_end_is_counted_by_reason(slow_model):
    """A stream's access line says 200 once its headers go out; how it ended is counted (and
    logged): its finish reason, an error's code, or a client that left."""
    with running(create_app(slow_model)) as srv, httpx.Client(base_url=srv.url,
                                                             timeout=60) as c:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        with c.stream("POST", "/v1/chat/completions", json={**body, "max_tokens": 3}) as r:
            r.read()
        with c.stream("POST", "/v1/chat/completions", json={**body, "max_tokens": 100}) as r:
            next(r.iter_lines())  # the client leaves after its first line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ends = {line.split()[0]: float(line.split()[1])
                    for line in c.get("/metrics").text.splitlines()
                    if line.startswith("specdecode_stream_ends_total")}
            if len(ends) == 2:
                break
            time.sleep(0.1)
    assert ends == {'specdecode_stream_ends_total{reason="length"}': 1.0,
                    'specdecode_stream_ends_total{reason="client_gone"}': 1.0}
