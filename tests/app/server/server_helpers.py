"""Running the app in-process on a loopback port, and reading server-sent events."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import httpx

from specdecode.app.server import GracefulServer, build_server


@dataclass
class Running:
    url: str  # http://127.0.0.1:PORT
    server: GracefulServer
    thread: threading.Thread

    @property
    def v1(self) -> str:
        return self.url + "/v1"


@contextmanager
def running(app, grace: float = 2.0) -> Iterator[Running]:
    """Serve `app` on a free loopback port in a background thread; stop it on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_server(app, "127.0.0.1", port, grace=grace, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield Running(f"http://127.0.0.1:{port}", server, thread)
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the server did not stop"


def read_events(response: httpx.Response) -> list[str]:
    """The `data:` payloads of an SSE response, in order ("[DONE]" included)."""
    return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


def stream_post(client: httpx.Client, url: str, body: dict) -> tuple[int, list[str]]:
    with client.stream("POST", url, json={**body, "stream": True}) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, [r.text]
        return r.status_code, read_events(r)


def check_stream(events: list[str], object: str) -> dict:
    """Assert a well-formed OpenAI stream; return its closing chunk (the one with finish_reason)."""
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == object for c in chunks)
    finished = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finished) == 1 and finished[0]["choices"][0]["finish_reason"] in ("stop", "length")
    assert len({c["id"] for c in chunks}) == 1
    return finished[0]


def assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] and isinstance(body["error"]["type"], str)
    assert "Traceback" not in response.text
    return body["error"]
