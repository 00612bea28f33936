"""The ingress of `serve --ray` (`ray_serve`): the deployment Ray's proxy calls. It reads the
body, names the request's conversation (`conversation_key`) for the router
(`routing.ConversationRouter`, which sends a conversation's turns back to the replica that served
its first), forwards, and relays the answer. A replica that dies before it answered (killed, out
of memory, a kernel error) costs the client nothing: the request goes to another. One that dies
mid-stream costs it nothing either: the stream goes on from another replica, which continues
the answer from the tokens already sent (`relay`), up to `RESUMES` times; after that, or when no
replica will take it, the stream ends with an error event and `[DONE]`, never a hang.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import replace
from typing import Any

from . import ray_env  # noqa: F401  (Ray Serve's switches, before Ray Serve is imported)
import grpc
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import openai_format, relay
from .ray_replica import Forwarded

log = logging.getLogger("specdecode.server")

RETRIES = 3  # other replicas a request that got no answer is sent to
RESUMES = 3  # times a stream goes on from another replica after the one serving it died
PROMPT_KEY_CHARS = 256  # a completion prompt's head that names its conversation
# how a replica's death reaches the ingress: as Ray's errors, or as the gRPC call's own when the
# call fails mid-stream (an error the replica's code raised comes as a RayTaskError instead)
REPLICA_GONE = (RayActorError, ActorUnavailableError, grpc.aio.AioRpcError)
DIED = ("the replica serving this request died and no other could go on with it; its stream "
        "ends here")
METRICS_ELSEWHERE = ("behind Ray Serve, every replica's metrics are exported by Ray's metrics "
                     "agent (`serve --ray --metrics-export-port`), each labelled by replica")


def conversation_key(path: str, body: bytes) -> str | None:
    """What a conversation's every turn starts with, hashed: a chat's messages up to its first user
    message, a completion prompt's first `PROMPT_KEY_CHARS` characters; None for anything else
    (least-loaded routing)."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    if path.endswith("/chat/completions") and isinstance(request.get("messages"), list):
        head = []
        for message in request["messages"]:
            head.append(message)
            if isinstance(message, dict) and message.get("role") == "user":
                break
        text = json.dumps(head, sort_keys=True)
    elif path.endswith("/completions") and isinstance(request.get("prompt"), str):
        text = request["prompt"][:PROMPT_KEY_CHARS]
    else:
        return None
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class Ingress:
    """Ray's proxy calls this with every HTTP request: forward it, retry on another replica while
    nothing has been answered, relay the answer."""

    def __init__(self, engine: serve.handle.DeploymentHandle) -> None:
        self.engine = engine.options(stream=True)

    async def __call__(self, request: Request) -> Response:
        if request.url.path == "/metrics":  # one replica's would pass for all replicas'
            return JSONResponse(openai_format.error_body(
                METRICS_ELSEWHERE, "invalid_request_error", None, "not_found"), 404)
        body = await request.body()
        forwarded = Forwarded(request.method, request.url.path,
                              request.scope.get("query_string", b""),
                              list(request.scope["headers"]), body,
                              conversation_key(request.url.path, body),
                              relay.Relay(uuid.uuid4().hex, int(time.time())))
        failure: Exception | None = None
        for _ in range(1 + RETRIES):
            try:
                start, messages = await self.start(forwarded)
            except REPLICA_GONE as exc:  # nothing sent yet: try another replica
                failure = exc
                log.warning("a replica died before answering; retrying: %r", exc)
                continue
            except Exception as exc:  # noqa: BLE001  (a bug: answered, logged, never a hang)
                log.error("forwarding failed", exc_info=exc)
                return JSONResponse(openai_format.error_body(
                    "internal server error; see the replica's log", "server_error", None,
                    "internal_error"), 500)
            return _Relayed(start, messages, self, forwarded)
        return JSONResponse(openai_format.error_body(
            f"no replica could answer: {failure}", "server_error", None, "replica_died"), 503)

    async def start(self, forwarded: Forwarded) -> tuple[list[dict], Any]:
        """The start of a replica's answer (maybe all of it), and the rest to come; raises one
        of REPLICA_GONE when the replica died first."""
        messages = self.engine.forward.remote(forwarded)
        return await messages.__anext__(), messages


