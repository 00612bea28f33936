"""`specdecode bench --load 1,2,4,8,16`: the server under concurrent streaming clients.

For each server mode (`MODES`: requests one at a time, as a server without batching runs them,
then batches with adaptive, always-on and no speculation) a `specdecode serve` process is started
on the model, all before the first measurement; then for each concurrency N, mode after mode, N
clients stream chat completions of Spec-Bench's first turns (greedy) back to back until 2N
requests (at least 4) have finished, in --repeats rounds. Reported per mode and N: aggregate
tokens per second (all completion tokens over the level's wall time, the median round), per-request
tokens per second, time to first token and inter-token latency ((last - first token time) /
(tokens - 1) of each request), medians and 95th percentiles, and how many answers are the same
text as one at a time gives for their prompt (greedy: batching and speculation must not change
an answer). The clients run in this process (asyncio, no model loaded); the server in its own, as
in use.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import InvalidParameterError, SpecDecodeError
from ..options import positive_ints
from .run import machine_info
from .specbench import load_questions, select

# label -> `specdecode serve` arguments (with --max-batch set to the largest concurrency)
MODES: dict[str, list[str]] = {
    "one at a time": ["--max-batch", "1"],
    "adaptive": ["--speculation", "adaptive"],
    "always": ["--speculation", "always"],
    "off": ["--speculation", "off"],
}
START_TIMEOUT = 300.0  # seconds for a server to load its model and answer /health


@dataclass
class Timing:
    """One request as its client saw it (seconds from sending it)."""

    tokens: int
    first: float  # the first streamed token
    last: float  # the last streamed token
    done: float  # the end of the response
    prompt: str = ""  # what was asked
    text: str = ""  # the answer, as streamed

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.done if self.done > 0 else 0.0

    @property
    def inter_token(self) -> float | None:
        return (self.last - self.first) / (self.tokens - 1) if self.tokens > 1 else None


async def _stream(client, body: dict) -> Timing:
    started = time.perf_counter()
    first = last = None
    tokens, text = 0, []
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            await r.aread()
            raise SpecDecodeError(f"the server answered {r.status_code}: {r.text[:200]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            now = time.perf_counter() - started
            if event.get("choices") and event["choices"][0]["delta"].get("content"):
                first = now if first is None else first
                last = now
                text.append(event["choices"][0]["delta"]["content"])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    done = time.perf_counter() - started
    if first is None:
        first = last = done
    return Timing(tokens, first, last, done, body["messages"][-1]["content"], "".join(text))


async def stream_outcome(client, body: dict) -> str:
    """How one streamed chat request ended: "ok" ([DONE] after the answer), "error event" (an
    `error` event, then [DONE]: a clean end), else what went wrong (an HTTP status, a broken
    connection, a stream cut short): a lost request."""
    import httpx

    events = []
    try:
        async with client.stream("POST", "/v1/chat/completions",
                                 json={**body, "stream": True}) as r:
            if r.status_code != 200:
                return f"http {r.status_code}"
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: "):])
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if events[-1:] != ["[DONE]"]:
        return "cut short"
    return "error event" if any(e.startswith('{"error"') for e in events) else "ok"


async def _level(url: str, bodies: list[dict], concurrency: int) -> tuple[list[Timing], float]:
    """`concurrency` clients take the bodies in turn, each streaming one at a time; returns the
    timings and the wall time from the first request to the last response."""
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    timings: list[Timing] = []
    limits = httpx.Limits(max_connections=concurrency + 1)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def worker() -> None:
            while not queue.empty():
                timings.append(await _stream(client, queue.get_nowait()))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return timings, time.perf_counter() - started


def free_port() -> int:
    """A free port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`specdecode serve` in its own process on a free loopback port."""

    def __init__(self, serve_args: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "specdecode.app.cli", "serve", "--port", str(self.port),
                   "--log-level", "warning", *serve_args]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)

    def wait(self) -> str:
        """Wait until the server answers /health; returns its kernel path."""
        import httpx

        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SpecDecodeError("the server did not start: "
                                      + (self.process.stderr.read().strip().splitlines()
                                         or ["no output"])[-1])
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return r.json()["kernels"]
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SpecDecodeError(f"the server did not answer /health in {START_TIMEOUT:.0f} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


class Endpoint:
    """A server already running at `url` (`--load-url`): measured, never started or stopped."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def wait(self) -> str:
        import httpx

        try:
            return httpx.get(self.url + "/health", timeout=10).json().get("kernels", "unknown")
        except (httpx.HTTPError, ValueError) as exc:
            raise SpecDecodeError(f"no server answers {self.url}/health: {exc}") from None

    def stop(self) -> None:
        pass


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else 0.0


def summarize(rounds: list[tuple[list[Timing], float]]) -> dict:
    """One mode at one level: the median round's aggregate tokens per second, and the requests
    of every round for the rest."""
    timings = [t for round_timings, _ in rounds for t in round_timings]
    itl = [t.inter_token for t in timings if t.inter_token is not None]
    aggregate = statistics.median(sum(t.tokens for t in ts) / wall for ts, wall in rounds)
    return {"rounds": len(rounds), "requests": len(timings),
            "tokens": sum(t.tokens for t in timings), "aggregate_tps": round(aggregate, 1),
            "request_tps_p50": round(statistics.median(t.tokens_per_second for t in timings), 1),
            "ttft_p50": round(_percentile([t.first for t in timings], 0.5), 3),
            "ttft_p95": round(_percentile([t.first for t in timings], 0.95), 3),
            "itl_p50": round(_percentile(itl, 0.5) * 1000, 1),
            "itl_p95": round(_percentile(itl, 0.95) * 1000, 1)}


