"""Killing an engine replica under load: 2 replicas of 1 thread on the 135M model behind
Ray's proxy, 16 streaming clients of 3 requests each, one replica's process killed (SIGKILL) 1.5 s
in, --kills times. Counts each request's outcome (ok: ended by [DONE]; error event: a clean error
event, then [DONE], for a stream the dead replica had begun; anything else is a lost request) and
times the deployment's return to 2 running replicas.

    .venv/bin/python docs/benchmarks/ray/faults.py [--kills 3]

Writes faults.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil

from specdecode.app.bench.load import free_port, stream_outcome
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select
from specdecode.app.cli import build_parser
from specdecode.app.server import ray_serve

from ray import serve  # noqa: E402  (after ray_serve: it sets Ray Serve's switches first)

HERE = Path(__file__).parent
CLIENTS, PER_CLIENT, KILL_AFTER_S = 16, 3, 1.5


def replicas_running() -> int:
    status = serve.status().applications[ray_serve.APP_NAME]
    return status.deployments[ray_serve.ENGINE].replica_states.get("RUNNING", 0)


async def one_kill(url: str, prompts: list[str]) -> tuple[Counter, float]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one_client(k: int) -> list[str]:
            return [await stream_outcome(client, {
                "messages": [{"role": "user",
                              "content": prompts[(k * PER_CLIENT + j) % len(prompts)]}],
                "max_tokens": 64, "temperature": 0}) for j in range(PER_CLIENT)]

        clients = asyncio.gather(*(one_client(k) for k in range(CLIENTS)))
        await asyncio.sleep(KILL_AFTER_S)
        engines = [p for p in psutil.process_iter(["cmdline"])
                   if ray_serve.ENGINE in " ".join(p.info["cmdline"] or [])]
        engines[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        outcomes = Counter(o for got in await clients for o in got)
    while replicas_running() < 2:
        await asyncio.sleep(0.2)
    return outcomes, time.monotonic() - killed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=3)
    a = p.parse_args()
    port = free_port()
    args = build_parser().parse_args(["serve", "--ray", "--replicas", "2", "--threads", "1",
                                      "--port", str(port)])
    prompts = [q["turns"][0] for q in select(load_questions(None), 80)]
    rows = []
    with ray_serve.ray_instance(log_to_driver=False):
        ray_serve.run_deployment(args)
        for _ in range(a.kills):
            outcomes, back = asyncio.run(one_kill(f"http://127.0.0.1:{port}", prompts))
            rows.append((outcomes, back))
            print(dict(outcomes), f"back to 2 replicas in {back:.1f} s", flush=True)
    machine = machine_info()
    lost = sum(n for outcomes, _ in rows for k, n in outcomes.items()
               if k not in ("ok", "error event"))
    lines = [f"# A replica killed under load: {CLIENTS} streaming clients x {PER_CLIENT} "
             f"requests, 2 replicas x 1 thread, smollm2-135m", "",
             f"{machine['cpu']}; commit {machine['commit']}, {machine['date']}", "",
             "| kill | requests | ok | error event | lost | back to 2 replicas (s) |",
             "|---|---|---|---|---|---|"]
    for i, (outcomes, back) in enumerate(rows, 1):
        total = sum(outcomes.values())
        bad = total - outcomes["ok"] - outcomes["error event"]
        lines.append(f"| {i} | {total} | {outcomes['ok']} | {outcomes['error event']} | {bad} | "
                     f"{back:.1f} |")
    lines += ["", f"Requests lost across {len(rows)} kills: **{lost}**."]
    report = "\n".join(lines)
    print(report)
    (HERE / "faults.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
