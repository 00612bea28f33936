"""Killing an engine replica under load: 2 replicas of 1 thread on a model (the 135M) behind
Ray's proxy, 16 streaming clients of 3 greedy requests each, one replica's process killed
(SIGKILL) once a stream has sent some text, --kills times. Counts each request's outcome (same: ended by [DONE] with the
text and finish reason the undisturbed deployment gave the same request; changed: ended, but
otherwise; error event: a clean error event, then [DONE]; anything else is a lost request), the
streams another replica continued midway (their usage reports the tokens it read again), and
times the deployment's return to 2 running replicas.

    .venv/bin/python docs/benchmarks/ray/faults.py [--kills 3] [--model qwen2.5-coder-1.5b]

Writes faults.md (another model: faults-MODEL.md) beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil

from specdecode.app.bench.load import free_port
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select
from specdecode.app.cli import build_parser
from specdecode.app.server import ray_serve

from ray import serve  # noqa: E402  (after ray_serve: it sets Ray Serve's switches first)

HERE = Path(__file__).parent
CLIENTS, PER_CLIENT = 16, 3
KILL_AFTER_CHUNKS = 4  # a stream's text chunks before the kill: answers are midway


def replicas_running() -> int:
    status = serve.status().applications[ray_serve.APP_NAME]
    return status.deployments[ray_serve.ENGINE].replica_states.get("RUNNING", 0)


async def answer(client: httpx.AsyncClient, prompt: str,
                 begun: asyncio.Event | None = None) -> tuple[str, ...]:
    """A streamed greedy answer: ("done", its text, its finish reason, the tokens a replica
    read again to continue it), ("error event",), or what went wrong."""
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 64,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    text, finish, events, resumed = [], None, [], 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                return (f"http {r.status_code}",)
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: "):])
                    if begun is not None and len(events) > KILL_AFTER_CHUNKS:
                        begun.set()
    except httpx.HTTPError as exc:
        return (type(exc).__name__,)
    if events[-1:] != ["[DONE]"]:
        return ("cut short",)
    for event in map(json.loads, events[:-1]):
        if "error" in event:
            return ("error event",)
        for choice in event.get("choices", []):
            text.append(choice["delta"].get("content") or "")
            finish = choice.get("finish_reason") or finish
        if event.get("usage"):  # a stream continued on another replica says what it re-read
            resumed = event["usage"]["speculative"].get("resumed_tokens", 0)
    return "done", "".join(text), finish, resumed


async def one_kill(url: str, prompts: list[str],
                   expected: dict[str, tuple[str, ...]]) -> tuple[Counter, float]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one_client(k: int) -> list[str]:
            outcomes = []
            for j in range(PER_CLIENT):
                prompt = prompts[(k * PER_CLIENT + j) % len(prompts)]
                got = await answer(client, prompt, begun)
                outcomes.append(got[0] if got[0] != "done" else
                                "same" if got[:3] == expected[prompt][:3] else "changed")
                if got[0] == "done" and got[3]:
                    outcomes.append("continued")
            return outcomes

        begun = asyncio.Event()
        clients = asyncio.gather(*(one_client(k) for k in range(CLIENTS)))
        await begun.wait()
        engines = [p for p in psutil.process_iter(["cmdline"])
                   if ray_serve.ENGINE in " ".join(p.info["cmdline"] or [])]
        engines[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        outcomes = Counter(o for got in await clients for o in got)
    while replicas_running() < 2:
        await asyncio.sleep(0.2)
    return outcomes, time.monotonic() - killed


async def undisturbed(url: str, prompts: list[str]) -> dict[str, tuple[str, ...]]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return {prompt: await answer(client, prompt) for prompt in prompts}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--model", default="smollm2-135m")
    a = p.parse_args()
    port = free_port()
    args = build_parser().parse_args(["serve", "--model", a.model, "--ray", "--replicas", "2",
                                      "--threads", "1",
                                      "--port", str(port)])
    prompts = [q["turns"][0] for q in select(load_questions(None), 80)]
    rows = []
    prompts = prompts[: CLIENTS * PER_CLIENT]
    url = f"http://127.0.0.1:{port}"
    with ray_serve.ray_instance(log_to_driver=False):
        ray_serve.run_deployment(args)
        expected = asyncio.run(undisturbed(url, prompts))
        for _ in range(a.kills):
            outcomes, back = asyncio.run(one_kill(url, prompts, expected))
            rows.append((outcomes, back))
            print(dict(outcomes), f"back to 2 replicas in {back:.1f} s", flush=True)
    machine = machine_info()
    lost = sum(n for outcomes, _ in rows for k, n in outcomes.items()
               if k not in ("same", "changed", "error event", "continued"))
    lines = [f"# A replica killed under load: {CLIENTS} streaming clients x {PER_CLIENT} "
             f"greedy requests, 2 replicas x 1 thread, {a.model}", "",
             f"{machine['cpu']}; commit {machine['commit']}, {machine['date']}; `python "
             f"docs/benchmarks/ray/faults.py --kills {a.kills} --model {a.model}`", "",
             "| kill | requests | continued midway | same answer | changed | error event | lost "
             "| back to 2 replicas (s) |", "|---|---|---|---|---|---|---|---|"]
    for i, (outcomes, back) in enumerate(rows, 1):
        total = sum(outcomes.values()) - outcomes["continued"]
        bad = total - outcomes["same"] - outcomes["changed"] - outcomes["error event"]
        lines.append(f"| {i} | {total} | {outcomes['continued']} | {outcomes['same']} | "
                     f"{outcomes['changed']} | {outcomes['error event']} | {bad} | {back:.1f} |")
    lines += ["", f"Requests lost across {len(rows)} kills: **{lost}**; answers that differ "
              f"from the undisturbed deployment's: **{sum(o['changed'] for o, _ in rows)}**; "
              f"streams ended by an error: **{sum(o['error event'] for o, _ in rows)}**."]
    report = "\n".join(lines)
    print(report)
    name = "faults.md" if a.model == "smollm2-135m" else f"faults-{a.model}.md"
    (HERE / name).write_text(report + "\n")


if __name__ == "__main__":
    main()