def same_outputs(rounds: dict[tuple[str, int], list[tuple[list[Timing], float]]],
                 reference: str) -> dict[tuple[str, int], int]:
    """Per (mode, level): how many of its answers are the text that mode `reference` gave first
    for the same prompt (a prompt `reference` never answered counts as the same)."""
    first: dict[str, str] = {}
    for (mode, _), measured in rounds.items():
        if mode == reference:
            for timings, _ in measured:
                for t in timings:
                    first.setdefault(t.prompt, t.text)
    return {key: sum(first.get(t.prompt, t.text) == t.text for ts, _ in measured for t in ts)
            for key, measured in rounds.items()}


def run_load(args) -> int:
    """The `bench --load` command: every mode at every level; writes load.md, load.json and
    load.png to --out."""
    from tqdm import tqdm

    levels = positive_ints(args.load, "--load")
    url = getattr(args, "load_url", None)
    modes = [url] if url else [m.strip() for m in (args.load_modes or ",".join(MODES)).split(",")
                               if m.strip()]
    unknown = [m for m in modes if m not in MODES and m != url]
    if unknown:
        raise InvalidParameterError(f"unknown load mode {unknown[0]!r} (choose from "
                                    f"{', '.join(MODES)})")
    # what every answer is compared with
    reference = "one at a time" if "one at a time" in modes else modes[0]
    questions = select(load_questions(args.questions), args.limit)
    prompts = [q["turns"][0] for q in questions]
    common = ["--model", args.model, "--dtype", args.dtype, "--max-queue",
              str(4 * max(levels)), "--request-timeout", "3600",
              *(["--threads", str(args.threads)] if args.threads else [])]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, dict]] = {mode: {} for mode in modes}
    kernels = ""
    rounds: dict[tuple[str, int], list] = {(m, n): [] for m in modes for n in levels}
    total = args.repeats * len(modes) * sum(max(4, 2 * n) for n in levels)
    servers: dict[str, Server | Endpoint] = {}
    try:
        for mode in modes:  # all up at once, each idle while another is measured
            if mode == url:
                servers[mode] = Endpoint(url)
            else:
                extra = MODES[mode] if "--max-batch" in MODES[mode] else \
                    MODES[mode] + ["--max-batch", str(max(levels))]
                servers[mode] = Server(common + extra)
            kernels = servers[mode].wait()  # one at a time: each measures its step cost
            asyncio.run(_level(servers[mode].url, [_body(prompts[0], 8)], 1))  # warm-up
        with tqdm(total=total, desc="load", unit="request") as bar:
            # rounds, and modes within a level, interleaved: a drift in the machine's speed
            # (tens of percent within minutes here) hits every mode alike
            for _ in range(args.repeats):
                for n in levels:
                    count = max(4, 2 * n)
                    bodies = [_body(prompts[i % len(prompts)], args.max_new_tokens)
                              for i in range(count)]
                    for mode in modes:
                        rounds[mode, n].append(asyncio.run(_level(servers[mode].url, bodies, n)))
                        bar.update(count)
        same = same_outputs(rounds, reference)
        for (mode, n), measured in rounds.items():
            results[mode][n] = summarize(measured) | {"same_output": same[mode, n]}
    finally:
        for server in servers.values():
            server.stop()
    machine = machine_info()
    info = {"model": args.model, "dtype": args.dtype, "max_new_tokens": args.max_new_tokens,
            "prompts": len(prompts), "levels": levels, "rounds": args.repeats,
            "cpu": machine["cpu"], "kernels": kernels, "commit": machine["commit"],
            "date": machine["date"], "reference": reference}
    report = format_load(results, info)
    print(report)
    (out / "load.json").write_text(json.dumps({"info": info, "results": results}, indent=1))
    (out / "load.md").write_text(report + "\n")
    plot = plot_load(results, out / "load.png", f"{args.model}, {info['cpu']}, {kernels}")
    print(f"wrote {out / 'load.md'}, {out / 'load.json'}, {plot}")
    return 0


def _body(prompt: str, max_tokens: int) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def format_load(results: dict[str, dict[int, dict]], info: dict) -> str:
    base = results.get("one at a time", {})
    lines = [f"# specdecode bench --load — {info['model']} ({info['dtype']}), "
             f"{info['max_new_tokens']} new tokens, greedy, {info['prompts']} Spec-Bench first "
             f"turns, median of {info['rounds']} rounds",
             f"machine: {info['cpu']}, server on {info['kernels']}; commit {info['commit']}; "
             f"{info['date']}", "",
             "| mode | clients | aggregate tok/s | × one at a time | per-request tok/s (p50) | "
             f"TTFT p50 / p95 s | ITL p50 / p95 ms | same answer as {info['reference']} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, by_level in results.items():
        for n, r in by_level.items():
            ratio = (f"{r['aggregate_tps'] / base[n]['aggregate_tps']:.2f}"
                     if n in base and base[n]["aggregate_tps"] else "-")
            lines.append(f"| {mode} | {n} | {r['aggregate_tps']} | {ratio} | "
                         f"{r['request_tps_p50']} | {r['ttft_p50']} / {r['ttft_p95']} | "
                         f"{r['itl_p50']} / {r['itl_p95']} | "
                         f"{r.get('same_output', '-')}/{r['requests']} |")
    return "\n".join(lines)


def plot_load(results: dict[str, dict[int, dict]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for mode, by_level in results.items():
        levels = sorted(by_level)
        left.plot(levels, [by_level[n]["aggregate_tps"] for n in levels], marker="o", label=mode)
        right.plot(levels, [by_level[n]["itl_p50"] for n in levels], marker="o", label=mode)
    for ax, label in ((left, "aggregate tokens / s"), (right, "inter-token latency p50 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"Server under load — {title}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
