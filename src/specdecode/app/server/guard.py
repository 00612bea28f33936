"""Who may use the server and how much they may send, checked before a request reaches a route.

- With an API key, every request needs `Authorization: Bearer KEY` (OpenAI's and llama.cpp's
  clients) or `x-api-key: KEY` (Anthropic's); otherwise 401 in the error shape of the route's
  dialect (OpenAI's: type `authentication_error`, as llama.cpp's server says it; the openai
  clients go by the status). Open: `/`, `/health` and `/metrics`, for probes and scrapers
  (every route that can generate, tokenize or describe the model is behind the key, with or
  without `/v1`).
- A body over `max_body_bytes` gets 413 before it is parsed: at once from its Content-Length, or
  as soon as a body sent without one (chunked) has grown past it.
"""

from __future__ import annotations

import hmac
import json

from .errors import body_for

OPEN_PATHS = frozenset({"/", "/health", "/metrics"})
# far above any prompt a context window holds (a 128k-token prompt is ~0.5 MB of text), far below
# what would hurt to read and parse
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


class RequestGuard:
    """A plain ASGI middleware (a streamed response passes through untouched)."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int) -> None:
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        if self.api_key and path not in OPEN_PATHS and not self._authorized(headers):
            await _reply(send, path, 401, "Incorrect API key provided: send it as "
                         "`Authorization: Bearer KEY` or `x-api-key: KEY`", "invalid_api_key",
                         {"www-authenticate": "Bearer"}, type="authentication_error")
            return
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            await _reply(send, path, 413, self._too_large(), "request_too_large")
            return
        if not length.isdigit():  # sent chunked: read it here, up to the limit, then replay it
            body = await self._read_bounded(receive)
            if body is None:
                await _reply(send, path, 413, self._too_large(), "request_too_large")
                return
            receive = _replay(body, receive)
        await self.app(scope, receive, send)

    async def _read_bounded(self, receive) -> bytes | None:
        """The whole body, or None as soon as it grows past the limit."""
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return b"".join(parts)
            parts.append(message.get("body", b""))
            size += len(parts[-1])
            if size > self.max_body_bytes:
                return None
            if not message.get("more_body", False):
                return b"".join(parts)

    def _authorized(self, headers: dict[str, str]) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            token = headers.get("x-api-key", "")
        return hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    def _too_large(self) -> str:
        return f"the request body is larger than this server's limit of {self.max_body_bytes} bytes"


def _replay(body: bytes, receive):
    """A receive channel that gives `body` once, then what the client sends next (a disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _reply(send, path: str, status: int, message: str, code: str,
                 extra_headers: dict[str, str] | None = None,
                 type: str = "invalid_request_error") -> None:
    body = json.dumps(body_for(path, status, message, type, code=code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra_headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
