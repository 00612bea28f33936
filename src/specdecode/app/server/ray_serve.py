"""`specdecode serve --ray`: the same app as Ray Serve replicas behind Ray's HTTP proxy.

Two deployments. `EngineReplica` is what `serve` runs, unchanged: `commands.build_app` loads the
model on a thread of the replica's own, which then runs the engine loop (as `runner.serve` does;
the kernels' OpenMP team belongs to that thread), and every request goes through that FastAPI app
in-process, so a replica answers exactly what one `specdecode serve` answers. `Ingress` is the
deployment Ray's proxy calls: it reads the body, names the request's conversation
(`conversation_key`) for the router (`routing.ConversationRouter`, which sends a conversation's
turns back to the replica that served its first), forwards, and relays the answer. A replica that
dies before it answered (killed, out of memory, a kernel error) costs the client nothing: the
request goes to another; one that dies mid-stream ends the stream with an error event and
`[DONE]`, never a hang. Ray Serve replaces the dead replica, routes to none until its model has
loaded (the constructor returns only then), and on shutdown lets requests in flight finish.

A cluster runs the same deployments with Ray's own command (`serve run`, see `cli.ray_app`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Ray Serve's switches, set before Ray Serve is imported (it reads them then) for this process
# and the Ray instance it starts (a cluster's are set where `ray start` runs): replicas' user code
# and the ingress's router on the actor's own event loop instead of threads of their own, and
# requests to replicas over gRPC rather than as Ray actor tasks: together they take nearly half
# of the latency Ray adds to a request away and raise what two replicas serve (measured by
# docs/benchmarks/ray/switches.py).
RAY_SERVE_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
                 "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
                 "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"}
for _name, _value in RAY_SERVE_ENV.items():  # Ray's processes this one starts inherit them
    os.environ.setdefault(_name, _value)

try:
    import grpc
    import ray
    from ray import serve
    from ray.exceptions import ActorUnavailableError, RayActorError
    from ray.serve.config import RequestRouterConfig
except ImportError as exc:  # the optional extra
    from ...errors import SpecDecodeError

    raise SpecDecodeError("--ray needs Ray Serve: pip install 'specdecode[ray]'") from exc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...errors import InvalidParameterError, SpecDecodeError
from . import openai_format
from .launch import build_app
from .ray_metrics import PERIOD_S as METRICS_PERIOD_S
from .ray_metrics import RayMetricsMirror

log = logging.getLogger("specdecode.server")

APP_NAME = "specdecode"
REPLICA_HEADER = "x-specdecode-replica"  # which replica answered (affinity is measured by it)
# Ray Serve's own names for the two deployments (metrics and `serve status` show them)
ENGINE, INGRESS = "EngineReplica", "Ingress"
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


@dataclass
class Forwarded:
    """One HTTP request as the ingress hands it to an engine replica."""

    method: str
    path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    conversation: str | None  # `conversation_key`, read by the router


class EngineReplica:
    """One engine, its model loaded before the constructor returns (Ray Serve sends a replica
    nothing until then: not ready while loading)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._stopping = threading.Event()
        ready: Future = Future()

        def engine() -> None:
            try:
                if args.threads:
                    import torch

                    torch.set_num_threads(args.threads)
                app, what = build_app(args)
                app.state.specdecode.worker.bind_to_this_thread()
                ready.set_result((app, what))
            except BaseException as exc:  # the constructor raises it: Ray Serve reports it
                ready.set_exception(exc)
                return
            app.state.specdecode.worker.run(until=self._stopping.is_set)

        self._thread = threading.Thread(target=engine, name="specdecode-engine", daemon=True)
        self._thread.start()
        self.app, what = ready.result()
        mirror = RayMetricsMirror(self.app.state.specdecode.metrics.registry)

        def copy_metrics() -> None:
            while not self._stopping.wait(METRICS_PERIOD_S):
                mirror.copy()

        threading.Thread(target=copy_metrics, name="specdecode-metrics", daemon=True).start()
        context = serve.get_replica_context()
        self.name = context.replica_id.unique_id if context else "local"
        log.warning("replica %s serving %s", self.name, what)

    def check_health(self) -> None:
        """Ray Serve's health probe: a replica whose engine loop ended is replaced."""
        if not self._thread.is_alive():
            raise RuntimeError("the engine loop has ended")

    async def forward(self, request: Forwarded) -> AsyncIterator[list[dict]]:
        """The app's ASGI messages for `request`, in lists: each crosses Ray as one item."""
        state = {"body_sent": False}
        gone = asyncio.Event()
        messages: asyncio.Queue = asyncio.Queue()

        async def receive() -> dict:
            if not state["body_sent"]:
                state["body_sent"] = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            messages.put_nowait(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": request.method, "scheme": "http", "path": request.path,
                 "raw_path": request.path.encode(), "query_string": request.query_string,
                 "root_path": "", "headers": request.headers, "client": None,
                 "server": None}
        task = asyncio.create_task(self.app(scope, receive, send))
        task.add_done_callback(lambda _: messages.put_nowait(None))
        try:
            while True:
                # what is waiting goes as one item (a JSON answer's start and body together)
                batch = [await messages.get()]
                while batch[-1] is not None and messages.qsize():
                    batch.append(messages.get_nowait())
                done = batch[-1] is None
                batch = [m for m in batch if m is not None]
                for message in batch:
                    if message["type"] == "http.response.start":
                        message["headers"] = [*message.get("headers", []),
                                              (REPLICA_HEADER.encode(), self.name.encode())]
                if batch:
                    yield _joined(batch)
                if done:
                    break
            await task
        finally:  # the client went away (Ray cancels this generator) or the answer is complete
            gone.set()
            if not task.done():
                await asyncio.wait([task], timeout=5)

    def __del__(self) -> None:
        """Ray Serve has let requests in flight finish (graceful shutdown) before this."""
        self._stopping.set()
        app = getattr(self, "app", None)
        if app is not None:
            app.state.specdecode.worker.stop()
            app.state.specdecode.compiling.shutdown(wait=False)


