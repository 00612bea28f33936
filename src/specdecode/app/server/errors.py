"""Errors, each answered in the shape of the dialect its path belongs to: Anthropic's for
`/v1/messages`, OpenAI's for every other route (and for what the app answers on its own: a route
it lacks, a body pydantic refused). Nothing a client sends may produce a 500: user errors are
`SpecDecodeError`s (400), request shapes are checked by the pydantic schemas (400), and anything
else is a bug that is logged and answered with a generic 500 body, never a traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...errors import KernelError, PromptTooLongError, SpecDecodeError
from .openai_format import error_body
from .job import InternalError, RequestTimeoutError, ServerBusyError, ServerShutdownError

log = logging.getLogger("specdecode.server")

RETRY_AFTER_SECONDS = 1
ANTHROPIC_PREFIX = "/v1/messages"
# Anthropic's error types by HTTP status (any other status: "api_error")
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                    429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def body_for(path: str, status: int, message: str, type: str = "invalid_request_error",
             param: str | None = None, code: str | None = None) -> dict:
    """An error's body in the shape of the dialect `path` belongs to."""
    if path.startswith(ANTHROPIC_PREFIX):
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"),
                                           "message": message}}
    return error_body(message, type, param, code)


class APIError(Exception):
    """An error answered with the error body of the dialect its route belongs to."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type
        self.param, self.code = param, code
        self.headers = headers

    def body(self, path: str = "") -> dict:
        return body_for(path, self.status, self.message, self.type, self.param, self.code)

    def response(self, path: str = "") -> JSONResponse:
        return JSONResponse(self.body(path), self.status, headers=self.headers)


def api_error(exc: Exception) -> APIError:
    """The HTTP meaning of an exception raised while serving a generation."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, KernelError):  # the server's failure, not the request's
        return APIError(500, str(exc), "server_error", code="kernel_error")
    if isinstance(exc, PromptTooLongError):  # the code OpenAI's clients check for
        return APIError(400, str(exc), code="context_length_exceeded")
    if isinstance(exc, SpecDecodeError):
        return APIError(400, str(exc))
    if isinstance(exc, ServerBusyError):
        return APIError(503, str(exc), "server_error", code="server_busy",
                        headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, ServerShutdownError):
        return APIError(503, str(exc), "server_error", code="server_shutdown")
    if isinstance(exc, RequestTimeoutError):
        return APIError(504, str(exc), "timeout_error", code="request_timeout")
    if isinstance(exc, InternalError):
        return APIError(500, str(exc), "server_error", code="internal_error")
    log.error("unexpected error", exc_info=exc)
    return APIError(500, "internal server error; see the server log", "server_error",
                    code="internal_error")


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc.errors()).response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":  # no route: say which there are
            message = _no_route(app, request)
        return APIError(exc.status_code, message, code=code,
                        headers=getattr(exc, "headers", None)).response(request.url.path)

    for kind in (APIError, SpecDecodeError, ServerBusyError, ServerShutdownError,
                 RequestTimeoutError, InternalError):
        app.add_exception_handler(kind, _known_error)
    app.add_exception_handler(Exception, _unexpected_error)


def _no_route(app: FastAPI, request: Request) -> str:
    """A 404's message: the route asked for, and the routes this server has."""
    prefixes = ("/v1/", "/infill", "/completion", "/tokenize", "/detokenize", "/apply-template",
                "/props", "/health", "/metrics")
    served = ", ".join(f"{method} {route.path.replace(':path', '')}"
                       for route in _routes(app.routes) if route.path.startswith(prefixes)
                       for method in sorted(getattr(route, "methods", ())))
    return f"no route {request.method} {request.url.path}; this server has {served}"


def _routes(routes: list) -> list:
    """The routes with a path, those of the dialects' routers included (without a prefix)."""
    out = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        out += _routes(inner.routes) if inner is not None else [route] * hasattr(route, "path")
    return out


async def _known_error(request: Request, exc: Exception) -> JSONResponse:
    return api_error(exc).response(request.url.path)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s", request.url.path, exc_info=exc)
    return api_error(InternalError("internal server error; see the server log")).response(
        request.url.path)


def _validation_error(errors: list[dict]) -> APIError:
    """OpenAI's error shape for the first problem pydantic found (`param` names the field)."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return APIError(400, f"the request body is not valid JSON: {detail}".rstrip(": "),
                        code="invalid_json")
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown field: this server does not honour it"
    message = f"{param}: {msg}" if param else msg
    return APIError(400, message, param=param)
