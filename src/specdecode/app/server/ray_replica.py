"""The engine replica of `serve --ray` (`ray_serve`): what `serve` runs, unchanged.
`commands.build_app` loads the model on a thread of the replica's own, which then runs the engine
loop (as `runner.serve` does; the kernels' OpenMP team belongs to that thread), and every request
goes through that FastAPI app in-process, so a replica answers exactly what one `specdecode
serve` answers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from dataclasses import dataclass

from . import ray_env  # noqa: F401  (Ray Serve's switches, before Ray Serve is imported)
from ray import serve

from .launch import build_app
from .ray_metrics import PERIOD_S as METRICS_PERIOD_S
from .ray_metrics import RayMetricsMirror
from .relay import Relay, context as relayed

log = logging.getLogger("specdecode.server")

REPLICA_HEADER = "x-specdecode-replica"  # which replica answered (affinity is measured by it)


@dataclass
class Forwarded:
    """One HTTP request as the ingress hands it to an engine replica."""

    method: str
    path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    conversation: str | None  # `conversation_key`, read by the router
    relay: Relay  # its answer's ids, and what a dead replica had sent of it (`relay`)


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
                try:
                    mirror.copy()
                except Exception:  # logged; the next period copies what it can again
                    log.exception("copying this replica's metrics into Ray's failed")

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
        task = asyncio.create_task(self.app(scope, receive, send),
                                   context=relayed(request.relay))
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
