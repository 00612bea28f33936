"""The ingress of `serve --ray` (`ray_serve`): the deployment Ray's proxy calls. It reads the
body, names the request's conversation (`conversation_key`) for the router
(`routing.ConversationRouter`, which sends a conversation's turns back to the replica that served
its first), forwards, and relays the answer. A replica that dies before it answered (killed, out
of memory, a kernel error) costs the client nothing: the request goes to another; one that dies
mid-stream ends the stream with an error event and `[DONE]`, never a hang.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from . import ray_env  # noqa: F401  (Ray Serve's switches, before Ray Serve is imported)
import grpc
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import openai_format
from .ray_replica import Forwarded

log = logging.getLogger("specdecode.server")

RETRIES = 3  # other replicas a request that got no answer is sent to
PROMPT_KEY_CHARS = 256  # a completion prompt's head that names its conversation
# how a replica's death reaches the ingress: as Ray's errors, or as the gRPC call's own when the
# call fails mid-stream (an error the replica's code raised comes as a RayTaskError instead)
REPLICA_GONE = (RayActorError, ActorUnavailableError, grpc.aio.AioRpcError)
DIED = "the replica serving this request died; its stream ends here"
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
                              conversation_key(request.url.path, body))
        failure: Exception | None = None
        for _ in range(1 + RETRIES):
            messages = self.engine.forward.remote(forwarded)
            try:
                start = await messages.__anext__()  # the start of the answer, maybe all of it
            except REPLICA_GONE as exc:  # nothing sent yet: try another replica
                failure = exc
                log.warning("a replica died before answering; retrying: %r", exc)
                continue
            except Exception as exc:  # noqa: BLE001  (a bug: answered, logged, never a hang)
                log.error("forwarding failed", exc_info=exc)
                return JSONResponse(openai_format.error_body(
                    "internal server error; see the replica's log", "server_error", None,
                    "internal_error"), 500)
            return _Relayed(start, messages)
        return JSONResponse(openai_format.error_body(
            f"no replica could answer: {failure}", "server_error", None, "replica_died"), 503)


class _Relayed(Response):
    """An engine replica's ASGI messages, relayed as they come; a replica that dies mid-answer
    ends a stream with an error event (OpenAI's shape) and [DONE], any other answer early."""

    def __init__(self, start: list[dict], messages: Any) -> None:
        self.start, self.messages = start, messages
        self.background = None

    async def __call__(self, scope, receive, send) -> None:
        for message in self.start:
            await send(message)
        last = self.start[-1]
        if last["type"] == "http.response.body" and not last.get("more_body", False):
            return  # the whole answer came at once
        streamed = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                       for k, v in self.start[0].get("headers", []))
        finished = False
        try:
            async for batch in self.messages:
                for message in batch:
                    await send(message)
            finished = True
        except Exception as exc:  # whatever failed, the client gets an answer that ends
            log.warning("a replica failed mid-answer: %r", exc)
            tail = b""
            if streamed:
                error = openai_format.error_body(DIED, "server_error", None, "replica_died")
                tail = f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode()
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            finished = True
        finally:
            if not finished:  # the client went away: the replica stops generating for it
                self.messages.cancel()
