"""Response header names reach the client in their canonical case, for clients that look them up
in a plain dict (llama.cpp's server tests do)."""

from __future__ import annotations

import http.client
from urllib.parse import urlparse

import pytest
from server_helpers import running

from specdecode.app.server import create_app
from specdecode.app.server.header_case import canonical


@pytest.mark.parametrize("name,written", [
    (b"content-type", b"Content-Type"), (b"access-control-allow-origin",
                                         b"Access-Control-Allow-Origin"),
    (b"X-REQUEST-ID", b"X-Request-Id"), (b"etag", b"Etag"), (b"a--b", b"A--B")])
def test_canonical_capitalises_each_dash_separated_word(name, written):
    assert canonical(name) == written


def test_a_running_servers_header_names_arrive_in_canonical_case(served_model):
    with running(create_app(served_model)) as srv:
        url = urlparse(srv.url)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        conn.request("OPTIONS", "/v1/completions", headers={
            "Origin": "http://page.example", "Access-Control-Request-Method": "POST"})
        response = conn.getresponse()
        response.read()
        names = [name for name, _ in response.getheaders()]
        conn.close()
    assert response.status == 200
    assert "Access-Control-Allow-Origin" in names and "Content-Type" in names
    app_names = [name for name in names if name not in ("date", "server")]  # uvicorn's own
    assert all(name == canonical(name.encode()).decode() for name in app_names), names
