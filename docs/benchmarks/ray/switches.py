"""Ray Serve's switches (`ray_serve.RAY_SERVE_ENV`), each way: the latency of a 1-token chat
request and of GET /v1/models at 1 client, and the requests per second of 2 replicas of 1 thread
under 8 streaming clients (32 requests of 64 tokens), smollm2-135m, one `specdecode serve --ray`
after another.

    .venv/bin/python docs/benchmarks/ray/switches.py

Writes switches.md beside this file.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from scale import latency_ms

from specdecode.app.bench.load import Server, _body, _level
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select

HERE = Path(__file__).parent
OFF = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "1",
       "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "1", "RAY_SERVE_USE_GRPC_BY_DEFAULT": "0"}
SETTINGS = {
    "Ray Serve's defaults": {},
    "user code and router on the actors' loops": {
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
        "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0"},
    "gRPC between deployments": {"RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"},
    "all three (what serve --ray sets)": {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
                                          "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
                                          "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"},
}


def main() -> None:
    prompts = [q["turns"][0] for q in select(load_questions(None), 80)]
    bodies = [_body(prompts[i % len(prompts)], 64) for i in range(32)]
    rows = []
    for label, switches in SETTINGS.items():
        saved = dict(os.environ)
        os.environ.update({**OFF, **switches})  # the server process inherits them
        server = Server(["--ray", "--replicas", "2", "--threads", "1", "--max-batch", "8",
                         "--max-queue", "32"])
        os.environ.clear()
        os.environ.update(saved)
        try:
            server.wait()
            asyncio.run(_level(server.url, bodies[:2], 2))
            latency = latency_ms(server.url)
            timings, wall = asyncio.run(_level(server.url, bodies, 8))
        finally:
            server.stop()
        rows.append((label, latency, len(timings) / wall))
        print(rows[-1], flush=True)
    machine = machine_info()
    lines = ["# Ray Serve's switches: 2 replicas x 1 thread, smollm2-135m", "",
             f"{machine['cpu']}; commit {machine['commit']}, {machine['date']}", "",
             "| setting | 1-token chat ms | GET /v1/models ms | requests/s, 8 clients |",
             "|---|---|---|---|"]
    lines += [f"| {label} | {lat['chat_1_token']:.1f} | {lat['models']:.1f} | {rps:.2f} |"
              for label, lat, rps in rows]
    report = "\n".join(lines)
    print(report)
    (HERE / "switches.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
