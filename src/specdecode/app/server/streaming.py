"""Streaming, written once for every dialect: server-sent-event framing, the wait for a job's next
event that notices a client gone before anything was sent, and the response that cancels its job
however the stream ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Callable

from fastapi import Request
from fastapi.responses import StreamingResponse

from ...core.engine import Chunk
from . import relay, tools
from .errors import APIError, api_error
from .metrics import ServerMetrics
from .request import EngineRequest
from .job import TIMEOUT_MESSAGE, Job, RequestTimeoutError

if TYPE_CHECKING:
    from .state import ServerState

log = logging.getLogger("specdecode.server")

DISCONNECT_POLL_SECONDS = 0.5  # how often a waiting, not yet answered request checks its client
# how often a started stream sends something while its prompt is read: clients give up on a
# silent connection (Claude Code after about 5 minutes without a byte)
KEEPALIVE_SECONDS = 10.0
DONE = "data: [DONE]\n\n"


def sse(obj: dict) -> str:
    """One server-sent event, as the OpenAI API frames its stream."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def next_chunk(job: Job, request: Request) -> tuple[int, Chunk]:
    """Wait for the job's next (choice, chunk) while nothing has been sent yet, noticing a
    client that gives up meanwhile (so its queued or running job does not hold the engine):
    every DISCONNECT_POLL_SECONDS, whether chunks keep coming or not."""
    while True:
        event = await job.next_event(poll=DISCONNECT_POLL_SECONDS)
        now = time.monotonic()
        if event is not None and now < job.client_checked + DISCONNECT_POLL_SECONDS:
            return event
        job.client_checked = now
        if await request.is_disconnected():
            raise APIError(499, "client closed the request", code="client_closed_request")
        if event is not None:
            return event


async def admitted(job: Job, request: Request) -> tuple[int, Chunk] | None:
    """Wait until the job joined the engine's batch (its prompt read and checked), noticing a
    client that gives up meanwhile; a problem found on the way (a prompt past the context) is
    raised here, before anything is sent. Returns the first event when one came with it. A
    stream may start here and keep its client waiting through a long prefill (`next_or_ping`)."""
    while not job.admitted.is_set():
        if not job.events.empty():  # an error (or a chunk) came before the admission was seen
            return await next_chunk(job, request)
        try:
            await asyncio.wait_for(job.admitted.wait(), DISCONNECT_POLL_SECONDS)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                raise APIError(499, "client closed the request", code="client_closed_request")
            if time.monotonic() >= job.deadline:
                raise RequestTimeoutError(TIMEOUT_MESSAGE) from None
    return None


PROGRESS_POLL_SECONDS = 0.25


class PromptReads:
    """llama.cpp's `return_progress`: the reads of a job's prompt as they advance, as llama.cpp's
    `prompt_progress` objects (`Job.progress`: its tokens `total`, those from the prefix cache
    `cache`, those read so far `processed`, the milliseconds since it came `time_ms`),
    until its first event (`event`, set once the iteration ends): first the read's start
    (`processed` = `cache`), then each advance, the last the whole prompt read, which the first
    event's arrival reports (`event`: the first event when it already came)."""

    def __init__(self, job: Job, event: tuple[int, Chunk] | None) -> None:
        self.job, self.event = job, event

    async def __aiter__(self):
        sent = None  # (total, cache, processed, ms) last reported
        while True:
            if self.event is None:
                self.event = await self.job.next_event(poll=PROGRESS_POLL_SECONDS)
            progress = self.job.progress
            if progress is None:  # not joined yet (or ended before it did: nothing to report)
                if self.event is not None:
                    return
                continue
            total, cache, processed, ms = progress
            reports = [] if sent else [(total, cache, cache, ms)]  # the read's start first
            reports.append((total, cache, total if self.event else processed, ms))
            for report in reports:
                if sent is None or report[2] > sent[2]:
                    sent = report
                    yield dict(zip(("total", "cache", "processed", "time_ms"), report))
            if self.event is not None:
                return


