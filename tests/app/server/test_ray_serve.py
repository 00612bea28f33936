"""`specdecode serve --ray`: a local Ray instance, started and stopped here, with 2 engine replicas
of 1 thread each on the 135M model behind Ray's HTTP proxy. Answers are one local server's
(greedy, through the `openai` client); a conversation's turns go back to its first replica; a
replica killed under load loses no request, its streams go on from the other replica with the
answers they would have had, and it is replaced; nothing of Ray outlives the tests."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from itertools import count

import httpx
import openai
import psutil
import pytest
from server_helpers import running

from specdecode.app.bench.load import Server, free_port
from specdecode.app.cli import build_parser, main, ray_app

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed")
from ray import serve  # noqa: E402

from specdecode.app.server import ray_replica, ray_serve  # noqa: E402

pytestmark = pytest.mark.real_model
MODEL = "smollm2-135m"
PROMPTS = ["Write a haiku about the sea.", "What is 17 times 23?",
           "Name three sorting algorithms and say when each is fastest.",
           "Translate 'good morning' into French and German."]
RAY_PROCESSES = ("raylet", "gcs_server", "ray::")


def _serve_args(*extra: str):
    return build_parser().parse_args(["serve", "--model", MODEL, "--threads", "1",
                                      "--log-level", "warning", *extra])


def _ray_processes() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        command = " ".join(p.info["cmdline"] or [])
        if any(name in command for name in RAY_PROCESSES):
            found.append(p)
    return found


def _engine_replicas() -> list[psutil.Process]:
    return [p for p in _ray_processes() if ray_serve.ENGINE in " ".join(p.cmdline())]


def _running_replicas() -> int:
    status = serve.status().applications[ray_serve.APP_NAME]
    return status.deployments[ray_serve.ENGINE].replica_states.get("RUNNING", 0)


METRICS_PORT = free_port()


def _deploy(port: int) -> None:
    ray_serve.run_deployment(_serve_args("--ray", "--replicas", "2", "--port", str(port)))


@pytest.fixture(scope="module")
def ray_url():
    assert not _ray_processes(), "a Ray instance is already running on this machine"
    port = free_port()
    try:
        with ray_serve.ray_instance(num_cpus=2, log_to_driver=False,
                                    _metrics_export_port=METRICS_PORT):
            _deploy(port)
            yield f"http://127.0.0.1:{port}"
    finally:
        deadline = time.monotonic() + 30
        while _ray_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _ray_processes(), "Ray left processes behind"


@pytest.fixture(scope="module")
def local_url():
    """One local `specdecode serve` of the same arguments, in this process."""
    from specdecode.app.server.launch import build_app

    app, _ = build_app(_serve_args())
    with running(app) as server:
        yield server.url


def _answers(url: str) -> list[str]:
    out = []
    with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120) as client:
        for prompt in PROMPTS:
            messages = [{"role": "user", "content": prompt}]
            out.append(client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=32, temperature=0
            ).choices[0].message.content)
            out.append("".join(
                c.choices[0].delta.content or "" for c in client.chat.completions.create(
                    model=MODEL, messages=messages, max_tokens=32, temperature=0, stream=True)
                if c.choices))
            out.append(client.completions.create(model=MODEL, prompt=prompt, max_tokens=16,
                                                 temperature=0).choices[0].text)
    return out


def _new_ray_processes(before: set[int]) -> list[psutil.Process]:
    """Ray's processes that were not running at `before` (pids): another test's instance, up
    while this one runs in whatever order the tests take, is not this one's to stop."""
    return [p for p in _ray_processes() if p.pid not in before]


