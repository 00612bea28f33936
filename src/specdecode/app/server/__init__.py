"""OpenAI-compatible HTTP server (`specdecode serve`): FastAPI routes in front of one engine worker.

    from specdecode.server import build_server, create_app
    build_server(create_app(SpecDecoder.load()), port=8000).run()

Needs the server dependencies (fastapi, uvicorn, prometheus_client)."""

from .app import create_app
from .runner import GracefulServer, build_server

__all__ = ["GracefulServer", "build_server", "create_app"]
