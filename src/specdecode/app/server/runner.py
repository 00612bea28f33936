"""Running the app under uvicorn with a graceful shutdown that cannot hang.

On SIGTERM uvicorn stops accepting connections and waits for open ones to finish; a generation can
run for minutes, so the worker is told first: refuse new jobs, let running ones finish for `grace`
seconds, then cancel them (a streamed response gets a final error event and [DONE]). uvicorn's own
graceful-shutdown timeout, a little longer, is the backstop.

`serve` runs the engine on the calling thread, the one that loaded the model, and HTTP on another:
the C kernels' OpenMP threads belong to the thread that first ran them, and a step run from a
second thread, its own team beside the first, took twice as long on 2 cores (libgomp stops
spinning between calls once it manages more threads than there are CPUs).
"""

from __future__ import annotations

import signal
import threading

import uvicorn
from fastapi import FastAPI

from ...errors import SpecDecodeError
from .worker import EngineWorker


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, worker: EngineWorker, grace: float) -> None:
        super().__init__(config)
        self.worker, self.grace = worker, grace

    async def shutdown(self, sockets=None) -> None:
        self.worker.drain(self.grace)
        await super().shutdown(sockets)


def build_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, *, grace: float = 10.0,
                 log_level: str = "info") -> GracefulServer:
    """A uvicorn server for `app` (from create_app); `.run()` blocks, `.should_exit = True`
    stops it (from any thread)."""
    # h11, not httptools: it writes header names as the app gives them (`header_case`)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                            http="h11", timeout_graceful_shutdown=grace + 5)
    return GracefulServer(config, app.state.specdecode.worker, grace)


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, *, grace: float = 10.0,
          log_level: str = "info") -> None:
    """Serve `app` until SIGINT or SIGTERM: the engine loop on this thread, uvicorn on a
    background one (which then installs no signal handlers: they are installed here)."""
    server = build_server(app, host, port, grace=grace, log_level=log_level)
    worker = server.worker
    worker.bind_to_this_thread()

    def on_signal(signum, frame) -> None:
        server.handle_exit(signum, frame)

    def run_http() -> None:
        try:
            server.run()
        except SystemExit:  # uvicorn exits when it cannot start; reported below, in one line
            pass

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    http = threading.Thread(target=run_http, name="specdecode-http", daemon=True)
    http.start()
    try:
        worker.run(until=lambda: not http.is_alive())
    finally:
        http.join()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if not server.started:
        raise SpecDecodeError(f"the server could not listen on {host}:{port} (see above)")
