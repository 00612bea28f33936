"""Conversation affinity: 8 conversations of 4 turns at once (turn 1 a Spec-Bench first
turn, then the answer and a follow-up each turn after a user's pause of 0.5-2 s, 64 new tokens,
greedy, streamed) against 2
replicas of 1 thread on the 135M model behind Ray's proxy, routed by conversation or by Ray
Serve's own least-loaded choice. Reports how often turns 2-4 land on the replica of turn 1, their
time to first token, and the share of their prompt tokens taken from a kept prompt's cache.

    .venv/bin/python docs/benchmarks/ray/affinity.py [--rounds 2]

Each round deploys each routing afresh (empty caches) and runs the same conversations; medians
over every later turn of every round. Writes affinity.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path

import httpx

from specdecode.app.bench.load import free_port
from specdecode.app.bench.run import machine_info
from specdecode.app.bench.specbench import load_questions, select
from specdecode.app.cli import build_parser
from specdecode.app.server import ray_replica, ray_serve

from ray import serve  # noqa: E402  (after ray_serve: it sets Ray Serve's switches first)

HERE = Path(__file__).parent
CONVERSATIONS, TURNS, NEW_TOKENS = 8, 4, 64
PAUSE_S = (0.5, 2.0)  # a user reads the answer before the next turn
FOLLOW_UPS = ["Can you say more about that?", "Give an example.", "Summarize it in one line."]


async def turn(client: httpx.AsyncClient, messages: list[dict]) -> dict:
    body = {"messages": messages, "max_tokens": NEW_TOKENS, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started, first, text, usage = time.perf_counter(), None, [], {}
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        replica = r.headers[ray_replica.REPLICA_HEADER]
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                first = first or time.perf_counter() - started
                text.append(event["choices"][0]["delta"]["content"])
            usage = event.get("usage") or usage
    return {"replica": replica, "ttft": first or time.perf_counter() - started,
            "text": "".join(text), "prompt": usage["prompt_tokens"],
            "cached": usage["prompt_tokens_details"]["cached_tokens"]}


async def conversations(url: str, openings: list[str]) -> list[list[dict]]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        async def one(k: int, opening: str) -> list[dict]:
            pauses = random.Random(k)  # the same pauses under each routing
            messages, turns = [{"role": "user", "content": opening}], []
            for i in range(TURNS):
                if i:
                    await asyncio.sleep(pauses.uniform(*PAUSE_S))
                got = await turn(client, messages)
                turns.append(got)
                messages += [{"role": "assistant", "content": got["text"]},
                             {"role": "user", "content": FOLLOW_UPS[i % len(FOLLOW_UPS)]}]
            return turns

        return await asyncio.gather(*(one(k, o) for k, o in enumerate(openings)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    port = free_port()
    openings = [q["turns"][0] for q in select(load_questions(None), 80)][:CONVERSATIONS]
    runs: dict[str, list[list[list[dict]]]] = {"conversation": [], "least-loaded": []}
    with ray_serve.ray_instance(log_to_driver=False):
        for _ in range(a.rounds):
            for routing in runs:
                args = build_parser().parse_args([
                    "serve", "--ray", "--replicas", "2", "--threads", "1", "--port", str(port),
                    "--routing", routing])
                ray_serve.run_deployment(args)
                runs[routing].append(asyncio.run(conversations(f"http://127.0.0.1:{port}",
                                                               openings)))
                serve.delete(ray_serve.APP_NAME)
    machine = machine_info()
    lines = [f"# Conversation affinity: {CONVERSATIONS} conversations x {TURNS} turns at once, "
             f"{PAUSE_S[0]}-{PAUSE_S[1]} s between turns, {NEW_TOKENS} new tokens a turn, "
             f"2 replicas x 1 thread, smollm2-135m, greedy, {a.rounds} rounds", "",
             f"{machine['cpu']}; commit {machine['commit']}, {machine['date']}", "",
             "| routing | later turns on turn 1's replica | TTFT turn 1 p50 s | TTFT turns 2-4 "
             "p50 s | turns 2-4 p90 s | prompt tokens from cache (turns 2-4) |",
             "|---|---|---|---|---|---|"]
    texts = {}
    for routing, rounds in runs.items():
        later = [t for r in rounds for conv in r for t in conv[1:]]
        home = sum(t["replica"] == conv[0]["replica"] for r in rounds for conv in r
                   for t in conv[1:])
        firsts = [conv[0]["ttft"] for r in rounds for conv in r]
        ttfts = sorted(t["ttft"] for t in later)
        cached = sum(t["cached"] for t in later) / sum(t["prompt"] for t in later)
        lines.append(f"| {routing} | {home}/{len(later)} ({home / len(later):.0%}) | "
                     f"{statistics.median(firsts):.3f} | {statistics.median(ttfts):.3f} | "
                     f"{ttfts[int(0.9 * (len(ttfts) - 1))]:.3f} | {cached:.0%} |")
        texts[routing] = [[t["text"] for t in conv] for r in rounds for conv in r]
    same = texts["conversation"] == texts["least-loaded"]
    lines += ["", f"Every answer the same under both routings: **{same}**."]
    report = "\n".join(lines)
    print(report)
    (HERE / "affinity.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
