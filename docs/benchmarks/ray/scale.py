"""Ray Serve scale-out on this machine: requests per second under 8 (and 16) streaming
clients with 2 engine replicas of 1 thread against 1 replica of 1 thread, both through Ray's HTTP
proxy, beside the plain server of 1 thread; the latency Ray adds to a request at 1 client; what
Ray's own processes cost in CPU; and whether every answer is the plain server's (greedy).

    .venv/bin/python docs/benchmarks/ray/scale.py [--rounds 2] [--clients 8,16]

Servers run one at a time (each `specdecode serve` process, Ray's started and stopped with it),
in rounds that interleave them, so a drift of the machine's speed hits each alike; medians over
rounds. Writes scale.json and scale.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx
import psutil

from specdecode.app.bench.load import Server, _body, _level
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select

HERE = Path(__file__).parent
CONFIGS = {
    "plain, 1 thread": ["--threads", "1"],
    "Ray, 1 replica x 1 thread": ["--ray", "--replicas", "1", "--threads", "1"],
    "Ray, 2 replicas x 1 thread": ["--ray", "--replicas", "2", "--threads", "1"],
}
ENGINE_PROCESS = "ServeReplica:specdecode:EngineReplica"


def latency_ms(url: str, repeats: int = 30) -> dict:
    """Median ms of a 1-token chat completion and of GET /v1/models, one client."""
    body = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 1,
            "temperature": 0}
    out = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for name, call in (("chat_1_token", lambda: client.post("/v1/chat/completions",
                                                                  json=body)),
                           ("models", lambda: client.get("/v1/models"))):
            call()
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                call().raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
            out[name] = round(statistics.median(times), 2)
    return out


def overhead_cpu(server: Server) -> dict[str, float]:
    """CPU seconds so far of the server's process tree: engine replicas apart from the rest."""
    engine = rest = 0.0
    root = psutil.Process(server.process.pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            cpu = p.cpu_times()
            seconds = cpu.user + cpu.system
            if ENGINE_PROCESS in " ".join(p.cmdline()) or p.pid == root.pid and \
                    "--ray" not in p.cmdline():
                engine += seconds
            else:
                rest += seconds
        except psutil.Error:
            pass
    return {"engine": engine, "rest": rest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--clients", default="8,16")
    p.add_argument("--requests", type=int, default=4, help="per client per round")
    a = p.parse_args()
    levels = [int(c) for c in a.clients.split(",")]
    prompts = [q["turns"][0] for q in select(load_questions(None), 80)]
    bodies = [_body(prompts[i % len(prompts)], a.max_new_tokens)
              for i in range(a.requests * max(levels))]
    common = ["--max-batch", "8", "--max-queue", str(4 * max(levels)),
              "--request-timeout", "3600"]
    runs: dict[tuple[str, int], list[dict]] = {(c, n): [] for c in CONFIGS for n in levels}
    kernels = ""
    for _ in range(a.rounds):
        for label, extra in CONFIGS.items():
            server = Server(common + extra)
            started = time.perf_counter()
            kernels = server.wait()
            up = time.perf_counter() - started
            try:
                asyncio.run(_level(server.url, bodies[:2], 2))  # warm-up
                latency = latency_ms(server.url)
                for n in levels:
                    before = overhead_cpu(server)
                    timings, wall = asyncio.run(_level(server.url, bodies[: a.requests * n], n))
                    after = overhead_cpu(server)
                    runs[label, n].append({
                        "ready_s": round(up, 1), "latency_ms": latency, "wall_s": round(wall, 2),
                        "requests_per_s": round(len(timings) / wall, 3),
                        "tokens_per_s": round(sum(t.tokens for t in timings) / wall, 1),
                        "ttft_p50_s": round(statistics.median(t.first for t in timings), 3),
                        "cpu_s": {k: round(after[k] - before[k], 1) for k in after},
                        "answers": {t.prompt: t.text for t in timings}})
            finally:
                server.stop()
    reference = {k: v for n in levels for r in runs["plain, 1 thread", n]
                 for k, v in r["answers"].items()}
    summary = {}
    for (label, n), rs in runs.items():
        same = sum(r["answers"][k] == reference.get(k, r["answers"][k]) for r in rs
                   for k in r["answers"])
        summary[f"{label} | {n}"] = {
            "requests_per_s": statistics.median(r["requests_per_s"] for r in rs),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
            "ttft_p50_s": statistics.median(r["ttft_p50_s"] for r in rs),
            "chat_1_token_ms": statistics.median(r["latency_ms"]["chat_1_token"] for r in rs),
            "models_ms": statistics.median(r["latency_ms"]["models"] for r in rs),
            "engine_cpu_s": statistics.median(r["cpu_s"]["engine"] for r in rs),
            "other_cpu_s": statistics.median(r["cpu_s"]["rest"] for r in rs),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "ready_s": statistics.median(r["ready_s"] for r in rs),
            "same_answers": f"{same}/{sum(len(r['answers']) for r in rs)}"}
    machine = machine_info()
    info = {"cpu": machine["cpu"], "kernels": kernels, "commit": machine["commit"],
            "date": machine["date"], "rounds": a.rounds, "requests": a.requests,
            "clients": levels, "max_new_tokens": a.max_new_tokens, "model": "smollm2-135m"}
    plain, one = (summary[f"{k} | {levels[0]}"] for k in list(CONFIGS)[:2])
    lines = [f"# Ray Serve scale-out: {info['model']}, {a.requests} streamed requests of "
             f"{a.max_new_tokens} new tokens per client a round, greedy, --max-batch 8, median "
             f"of {a.rounds} rounds", "",
             f"{info['cpu']}, kernel path {kernels}; commit {info['commit']}, {info['date']}", "",
             "| server | clients | requests/s | tokens/s | TTFT p50 s | 1-token chat ms "
             "(1 client) | GET /v1/models ms | engine CPU s | other CPU s | wall s | ready s | "
             "answers as plain |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, s in summary.items():
        lines.append(f"| {label} | {s['requests_per_s']:.2f} | {s['tokens_per_s']:.0f} | "
                     f"{s['ttft_p50_s']:.3f} | {s['chat_1_token_ms']:.1f} | {s['models_ms']:.1f} "
                     f"| {s['engine_cpu_s']:.1f} | {s['other_cpu_s']:.1f} | {s['wall_s']:.1f} | "
                     f"{s['ready_s']:.0f} | {s['same_answers']} |")
    single, double = list(CONFIGS)[1:]

    def rps(label: str, n: int) -> float:
        return summary[f"{label} | {n}"]["requests_per_s"]

    ratios = ", ".join(f"{rps(double, n) / rps(single, n):.2f}x at {n} clients" for n in levels)
    lines += ["", f"2 replicas / 1 replica, requests per second: **{ratios}**. Ray adds "
              f"{one['chat_1_token_ms'] - plain['chat_1_token_ms']:.1f} ms to a 1-token chat "
              f"request and {one['models_ms'] - plain['models_ms']:.1f} ms to GET /v1/models "
              f"at 1 client (1 replica against the plain server)."]
    report = "\n".join(lines)
    print(report)
    (HERE / "scale.md").write_text(report + "\n")
    (HERE / "scale.json").write_text(json.dumps({
        "info": info, "summary": summary,
        "runs": {f"{label} | {n}": rs for (label, n), rs in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
