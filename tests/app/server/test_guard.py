"""Who may use the server and how much they may send: the bearer key on /v1/, the body limit before
parsing, the official `openai` client's view of both, and which browser pages may call it (CORS)."""

from __future__ import annotations

import httpx
import openai
import pytest
from server_helpers import assert_openai_error, running

from specdecode.app.server import create_app

KEY = "sk-test-key"
LIMIT = 4096
BODY = {"prompt": "hello", "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def server(served_model):
    with running(create_app(served_model, api_key=KEY, max_body_bytes=LIMIT)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_requests_without_the_key_get_401_in_openai_shape(client):
    error = assert_openai_error(client.post("/v1/completions", json=BODY), 401)
    assert error["code"] == "invalid_api_key" and error["type"] == "authentication_error"
    assert_openai_error(client.get("/v1/models"), 401)


@pytest.mark.parametrize("method,path", [
    ("POST", "/completions"), ("POST", "/chat/completions"), ("GET", "/models"),
    ("POST", "/completion"), ("POST", "/infill"), ("POST", "/tokenize"), ("POST", "/detokenize"),
    ("POST", "/apply-template"), ("GET", "/props"), ("POST", "/responses"),
    ("POST", "/v1/messages"), ("GET", "/openapi.json")])
def test_every_route_but_the_probes_needs_the_key_with_or_without_v1(client, method, path):
    assert client.request(method, path, json=BODY).status_code == 401
    for open_path in ("/", "/health", "/metrics"):
        assert client.get(open_path).status_code == 200


def test_a_wrong_key_or_scheme_gets_401(client):
    assert_openai_error(client.post("/v1/completions", json=BODY, headers=auth("sk-other")), 401)
    assert_openai_error(client.post("/v1/completions", json=BODY,
                                    headers={"Authorization": KEY}), 401)


def test_the_key_opens_v1_and_health_and_metrics_stay_open(client):
    r = client.post("/v1/completions", json=BODY, headers=auth())
    assert r.status_code == 200 and r.json()["choices"][0]["text"] is not None
    assert client.get("/health").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_a_body_over_the_limit_gets_413_before_it_is_parsed(client):
    big = b'{"prompt": "' + b"x" * (2 * LIMIT) + b'"}'
    error = assert_openai_error(client.post("/v1/completions", content=big, headers={
        **auth(), "Content-Type": "application/json"}), 413)
    assert str(LIMIT) in error["message"]


def test_a_body_without_content_length_is_cut_off_at_the_limit(client):
    def chunks():  # sent chunked: no Content-Length to refuse it by
        yield b'{"prompt": "'
        for _ in range(4):
            yield b"x" * LIMIT
        yield b'"}'

    r = client.post("/v1/completions", content=chunks(), headers={
        **auth(), "Content-Type": "application/json"})
    assert_openai_error(r, 413)


def test_a_body_under_the_limit_is_served(client):
    r = client.post("/v1/completions", json={**BODY, "prompt": "x " * 100}, headers=auth())
    assert r.status_code == 200


def test_the_openai_client_works_with_the_key_and_fails_to_authenticate_without(server):
    with openai.OpenAI(base_url=server.v1, api_key=KEY, max_retries=0, timeout=60) as good:
        assert good.completions.create(model=good.models.list().data[0].id, prompt="hi",
                                       max_tokens=2).choices
    with openai.OpenAI(base_url=server.v1, api_key="wrong", max_retries=0, timeout=60) as bad:
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="any", prompt="hi", max_tokens=2)


PREFLIGHT = {"Origin": "http://page.example", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}


def test_a_browser_page_of_an_allowed_origin_may_call_without_a_key_in_its_preflight(
        served_model):
    with running(create_app(served_model, api_key=KEY, cors_origins=("http://page.example",))
                 ) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        pre = c.options("/v1/completions", headers=PREFLIGHT)
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://page.example"
        r = c.post("/v1/completions", json=BODY,
                   headers={**auth(), "Origin": "http://page.example"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "http://page.example"
        other = c.options("/v1/completions", headers={**PREFLIGHT, "Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_by_default_any_page_may_call_with_the_key_and_its_preflight_needs_none(client):
    pre = client.options("/v1/completions", headers=PREFLIGHT)
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == "http://page.example"
    assert pre.headers["access-control-allow-credentials"] == "true"
    assert pre.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    # echoed, not "*": the Fetch standard never lets "*" cover Authorization
    assert pre.headers["access-control-allow-headers"] == "authorization, content-type"
    origin = {"Origin": "http://x.example"}
    assert client.post("/v1/completions", json=BODY, headers=origin).status_code == 401
    r = client.post("/v1/completions", json=BODY, headers={**auth(), **origin})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://x.example"


def test_with_no_cors_origins_no_page_is_let_in(served_model):
    with running(create_app(served_model, api_key=KEY, cors_origins=())) as srv, httpx.Client(
            base_url=srv.url, timeout=60) as c:
        pre = c.options("/v1/completions", headers=PREFLIGHT)
        assert pre.status_code in (401, 405) and "access-control-allow-origin" not in pre.headers
        r = c.post("/v1/completions", json=BODY, headers={**auth(), "Origin": "http://x.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


@pytest.mark.parametrize("origin,allowed", [
    ("http://localhost", True), ("http://localhost:8080", True), ("http://127.0.0.1:3000", True),
    ("http://[::1]:3000", True), ("https://localhost", True), ("http://localhost.evil.example", False),
    ("http://evil.example", False), ("http://127.0.0.1.evil.example:80", False)])
def test_localhost_as_an_origin_is_this_machines_pages_on_any_port(served_model, origin, allowed):
    with running(create_app(served_model, cors_origins=("localhost",))) as srv, httpx.Client(
            base_url=srv.url, timeout=60) as c:
        pre = c.options("/v1/completions", headers={**PREFLIGHT, "Origin": origin})
        # llama.cpp's answer to an origin not let in: 200 without the header (the browser refuses)
        assert pre.status_code == 200
        assert (pre.headers.get("access-control-allow-origin") == origin) == allowed

