"""Autoscaling live: `serve --ray --replicas 1 --max-replicas 2 --max-batch 2` on the
135M model, 1 thread a replica; 8 streaming clients ask one request after another until the deployment
has run 2 replicas for --hold seconds (or --limit seconds pass). Ray Serve adds a replica when the
requests in flight per replica (queued ones included) stay above `target_ongoing_requests`
(--max-batch) for its upscale delay (30 s by default). Prints the replica count over time and
every request's outcome (ok: ended by [DONE]).

    .venv/bin/python docs/benchmarks/ray/autoscale.py

Writes autoscale.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from pathlib import Path

from faults import replicas_running

from specdecode.app.bench.load import free_port, stream_outcome
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select
from specdecode.app.cli import build_parser
from specdecode.app.server import ray_serve

HERE = Path(__file__).parent
CLIENTS = 8


async def load(url: str, prompts: list[str], hold: float, limit: float
               ) -> tuple[Counter, list[tuple[float, int]], float | None]:
    """Run the clients until 2 replicas have run for `hold` s or `limit` s passed: the outcomes,
    the replica count every second, and when the second replica first ran."""
    import httpx

    started, timeline, second = time.monotonic(), [], None
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal second
        while not done.is_set():
            now = time.monotonic() - started
            count = await asyncio.to_thread(replicas_running)
            timeline.append((now, count))
            if count >= 2 and second is None:
                second = now
            if now > limit or (second is not None and now - second > hold):
                done.set()
            await asyncio.sleep(1.0)

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        async def one_client(k: int) -> list[str]:
            out, j = [], 0
            while not done.is_set():
                out.append(await stream_outcome(client, {
                    "messages": [{"role": "user", "content": prompts[(k + j) % len(prompts)]}],
                    "max_tokens": 64, "temperature": 0}))
                j += CLIENTS
            return out

        got = await asyncio.gather(watch(), *(one_client(k) for k in range(CLIENTS)))
    return Counter(o for outcomes in got[1:] for o in outcomes), timeline, second


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hold", type=float, default=20.0)
    p.add_argument("--limit", type=float, default=150.0)
    a = p.parse_args()
    port = free_port()
    args = build_parser().parse_args(["serve", "--ray", "--replicas", "1", "--max-replicas", "2",
                                      "--max-batch", "2", "--threads", "1", "--port", str(port)])
    prompts = [q["turns"][0] for q in select(load_questions(None), 80)]
    with ray_serve.ray_instance(log_to_driver=False):
        ray_serve.run_deployment(args)
        outcomes, timeline, second = asyncio.run(load(f"http://127.0.0.1:{port}", prompts,
                                                      a.hold, a.limit))
    machine = machine_info()
    changes = [(t, n) for i, (t, n) in enumerate(timeline) if i == 0 or n != timeline[i - 1][1]]
    lines = [f"# Autoscaling under load: {CLIENTS} streaming clients, --replicas 1 "
             "--max-replicas 2 --max-batch 2, 1 thread a replica, smollm2-135m", "",
             f"{machine['cpu']}; commit {machine['commit']}, {machine['date']}", "",
             "Replicas running (seconds from the load's start: count): "
             + ", ".join(f"{t:.0f} s: {n}" for t, n in changes) + ".", "",
             f"Second replica running after **{second:.0f} s** of load." if second is not None
             else "**No second replica** within the limit.", "",
             "Requests: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())) + "."]
    report = "\n".join(lines)
    print(report)
    (HERE / "autoscale.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