def test_bad_replica_counts_are_one_line_errors_before_ray_starts(capsys):
    before = {p.pid for p in _ray_processes()}
    assert main(["serve", "--ray", "--replicas", "0"]) == 2
    assert main(["serve", "--ray", "--replicas", "2", "--max-replicas", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("--replicas" in line for line in err)
    assert not _new_ray_processes(before)


def test_serve_ray_stops_on_sigterm_and_leaves_no_ray_process_behind():
    before = {p.pid for p in _ray_processes()}
    server = Server(["--model", MODEL, "--ray", "--replicas", "1", "--threads", "1"])
    try:
        server.wait()
        assert httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"] == MODEL
        assert _new_ray_processes(before)  # its own instance, so the check below can fail
    finally:
        server.stop()
    assert server.process.returncode == 0, server.process.stderr.read()[-2000:]
    deadline = time.monotonic() + 30
    while _new_ray_processes(before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _new_ray_processes(before), "Ray left processes behind"


def test_ray_replicas_answer_what_one_local_server_answers(ray_url, local_url):
    assert _answers(ray_url) == _answers(local_url)


def test_a_conversations_turns_go_back_to_the_replica_of_its_first(ray_url):
    homes: dict[int, list[str]] = {}
    with httpx.Client(base_url=ray_url, timeout=120) as client:
        history = {i: [{"role": "user", "content": f"Conversation {i}. {p}"}]
                   for i, p in enumerate(PROMPTS)}
        for _ in range(4):  # conversations interleaved, turn by turn
            for i, messages in history.items():
                r = client.post("/v1/chat/completions",
                                json={"messages": messages, "max_tokens": 8, "temperature": 0})
                r.raise_for_status()
                homes.setdefault(i, []).append(r.headers[ray_replica.REPLICA_HEADER])
                messages += [r.json()["choices"][0]["message"],
                             {"role": "user", "content": "Go on."}]
    assert all(len(set(replicas)) == 1 for replicas in homes.values()), homes


async def _streamed(client: httpx.AsyncClient, body: dict,
                    begun: list | None = None) -> tuple[tuple[str, str | None, int], int]:
    """A streamed chat answer's text, its finish reason and its error events, and the tokens
    a replica read again to continue it (its usage says); once some of its text has come, it
    adds itself to `begun`."""
    text, finish, errors, resumed = [], None, 0, 0
    async with client.stream("POST", "/v1/chat/completions", json={
            **body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200, r.status_code
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            errors += "error" in event
            for choice in event.get("choices", []):
                text.append(choice["delta"].get("content") or "")
                finish = choice.get("finish_reason") or finish
            if event.get("usage"):
                resumed = event["usage"]["speculative"].get("resumed_tokens", 0)
            if begun is not None and len(text) == 5:
                begun.append(body)
    return ("".join(text), finish, errors), resumed


def test_a_replica_killed_under_load_loses_no_stream_and_changes_no_greedy_answer(ray_url,
                                                                                  local_url):
    # 16 conversations, new to the router: they spread over both replicas, so the one killed
    # is writing streams
    bodies = [{"messages": [{"role": "user", "content": f"{PROMPTS[k % len(PROMPTS)]} ({k})"}],
               "max_tokens": 64, "temperature": 0} for k in range(16)]

    async def undisturbed() -> list[tuple[str, str | None, int]]:
        async with httpx.AsyncClient(base_url=local_url, timeout=120) as client:
            return [(await _streamed(client, body))[0] for body in bodies]

    async def load() -> tuple[list, float]:
        async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
            begun: list = []  # streams midway: both replicas' have sent text
            streams = asyncio.gather(*(_streamed(client, body, begun) for body in bodies))
            while len(begun) < 12:
                await asyncio.sleep(0.02)
            victim = _engine_replicas()[0]
            victim.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            return await streams, killed

    expected = asyncio.run(undisturbed())
    answers, killed = asyncio.run(load())
    # every stream, those the dead replica was writing included, ends as it would have
    assert [a for a, _ in answers] == expected
    assert any(resumed for _, resumed in answers), "no stream was continued midway"
    while _running_replicas() < 2:
        assert time.monotonic() - killed < 60, "the killed replica was not replaced in 60 s"
        time.sleep(0.5)
    counted, deadline = 0.0, time.monotonic() + 60
    while not counted:  # the replica that continued them counts them; Ray exports it a while later
        assert time.monotonic() < deadline, "Ray exported no count of continued streams"
        time.sleep(1)
        counted = sum(float(line.rsplit(" ", 1)[1]) for line in httpx.get(
            f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).text.splitlines()
            if line.startswith("ray_specdecode_resumed_streams_total{"))


def test_every_replicas_metrics_are_exported_by_ray_labelled_by_replica(ray_url):
    through_proxy = httpx.get(ray_url + "/metrics", timeout=30)
    assert through_proxy.status_code == 404
    assert "--metrics-export-port" in through_proxy.json()["error"]["message"]
    # new conversations until each replica answered one, then until Ray exported what both
    # counted: a replica that replaced a killed one reaches the ingress's router a while after
    # Ray reports it running, and until then every request goes to the other
    answered: set[str] = set()
    exported: set[str] = set()
    text = ""
    deadline = time.monotonic() + 90
    with httpx.Client(base_url=ray_url, timeout=60) as client:
        for i in count():
            if len(answered) == 2 and answered <= exported:
                break
            assert time.monotonic() < deadline, f"answered by {answered}, exported {exported}"
            if len(answered) < 2:
                r = client.post("/v1/chat/completions", json={
                    "messages": [{"role": "user", "content": f"Count to {i}."}],
                    "max_tokens": 4, "temperature": 0})
                r.raise_for_status()
                answered.add(r.headers[ray_replica.REPLICA_HEADER])
            else:
                time.sleep(1)
            text = httpx.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).text
            exported = {line.split('replica="')[1].split('"')[0] for line in text.splitlines()
                        if line.startswith("ray_specdecode_generated_tokens_total{")}
    assert "ray_specdecode_time_to_first_token_seconds_bucket{" in text, \
        [line for line in text.splitlines() if "first_token" in line]


def test_health_and_models_answer_through_ray(ray_url):
    health = httpx.get(ray_url + "/health", timeout=30)
    assert health.status_code == 200 and health.json()["model"] == MODEL
    assert httpx.get(ray_url + "/v1/models", timeout=30).json()["data"][0]["id"] == MODEL


def test_the_load_benchmark_measures_the_ray_endpoint(ray_url, tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"question_id": i, "category": "qa",
                                               "turns": [p]}) for i, p in enumerate(PROMPTS)))
    out = tmp_path / "out"
    assert main(["bench", "--load", "2", "--load-url", ray_url, "--model", MODEL,
                 "--questions", str(questions), "--max-new-tokens", "8", "--repeats", "1",
                 "--out", str(out)]) == 0
    result = json.loads((out / "load.json").read_text())["results"][ray_url]["2"]
    assert result["requests"] == 4 and result["tokens"] > 0 and result["aggregate_tps"] > 0


def test_autoscaling_keeps_between_the_replica_counts_on_requests_in_flight():
    args = _serve_args("--ray", "--replicas", "1", "--max-replicas", "3", "--max-batch", "4")
    ingress = ray_serve.deployment(args)._bound_deployment  # bound to the engine replicas
    config = ingress.init_args[0]._bound_deployment._deployment_config
    scaling = config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas) == (1, 3)
    assert scaling.target_ongoing_requests == 4  # a full batch per replica