def _joined(messages: list[dict]) -> list[dict]:
    """`messages` with each run of body parts made one part."""
    out: list[dict] = []
    for message in messages:
        if out and message["type"] == out[-1]["type"] == "http.response.body":
            out[-1] = {**message, "body": out[-1].get("body", b"") + message.get("body", b"")}
        else:
            out.append(message)
    return out


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


def deployment(args: argparse.Namespace) -> serve.Application:
    """The two deployments for `args` (`serve`'s arguments: --replicas, --max-replicas and
    --threads size the engine replicas)."""
    threads = args.threads or 1
    if args.replicas < 1 or (args.max_replicas is not None and args.max_replicas < args.replicas):
        raise InvalidParameterError(f"need --replicas >= 1 and --max-replicas >= --replicas, got "
                                    f"{args.replicas}, {args.max_replicas}")
    options: dict[str, Any] = {"num_replicas": args.replicas}
    if args.max_replicas is not None:
        # Ray Serve counts a replica's requests in flight, queued ones included
        options = {"autoscaling_config": {"min_replicas": args.replicas,
                                          "max_replicas": args.max_replicas,
                                          "target_ongoing_requests": args.max_batch}}
    if args.routing == "conversation":
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="specdecode.app.server.routing:ConversationRouter")
    engine = serve.deployment(EngineReplica, name=ENGINE).options(
        ray_actor_options={"num_cpus": threads},
        max_ongoing_requests=args.max_batch + args.max_queue,
        graceful_shutdown_timeout_s=args.shutdown_grace, **options)
    ingress = serve.deployment(Ingress, name=INGRESS).options(
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    return ingress.bind(engine.bind(args))


def run_deployment(args: argparse.Namespace) -> None:
    """Deploy `args`'s replicas on the Ray instance this process is connected to, behind Ray's
    HTTP proxy on --host:--port; returns once every replica has loaded its model."""
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(deployment(args), name=APP_NAME, route_prefix="/")


@contextmanager
def ray_instance(address: str | None = None, **init: Any) -> Iterator[None]:
    """Ray for the block: a local instance started and stopped here (`address` None; `init`:
    more of `ray.init`'s arguments), or a running cluster joined and left as it was."""
    if address is None:
        ray.init(include_dashboard=False, logging_level=logging.WARNING, **init)
    else:
        ray.init(address=address, logging_level=logging.WARNING)
    try:
        yield
    finally:
        if address is None:
            serve.shutdown()
        ray.shutdown()


def serve_ray(args: argparse.Namespace) -> int:
    """`specdecode serve --ray`: start (or join) Ray, run the deployments behind Ray's HTTP proxy
    on --host:--port until SIGINT or SIGTERM, then shut them down gracefully."""
    deployment(args)  # bad values fail before Ray starts
    local = {"log_to_driver": args.log_level == "debug",
             "_metrics_export_port": args.metrics_export_port}
    try:
        with ray_instance(args.ray_address, **({} if args.ray_address else local)):
            # after ray.init, which installs a SIGTERM handler of its own that ends the process
            # at once (leaving Ray's agents behind)
            stop = threading.Event()
            previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT,
                                                                               signal.SIGTERM)}
            try:
                _serve_until(stop, args)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
    except RuntimeError as exc:  # Ray Serve's deployment errors: one line, not a traceback
        raise SpecDecodeError(f"Ray Serve could not run the server: {exc}") from exc
    return 0


def _serve_until(stop: threading.Event, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    run_deployment(args)
    print(f"specdecode: serving {args.model} through Ray Serve: {args.replicas} "
          f"{ENGINE} replica(s) of {args.threads or 1} thread(s), ready in "
          f"{time.perf_counter() - started:.0f} s, on http://{args.host}:{args.port}/v1",
          file=sys.stderr)
    if args.ray_address is None and args.metrics_export_port:
        print(f"specdecode: every replica's metrics: http://127.0.0.1:"
              f"{args.metrics_export_port}/metrics (Ray's metrics agent)", file=sys.stderr)
    stop.wait()
    serve.delete(APP_NAME)  # replicas finish what is in flight first
