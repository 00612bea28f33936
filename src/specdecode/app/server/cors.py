"""Which browser pages may call the server (CORS), as llama.cpp's server answers them.

By default any page may (llama.cpp's server and vLLM allow any origin too): a page still needs
the API key where one is set, and the preflight, which carries no key, is answered before the
key is checked. Starlette's middleware decides, with llama.cpp's answers: the origin echoed with
credentials allowed, its methods listed, and a preflight from an origin that is not let in
answered 200 without `Access-Control-Allow-Origin` (Starlette's is 400; a browser refuses the
call either way). The requested headers are echoed, not llama.cpp's `*`: the Fetch standard
never lets `*` cover `Authorization`, so a page sending the key would be refused.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

# "localhost", as llama.cpp's server reads it: pages served from this machine, any port
LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
METHODS = ["GET", "POST", "DELETE", "OPTIONS"]  # llama.cpp's list (HEAD needs no preflight)


class Cors(CORSMiddleware):
    def __init__(self, app, origins: tuple[str, ...]) -> None:
        super().__init__(app, allow_origins=[o for o in origins if o != "localhost"],
                         allow_origin_regex=LOCAL_ORIGINS if "localhost" in origins else None,
                         allow_methods=METHODS, allow_headers=["*"], allow_credentials=True)

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        response.status_code = 200
        return response
