"""OpenAI-compatible HTTP server (`specdecode serve`): FastAPI routes in front of one engine worker.

    from specdecode.app.server import create_app, serve
    serve(create_app(SpecDecoder.load()), port=8000)  # engine on this thread, HTTP on another

Needs the server dependencies (fastapi, uvicorn, prometheus_client)."""

from .app import create_app
from .runner import GracefulServer, build_server, serve

__all__ = ["GracefulServer", "build_server", "create_app", "serve"]