def test_rays_own_serve_run_builds_the_deployments_from_serves_arguments():
    app = ray_app({"args": f"--model {MODEL} --replicas 3 --threads 2"})
    engine = app._bound_deployment.init_args[0]._bound_deployment
    assert engine.num_replicas == 3 and engine.ray_actor_options["num_cpus"] == 2
    assert engine.init_args[0].model == MODEL


def test_shutting_down_lets_a_request_in_flight_finish(ray_url):
    """It deletes the deployment, then deploys it again for the module's other tests (which run
    in any order)."""
    async def stream_then_delete() -> str:
        async with httpx.AsyncClient(base_url=ray_url, timeout=120) as client:
            body = {"messages": [{"role": "user", "content": PROMPTS[2]}], "max_tokens": 96,
                    "temperature": 0, "stream": True}
            events = []
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                deleting = None
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[len("data: "):])
                        if deleting is None:  # the answer has begun: shut down now
                            deleting = asyncio.create_task(
                                asyncio.to_thread(serve.delete, ray_serve.APP_NAME))
            await deleting
            return events

    events = asyncio.run(stream_then_delete())
    _deploy(int(ray_url.rsplit(":", 1)[1]))
    assert events[-1] == "[DONE]" and not any(e.startswith('{"error"') for e in events)
    assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("length", "stop")
