"""Prometheus metrics of the server, in a private registry (so two apps in one process, as in the
tests, never share or clash over counters).

τ and the acceptance rate are ratios of counters, computed by whoever reads them:
    τ               = rate(specdecode_confirmed_tokens_total)
                      / rate(specdecode_target_forwards_total)
    acceptance rate = rate(specdecode_accepted_tokens_total) / rate(specdecode_drafted_tokens_total)
Token counters move when a generation finishes (the engine reports its statistics at the end), so a
generation cancelled by a disconnect or a timeout is not counted in them.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ...core.engine import StepReport
from ...core.run_stats import RunStats

ENDPOINTS = frozenset({"/v1/models", "/v1/completions", "/v1/chat/completions", "/models",
                       "/completions", "/chat/completions", "/v1/responses", "/responses",
                       "/v1/messages",
                       "/v1/messages/count_tokens", "/infill", "/health", "/metrics", "/"})
# an agent's prompt of tens of thousands of tokens waits minutes for its first token on a CPU
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class ServerMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("specdecode_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("specdecode_request_duration_seconds",
                                 "Time from request to the last byte of the response",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("specdecode_time_to_first_token_seconds",
                              "Time from request (queueing included) to the first generated tokens",
                              ["method"], buckets=TTFT_BUCKETS, registry=r)
        self.queue_length = Gauge("specdecode_queue_length",
                                  "Requests waiting for the engine (the running one excluded)",
                                  registry=r)
        self.busy = Gauge("specdecode_engine_busy", "1 while the engine runs a generation",
                          registry=r)
        self.batch_size = Gauge("specdecode_batch_size",
                                "Requests in the engine's batch (each step scores all of them)",
                                registry=r)
        self.steps = Counter("specdecode_steps", "Engine steps (one target forward each)",
                             registry=r)
        self.rows = Counter("specdecode_step_rows",
                            "Rows scored by the target: one per request per step, plus draft rows "
                            "(rows per step = rate(rows) / rate(steps))", registry=r)
        self.draft_rows = Counter("specdecode_draft_rows",
                                  "Rows holding draft tokens (their share = rate(draft_rows) / "
                                  "rate(rows))", registry=r)
        self.prefill_rows = Counter("specdecode_prefill_rows",
                                    "Prompt rows prefilled beside the steps' rows", registry=r)
        self.generations = Counter("specdecode_generations", "Finished generations",
                                   ["method", "finish_reason"], registry=r)
        self.stream_ends = Counter("specdecode_stream_ends",
                                   "Streamed answers by how they ended: the finish reason, "
                                   "client_gone, or error: its code", ["reason"], registry=r)
        self.tokens = Counter("specdecode_generated_tokens",
                              "Tokens returned to clients (EOS excluded)", ["method"], registry=r)
        self.confirmed = Counter("specdecode_confirmed_tokens",
                                 "Tokens confirmed by the verifier, a final EOS included "
                                 "(τ numerator)",
                                 ["method"], registry=r)
        self.target_forwards = Counter("specdecode_target_forwards",
                                       "Target model forward passes (decoding steps)", ["method"],
                                       registry=r)
        self.drafted = Counter("specdecode_drafted_tokens", "Draft tokens proposed", ["method"],
                               registry=r)
        self.accepted = Counter("specdecode_accepted_tokens", "Draft tokens accepted", ["method"],
                                registry=r)
        self.cached_prompt = Counter("specdecode_cached_prompt_tokens",
                                     "Prompt tokens copied from a kept prompt's cache instead of "
                                     "prefilled (their share = rate(this) / rate(prompt tokens))",
                                     ["method"], registry=r)
        self.prompt = Counter("specdecode_prompt_tokens", "Prompt tokens of finished generations",
                              ["method"], registry=r)
        self.resumed = Counter("specdecode_resumed_streams",
                               "Streams continued here after the replica serving them died",
                               registry=r)
        self.resumed_tokens = Counter("specdecode_resumed_tokens",
                                      "Tokens a dead replica had sent that resumed streams read "
                                      "again", registry=r)

    def observe_run(self, method: str, finish_reason: str, stats: RunStats,
                    prompt_tokens: int) -> None:
        self.generations.labels(method, finish_reason).inc()
        self.tokens.labels(method).inc(stats.new_tokens)
        self.confirmed.labels(method).inc(stats.confirmed_tokens)
        self.target_forwards.labels(method).inc(stats.target_forwards)
        self.drafted.labels(method).inc(stats.drafted)
        self.accepted.labels(method).inc(stats.accepted)
        self.cached_prompt.labels(method).inc(stats.cached_prompt_tokens)
        self.prompt.labels(method).inc(prompt_tokens)

    def observe_step(self, step: StepReport) -> None:
        self.steps.inc()
        self.rows.inc(step.rows)
        self.draft_rows.inc(step.draft_rows)
        self.prefill_rows.inc(step.prefill_rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetricsMiddleware:
    """Counts every HTTP request by endpoint and final status, and times it to its last byte.

    A plain ASGI middleware (not BaseHTTPMiddleware) so a streamed response is timed to its end
    and never buffered. Unknown paths share the label "other" to keep the label set bounded."""

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"
        status = 500  # what the client sees if the app raises before answering
        started = time.perf_counter()

        async def send_and_record_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record_status)
        finally:
            self.metrics.requests.labels(endpoint, str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