def stream_failed(job: Job, exc: Exception) -> APIError:
    """What a stream reports of an error after its headers were sent; the job stops and its
    stream's end is that error."""
    error = api_error(exc)
    job.cancel()
    job.outcome = f"error: {error.code or error.type}"
    return error


class JobStream(StreamingResponse):
    """A server-sent-event response that cancels its job however it ends (done, client gone,
    server stopping): the engine stops at its next step instead of generating for nobody. Its
    end is logged and counted by reason (the access log has said 200 since the headers went):
    the dialect's stream sets `job.outcome` when it finishes or fails; otherwise the client
    left first."""

    def __init__(self, content, job: Job, metrics: ServerMetrics) -> None:
        super().__init__(content if job.relay is None else self._marked(content),
                         media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.job, self.metrics = job, metrics

    async def _marked(self, content):
        """A relayed stream: before the events of each chunk that does not end its choice, the
        comment that names its tokens (`relay.comment`). A dialect writes a chunk's events after
        taking it from the job and before taking the next, so the chunks taken since the last
        event are those whose events come next."""
        told = 0
        async for part in content:
            if len(self.job.handed) > told:
                yield "".join(relay.comment(index, chunk.token_ids)
                              for index, chunk in self.job.handed[told:]
                              if chunk.finish_reason is None)
                told = len(self.job.handed)
            yield part

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()
            reason = self.job.outcome or "client_gone"
            self.metrics.stream_ends.labels(reason).inc()
            log.info("stream of %s %s ended: %s", scope["method"], scope["path"], reason)


async def answer_parts(job: Job, chunk: Chunk | None, names: tuple[str, ...]):
    """A one-choice answer's parts as a dialect streams them, (kind, value): ("wait", None)
    every KEEPALIVE_SECONDS until the first chunk (`chunk` None: the prompt is still being
    read), ("text", str) and ("call", tools.ToolCall) as they arrive (text that may open a call
    of `names` held until it is one or is not; blank text between calls left out), and last
    ("end", the last Chunk: its finish reason and stats)."""
    calls = tools.CallStream(names) if names else None
    while chunk is None:
        event = await job.next_event(poll=KEEPALIVE_SECONDS)
        if event is None:
            yield "wait", None
        else:
            chunk = event[1]
    called = False
    while True:
        parts = calls.push(chunk.text) if calls else [chunk.text]
        if chunk.finish_reason is not None and calls:
            parts += calls.flush()
        for part in parts:
            if isinstance(part, tools.ToolCall):
                called = True
                yield "call", part
            elif part and not (called and not part.strip()):
                yield "text", part
        if chunk.finish_reason is not None:
            yield "end", chunk
            return
        chunk = (await job.next_event())[1]


async def written(job: Job, chunk: Chunk | None, names: tuple[str, ...], writer):
    """A dialect's stream of one answer: `writer`'s lines for each part (`answer_parts`):
    `wait()`, `text(str)`, `call(tools.ToolCall)`, then `close()`; `writer.last` is then the last
    chunk (its finish reason and stats)."""
    async for kind, value in answer_parts(job, chunk, names):
        if kind == "end":
            writer.last = value
            continue
        for line in writer.wait() if kind == "wait" else getattr(writer, kind)(value):
            yield line
    for line in writer.close():
        yield line


async def one_answer(request: Request, state: "ServerState", asked: EngineRequest,
                     names: tuple[str, ...], stream: Callable | None):
    """Serve a one-choice request: streamed, the JobStream of `stream(job, first chunk or None)`,
    started once the prompt is checked; else the whole answer, (job, its prose (None: none),
    its tool calls of `names`, its last chunk)."""
    job = Job(asked, state.request_timeout)
    state.worker.submit(job)
    try:
        if stream is not None:
            first = await admitted(job, request)
            return JobStream(stream(job, first and first[1]), job, state.metrics)
        chunks = [(await next_chunk(job, request))[1]]
        while chunks[-1].finish_reason is None:
            chunks.append((await next_chunk(job, request))[1])
    except BaseException:
        job.cancel()
        raise
    text = "".join(c.text for c in chunks)
    prose, calls = tools.parse(text, names) if names else (text, [])
    return job, prose, calls, chunks[-1]
