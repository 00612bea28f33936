"""Which browser pages may call the server (CORS), as llama.cpp's server answers them.

Starlette's middleware decides; a preflight from an origin that is not let in is answered as
llama.cpp's server answers it, for the clients written against it: 200 without
`Access-Control-Allow-Origin` (Starlette's is 400; a browser refuses the call either way, and
the body still says why).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

# "localhost", as llama.cpp's server reads it: pages served from this machine, any port
LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


class Cors(CORSMiddleware):
    def __init__(self, app, origins: tuple[str, ...]) -> None:
        super().__init__(app, allow_origins=[o for o in origins if o != "localhost"],
                         allow_origin_regex=LOCAL_ORIGINS if "localhost" in origins else None,
                         allow_methods=["*"], allow_headers=["*"])

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        response.status_code = 200
        return response