class _Relayed(Response):
    """An engine replica's ASGI messages, relayed as they come. A stream whose replica dies goes
    on from another (`_Events`); any other answer ends early."""

    def __init__(self, start: list[dict], messages: Any, ingress: Ingress,
                 forwarded: Forwarded) -> None:
        self.start, self.messages = start, messages
        self.ingress, self.forwarded = ingress, forwarded
        self.background = None

    async def __call__(self, scope, receive, send) -> None:
        streamed = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                       for k, v in self.start[0].get("headers", []))
        finished = False
        try:
            if streamed:
                await self._stream(send)
            else:
                await self._whole(send)
            finished = True
        finally:
            if not finished:  # the client went away: the replica stops generating for it
                self.messages.cancel()

    async def _whole(self, send) -> None:
        for message in self.start:
            await send(message)
        last = self.start[-1]
        if last["type"] == "http.response.body" and not last.get("more_body", False):
            return  # the whole answer came at once
        try:
            async for batch in self.messages:
                for message in batch:
                    await send(message)
        except Exception as exc:  # whatever failed, the client gets an answer that ends
            log.warning("a replica failed mid-answer: %r", exc)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream(self, send) -> None:
        await send(self.start[0])
        events = _Events(send)
        await events.feed(self.start[1:])
        for resumes in range(RESUMES + 1):
            try:
                async for batch in self.messages:
                    await events.feed(batch)
                await events.close()
                return
            except REPLICA_GONE as exc:
                log.warning("a replica died mid-stream (%d chunks sent): %r", len(events.sent),
                            exc)
            except Exception as exc:  # noqa: BLE001  (the replica's own error: not resumed)
                log.warning("a replica failed mid-stream: %r", exc)
                break
            if resumes == RESUMES or not await self._resume(events, resumes + 1):
                break
        await events.fail()

    async def _resume(self, events: "_Events", resumes: int) -> bool:
        """Send the stream to another replica as a continuation of what its client has had
        (`resumes`: the how-manieth); False when none takes it."""
        again = replace(self.forwarded, relay=replace(self.forwarded.relay,
                                                      sent=tuple(events.sent), resumes=resumes))
        for _ in range(1 + RETRIES):
            try:
                start, self.messages = await self.ingress.start(again)
            except REPLICA_GONE as exc:
                log.warning("a replica died before continuing a stream: %r", exc)
                continue
            if start[0].get("status") != 200:  # refused (busy, shutting down): not resumed
                log.warning("a replica refused to continue a stream: %s", start[0].get("status"))
                return False
            events.resume()
            await events.feed(start[1:])
            return True
        return False


class _Events:
    """A relayed stream's server-sent events on their way to the client. The replica's
    comments naming the chunks sent (`relay.comment`) are taken out and kept (`sent`), and the
    events delivered are counted (`delivered`; keep-alives, which carry nothing and come when
    they come, are not). A continuation writes the same events again, its replayed chunks'
    comments first among its comments: those comments and as many events as were delivered are
    skipped, the rest goes on to the client."""

    def __init__(self, send) -> None:
        self.send, self.pending = send, b""
        self.sent: list[tuple[int, tuple[int, ...]]] = []
        self.delivered = 0
        self.skip_chunks = self.skip_events = 0  # of a continuation, still to pass

    def resume(self) -> None:
        self.skip_chunks, self.skip_events, self.pending = len(self.sent), self.delivered, b""

    async def feed(self, messages: list[dict]) -> None:
        out = []
        for message in messages:
            if message["type"] != "http.response.body":
                continue
            self.pending += message.get("body", b"")
            while (end := self.pending.find(b"\n\n")) != -1:
                event, self.pending = self.pending[: end + 2], self.pending[end + 2 :]
                chunk = relay.sent_chunk(event)
                if chunk is not None:
                    if self.skip_chunks:
                        self.skip_chunks -= 1
                    else:
                        self.sent.append(chunk)
                    continue
                counted = not (event.startswith(b":") or event.startswith(b"event: ping\n"))
                if self.skip_events:
                    self.skip_events -= counted
                    continue
                self.delivered += counted
                out.append(event)
        if out:
            await self.send({"type": "http.response.body", "body": b"".join(out),
                             "more_body": True})

    async def close(self) -> None:
        await self.send({"type": "http.response.body", "body": self.pending, "more_body": False})

    async def fail(self) -> None:
        """The end of a stream no replica can go on with: an error event and [DONE]."""
        error = openai_format.error_body(DIED, "server_error", None, "replica_died")
        await self.send({"type": "http.response.body", "more_body": False,
                         "body": f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()})
