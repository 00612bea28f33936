"""Fill-in-the-middle as an editor sees it: `specdecode serve --model qwen2.5-coder-1.5b` against
llama.cpp's own server (`llama-server`, built by `make peers`) on the same GGUF file, the same
`/infill` requests (the bench's FIM set: `bench --fim 20`, functions of Python's library with a
middle cut out; `input_prefix`, `input_suffix`, n_predict 128, greedy), streamed, 2 threads.
Each server alone on the machine, one after the other (ours, llama, ours with `ar`): per
request the client's time to the first streamed text and to the last, means over the requests.
Our answers are checked to be plain decoding's (`ar`), text for text.

    .venv/bin/python docs/benchmarks/fim/servers.py > docs/benchmarks/fim/servers.txt
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx

from specdecode.app.bench.fim import fim_questions
from specdecode.models.loader import gguf_file
from specdecode.storage import cache_dir
from specdecode.timing import cpu_name

PORT, MODEL, N = 8767, "qwen2.5-coder-1.5b", 20
BIN = cache_dir() / "llama.cpp" / "build" / "bin" / "llama-server"
OURS = [sys.executable, "-m", "specdecode.app.cli", "serve", "--model", MODEL, "--port", str(PORT)]


def servers() -> dict[str, list[str]]:
    return {"specdecode serve (default: draft)": OURS,
            "llama-server": [str(BIN), "-m", str(gguf_file(MODEL)), "-t", "2", "-c", "4096",
                             "--port", str(PORT), "-np", "1", "--no-warmup"],
            "specdecode serve --method ar": OURS + ["--method", "ar"]}


def request(q: dict, llama: bool) -> dict:
    body = {"input_prefix": q["prefix"], "input_suffix": q["suffix"], "n_predict": 128,
            "stream": True}
    # llama.cpp samples unless its chain is cut to one candidate; its cache would skip the
    # repeated rounds' prompts
    return body | ({"samplers": ["top_k"], "top_k": 1, "cache_prompt": False} if llama else {})


def one(client: httpx.Client, q: dict, llama: bool) -> tuple[float, float, str]:
    """(seconds to the first text, seconds to the end, the middle) of one streamed request."""
    t0, first, text = time.perf_counter(), None, []
    with client.stream("POST", "/infill", json=request(q, llama)) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event.get("content") and first is None:
                first = time.perf_counter() - t0
            text.append(event.get("content", ""))
            if event.get("stop"):
                break
    total = time.perf_counter() - t0
    return first if first is not None else total, total, "".join(text)


def round_of(label: str, command: list[str], questions: list[dict]) -> list[tuple]:
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{PORT}"
        for _ in range(900):
            try:
                if httpx.get(base + "/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        with httpx.Client(base_url=base, timeout=600) as client:
            one(client, {"prefix": "def f():\n", "suffix": "\n"}, label.startswith("llama"))
            return [one(client, q, label.startswith("llama")) for q in questions]
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    questions = fim_questions(N)
    print(f"{N} /infill requests (bench --fim {N}), {MODEL} ({gguf_file(MODEL).name}), "
          f"{cpu_name()}, 2 threads; streamed, greedy, n_predict 128")
    best = {label: round_of(label, command, questions) for label, command in servers().items()}
    print("| server | time to first token, mean ms | whole middle, mean ms |")
    print("|---|---:|---:|")
    for label, runs in best.items():
        print(f"| {label} | {1e3 * sum(r[0] for r in runs) / N:.0f} | "
              f"{1e3 * sum(r[1] for r in runs) / N:.0f} |")
    ours, plain = best["specdecode serve (default: draft)"], best["specdecode serve --method ar"]
    same = sum(a[2] == b[2] for a, b in zip(ours, plain))
    print(f"our default method's middles equal to plain decoding's: {same}/{N}")


if __name__ == "__main__":
    main()
