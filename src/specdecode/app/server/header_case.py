"""Response header names in their canonical case (`Content-Type`, `Access-Control-Allow-Origin`).

HTTP field names are case-insensitive, but clients that copy a response's headers into a plain
dict look them up as they are usually written (llama.cpp's server tests do, and llama.cpp's
server and Go's net/http write them so). Starlette and uvicorn's httptools protocol lower-case
every name; uvicorn's h11 protocol (`runner.build_server`) writes them as the app gives them, and
this middleware, the outermost, gives them in canonical case (uvicorn's own `date` and `server`
stay as uvicorn writes them).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def canonical(name: bytes) -> bytes:
    """`content-type` -> `Content-Type`: each dash-separated word capitalised."""
    return b"-".join(word[:1].upper() + word[1:].lower() for word in name.split(b"-"))


class CanonicalHeaderCase:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_canonical(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [(canonical(name), value) for name, value
                                                   in message.get("headers", ())]}
            await send(message)

        await self.app(scope, receive, send_canonical)
