"""`specdecode serve` against llama.cpp's own server (`llama-server`, built by `make peers`) on
the same GGUF file, the same 20 extraction requests (extraction.jsonl) with the same json_schema
as OpenAI's `response_format`, greedy, 128 new tokens at most, 2 threads. llama-server runs
plain and with its own draft model (the 0.5B's GGUF, `-md`). Each server alone on the machine,
in the order ours, llama plain, llama draft, ours, llama plain, llama draft: tokens a second
over all requests (client wall time, HTTP included), the better of each server's two rounds;
every answer checked against its schema.

    .venv/bin/python docs/benchmarks/grammar/llama_server.py > docs/benchmarks/grammar/llama_server.txt
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jsonschema

from specdecode.models.loader import gguf_file
from specdecode.storage import cache_dir

HERE = Path(__file__).parent
PORT = 8766
QUESTIONS = [json.loads(line) for line in (HERE / "extraction.jsonl").read_text().splitlines()]
BIN = cache_dir() / "llama.cpp" / "build" / "bin" / "llama-server"


def servers() -> dict[str, list[str]]:
    target, draft = str(gguf_file("qwen2.5-coder-1.5b")), str(gguf_file("qwen2.5-coder-0.5b"))
    llama = [str(BIN), "-m", target, "-t", "2", "-c", "4096", "--port", str(PORT), "--jinja",
             "-np", "1", "--no-warmup"]
    return {"specdecode serve (default: draft)": [sys.executable, "-m", "specdecode.app.cli",
                                                 "serve", "--model", "qwen2.5-coder-1.5b",
                                                 "--port", str(PORT)],
            "llama-server": llama,
            "llama-server -md 0.5B": llama + ["-md", draft, "-td", "2"]}


def round_of(command: list[str]) -> tuple[int, float, int]:
    """(completion tokens, seconds, answers valid against their schema) over the requests."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{PORT}"
        for _ in range(900):
            try:
                if httpx.get(base + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        client = httpx.Client(base_url=base, timeout=600)
        warm = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
                "temperature": 0}
        client.post("/v1/chat/completions", json=warm).raise_for_status()
        tokens, seconds, valid = 0, 0.0, 0
        for q in QUESTIONS:
            body = {"messages": [{"role": "user", "content": q["turns"][0]}], "max_tokens": 128,
                    "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {
                        "name": "answer", "schema": q["json_schema"], "strict": True}}}
            t0 = time.perf_counter()
            r = client.post("/v1/chat/completions", json=body)
            seconds += time.perf_counter() - t0
            r.raise_for_status()
            out = r.json()
            tokens += out["usage"]["completion_tokens"]
            try:
                jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]),
                                    q["json_schema"])
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                pass
        return tokens, seconds, valid
    finally:
        server.terminate()
        server.wait(60)


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
               if line.startswith("model name"))
    print(f"# commit {commit}; {cpu}; 2 threads; {len(QUESTIONS)} requests; llama-server from the "
          f"llama-cpp-python 0.3.36 sdist's llama.cpp (make peers)")
    best: dict[str, tuple[int, float, int]] = {}
    for _ in range(2):
        for name, command in servers().items():
            tokens, seconds, valid = round_of(command)
            print(f"{name:34s} {tokens:5d} tokens {seconds:6.1f} s {tokens / seconds:6.1f} tok/s "
                  f"valid {valid}/{len(QUESTIONS)}", flush=True)
            if name not in best or tokens / seconds > best[name][0] / best[name][1]:
                best[name] = (tokens, seconds, valid)
    ours = best["specdecode serve (default: draft)"]
    for name, (tokens, seconds, _) in best.items():
        print(f"best {name:29s} {tokens / seconds:6.1f} tok/s; ours x{ours[0] / ours[1] / (tokens / seconds):.2f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
