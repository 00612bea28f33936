"""Running the app under uvicorn with a graceful shutdown that cannot hang.

On SIGTERM uvicorn stops accepting connections and waits for open ones to finish; a generation can
run for minutes, so the worker is told first: refuse new jobs, let running ones finish for `grace`
seconds, then cancel them (a streamed response gets a final error event and [DONE]). uvicorn's own
graceful-shutdown timeout, a little longer, is the backstop.
"""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

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
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=grace + 5)
    return GracefulServer(config, app.state.specdecode.worker, grace)
