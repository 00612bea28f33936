"""`specdecode bench --ttft REQUEST.json`: the time to first token of a long prompt as an agent
sends it, read three ways by `specdecode serve`: cold (nothing kept), from the server's memory (the
same request again) and from disk after a restart (a new server on the same `--prompt-cache-dir`).

REQUEST.json is a request as a client sent it: `{"path": "/v1/responses", "body": ...}` (the shape
docs/benchmarks/clients/claude-code/capture.py records; `body` an object or its JSON text) for the
Responses, Messages or chat completions route. Each answer is cut to one greedy token, not
streamed: its time is the prompt's read and one step. The three answers must be the same token.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from ...errors import InvalidParameterError
from .load import Server

# each route's field for the answer's token limit
LIMITS = {"/v1/responses": "max_output_tokens", "/v1/messages": "max_tokens",
          "/v1/chat/completions": "max_tokens"}


def read_request(path: str) -> tuple[str, dict]:
    """The route and the body of a recorded request, made greedy, one token, not streamed."""
    try:
        recorded = json.loads(Path(path).read_text())
        body = recorded["body"]
        body = json.loads(body) if isinstance(body, str) else body
        route = recorded["path"].split("?")[0]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError(f"--ttft needs a recorded request ({{\"path\": ..., \"body\": "
                                    f"...}}): {path}: {exc}") from None
    if route not in LIMITS:
        raise InvalidParameterError(f"--ttft: {route} is none of {', '.join(LIMITS)}")
    body.update({"stream": False, "temperature": 0, LIMITS[route]: 1})
    return route, body


def prompt_tokens(usage: dict) -> tuple[int, int]:
    """(the prompt's tokens, those served from the cache) from any route's usage."""
    if "cache_read_input_tokens" in usage:  # Anthropic's: input_tokens are the rest
        return usage["input_tokens"] + usage["cache_read_input_tokens"], usage[
            "cache_read_input_tokens"]
    details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    return usage.get("input_tokens", usage.get("prompt_tokens")), details.get("cached_tokens", 0)


def _ask(server: Server, route: str, body: dict) -> tuple[float, dict]:
    import httpx

    start = time.perf_counter()
    r = httpx.post(server.url + route, json=body, timeout=3600)
    seconds = time.perf_counter() - start
    if r.status_code != 200:
        raise InvalidParameterError(f"--ttft: the server answered {r.status_code}: {r.text[:300]}")
    return seconds, r.json()


def _without_ids(obj):
    """An answer's content without the ids each response draws anew (items', calls')."""
    if isinstance(obj, dict):
        return {k: _without_ids(v) for k, v in obj.items() if k not in ("id", "call_id")}
    if isinstance(obj, list):
        return [_without_ids(v) for v in obj]
    return obj


def ttft_report(args: argparse.Namespace, serve_args: list[str]) -> str:
    import httpx

    route, body = read_request(args.ttft)
    rows, answers = [], []
    with tempfile.TemporaryDirectory(prefix="specdecode-ttft-") as directory:
        for phases in (("cold", "memory"), ("disk, after a restart",)):
            server = Server([*serve_args, "--prompt-cache-dir", directory])
            try:
                kernels = server.wait()
                body["model"] = httpx.get(server.url + "/v1/models").json()["data"][0]["id"]
                for phase in phases:
                    seconds, answer = _ask(server, route, body)
                    rows.append((phase, seconds, *prompt_tokens(answer["usage"])))
                    answers.append(json.dumps(_without_ids(answer.get("output") or answer.get(
                        "content") or answer.get("choices")), sort_keys=True))
            finally:
                server.stop()
    cold = rows[0][1]
    lines = [f"time to first token of {args.ttft} ({route}) on {args.model}, {kernels}"]
    for phase, seconds, prompt, cached in rows:
        lines.append(f"  {phase:<22} {seconds:8.2f} s  {cold / seconds:6.1f}x  "
                     f"prompt {prompt} tokens, {cached} from the cache")
    same = "the same" if len(set(answers)) == 1 else "DIFFERENT"
    lines.append(f"  answers: {same} token in all three")
    return "\n".join(lines)
