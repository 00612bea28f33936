"""llama.cpp's `/infill` dialect, for the editor plugins written for it (llama.vscode, llama.vim):
the prompt from its fields, its rules for where a middle ends, and its answer's shape. The route
and its answers, whole and streamed; fill-in-the-middle prompts are `models.fim`'s.

Its answers are compact JSON on one line: llama.vim accepts an answer only when it matches
`"content"\\s*:"` (no space after the colon) and, in Vim, reads it line by line.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...core.engine import Chunk
from ...models import LoadedModel
from . import openai_format
from .request import EngineRequest
from .schemas import InfillRequest
from .state import ServerState, fim_ends, server_state, speculative
from .streaming import JobStream, next_chunk, stream_failed
from .worker import Job

router = APIRouter()


class FimPrompt:
    """A prepare function (`worker.Job`) for a fill-in-the-middle prompt, cut to `limit` tokens;
    remembers whether it was cut."""

    def __init__(self, model: LoadedModel, prefix: str, suffix: str, before_cursor: str = "",
                 extra: list[tuple[str, str]] = (), limit: int | None = None) -> None:
        self.model, self.limit, self.truncated = model, limit, False
        self.parts = (prefix, suffix, before_cursor, list(extra))

    def __call__(self) -> list[int]:
        ids, self.truncated = self.model.encode_fim(*self.parts, limit=self.limit)
        return ids


class MiddleEnd:
    """llama.cpp's infill rules for where a middle ends beyond the model's own end: with
    `n_indent`, at the start of the first line after the first that holds text indented less
    (the cursor's block is done); with `t_max_ms`, at the first new line written after that many
    milliseconds. `push` takes each text delta and gives what is safe to send: with `n_indent`,
    a last line of blanks waits until it is known to belong to the middle."""

    def __init__(self, n_indent: int = 0, t_max_ms: float = -1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.n_indent, self.t_max_ms, self.clock = n_indent, t_max_ms, clock
        self.text, self.sent, self.ended, self.start = "", 0, False, None

    def push(self, delta: str, final: bool = False) -> str:
        """The new text to send after `delta` (all that is left when `final`); sets `ended`
        when a rule ends the middle here."""
        if self.ended:
            return ""
        if self.start is None:
            self.start = self.clock()
        old = len(self.text)
        self.text += delta
        cut = self._indent_cut()
        if cut is None and self.t_max_ms > 0 and self.clock() - self.start > self.t_max_ms / 1e3:
            newline = self.text.find("\n", old)
            cut = None if newline < 0 else newline + 1
        if cut is not None:
            self.text, self.ended = self.text[:cut], True
        safe = len(self.text) if cut is not None or final else self._decided()
        out, self.sent = self.text[self.sent : safe], max(self.sent, safe)
        return out

    def _indent_cut(self) -> int | None:
        if not self.n_indent or (first := self.text.find("\n")) < 0:
            return None
        position = first + 1
        for line in self.text[first + 1 :].split("\n"):
            text = line.lstrip(" \t")
            if text and len(line) - len(text) < self.n_indent:
                return position
            position += len(line) + 1
        return None

    def _decided(self) -> int:
        """Where the text stops being final: the start of a last line of blanks after the first
        line (it may yet turn out indented less)."""
        if not self.n_indent or self.text.find("\n") < 0:
            return len(self.text)
        start = self.text.rfind("\n") + 1
        return len(self.text) if self.text[start:].strip() else start


def result(body: InfillRequest, model_id: str, context_length: int, index: int, content: str,
           finished: str, prompt_tokens: int, predicted: int, truncated: bool,
           prompt_seconds: float, predict_seconds: float, speculative: dict) -> dict:
    """One completion in llama.cpp's shape (`finished`: "eos" at the model's end, "limit" at
    n_predict, n_indent or the time limit), timed by the server from the request's arrival:
    prompt_ms to the first token, predicted_ms after it. `speculative`: our extension."""
    timings = {"prompt_n": prompt_tokens, "prompt_ms": prompt_seconds * 1e3,
               "prompt_per_token_ms": prompt_seconds * 1e3 / max(prompt_tokens, 1),
               "prompt_per_second": prompt_tokens / prompt_seconds if prompt_seconds else 0.0,
               "predicted_n": predicted, "predicted_ms": predict_seconds * 1e3,
               "predicted_per_token_ms": predict_seconds * 1e3 / max(predicted, 1),
               "predicted_per_second": predicted / predict_seconds if predict_seconds else 0.0}
    settings = {"n_ctx": context_length, "n_predict": body.token_limit or -1,
                "temperature": body.temperature, "top_k": body.top_k, "top_p": body.top_p,
                "min_p": body.min_p, "seed": body.seed if body.seed is not None else -1,
                "stop": body.stop, "n_indent": body.n_indent, "stream": body.stream}
    out = {"index": index, "content": content, "tokens": [], "id_slot": 0, "stop": True,
           "model": model_id, "tokens_predicted": predicted, "tokens_evaluated": prompt_tokens,
           "generation_settings": settings, "has_new_line": "\n" in content,
           "truncated": truncated, "stop_type": finished, "tokens_cached":
           prompt_tokens + predicted, "timings": timings, "speculative": speculative}
    return fields(out, body.response_fields)


def fields(answer: dict, paths: list[str] | None) -> dict:
    """llama.cpp's `response_fields`: the answer flattened to the paths asked ("timings/prompt_n"
    as a key of its own); paths it lacks are left out."""
    if paths is None:
        return answer
    out = {}
    for path in paths:
        value: Any = answer
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def sse_event(obj: dict) -> str:
    """One server-sent event as llama.cpp writes it: compact JSON, no [DONE] after the last."""
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


@router.post("/infill")
async def infill(body: InfillRequest, request: Request) -> Response:
    """llama.cpp's /infill: `n_cmpl` completions of the middle, whole (one object, an
    array for several) or streamed as llama.cpp streams them. Greedy completions are all the
    same: one is decoded and copied."""
    state, arrived = server_state(request), time.monotonic()
    if body.model:
        state.check_model(body.model)
    stops = fim_ends(state)
    context, limit = state.model.context_length, body.token_limit
    if limit == 0:  # a warm-up of llama.cpp's prompt cache, which this server does not keep
        return _infill_answer([result(body, state.model_id, context, 0, "", "limit", 0, 0,
                                      False, 0.0, 0.0, {})], body.n_cmpl)
    prompt = FimPrompt(state.model, body.input_prefix, body.input_suffix, body.prompt,
                       [(f.filename, f.text) for f in body.input_extra],
                       limit=context - (limit or context // 4))
    asked = EngineRequest([prompt], limit or context, body.temperature, body.top_k, body.top_p,
                          body.min_p, None if body.seed in (None, -1) else body.seed,
                          tuple(body.stop), stops, n=body.n_cmpl if body.temperature > 0 else 1,
                          **speculative(body.speculative))
    job = Job(asked, state.request_timeout)
    state.worker.submit(job)
    middles = _Middles(job, body, arrived)
    try:
        event = await next_chunk(job, request)
        if body.stream:
            return JobStream(_infill_events(job, event, middles, state, prompt), job,
                             state.metrics)
        middles.push(*event)
        while not middles.done:
            middles.push(*await next_chunk(job, request))
    except BaseException:
        job.cancel()
        raise
    job.cancel()  # a middle ended by a rule of llama.cpp's leaves the engine here
    return _infill_answer([middles.result(i, state, prompt) for i in range(job.choices)],
                          body.n_cmpl)


class _Middles:
    """The middles of one /infill request as their chunks arrive, each ended by the model or by
    llama.cpp's rules (`MiddleEnd`), timed from the request's arrival."""

    def __init__(self, job: Job, body: InfillRequest, arrived: float) -> None:
        self.job, self.body, self.arrived = job, body, arrived
        self.ends = [MiddleEnd(body.n_indent, body.t_max_predict_ms)
                     for _ in range(job.choices)]
        self.texts, self.tokens = [""] * job.choices, [0] * job.choices
        self.finished: list[str | None] = [None] * job.choices  # "eos" or "limit" once done
        self.first: float | None = None
        self.last = arrived

    @property
    def done(self) -> bool:
        return all(self.finished)

    def push(self, index: int, chunk: Chunk) -> str:
        """Take a chunk of choice `index`; returns the text it adds to that middle."""
        self.first = self.first or time.monotonic()
        if self.finished[index] is not None:
            return ""
        end = self.ends[index]
        delta = end.push(chunk.text, final=chunk.finish_reason is not None)
        self.texts[index] += delta
        self.tokens[index] += len(chunk.token_ids)
        if end.ended or chunk.finish_reason is not None:
            self.finished[index] = "eos" if chunk.finish_reason == "stop" else "limit"
            self.last = time.monotonic()
        return delta

    def result(self, index: int, state: ServerState, prompt: FimPrompt) -> dict:
        job = self.job
        stats = openai_format.usage(job.prompt_tokens, [job.runs[index]], job.decoder,
                                job.budget)["speculative"]
        first = self.first or self.last
        return result(self.body, state.model_id, state.model.context_length, index,
                             self.texts[index], self.finished[index] or "limit",
                             job.prompt_tokens, self.tokens[index], prompt.truncated,
                             first - self.arrived, self.last - first, stats)


def _infill_answer(results: list[dict], copies: int) -> JSONResponse:
    """One object, or an array of `copies` (a greedy answer copied, index by index)."""
    if copies == 1:
        return JSONResponse(results[0])
    return JSONResponse([{**results[i % len(results)], **({"index": i} if "index" in results[0]
                                                         else {})} for i in range(copies)])


async def _infill_events(job: Job, event: tuple[int, Chunk], middles: _Middles,
                         state: ServerState, prompt: FimPrompt):
    """/infill streamed as llama.cpp streams it: a partial object per delta (stop false), then
    each completion's whole object with stop true and its content already sent."""
    try:
        while True:
            delta = middles.push(*event)
            if delta:
                yield sse_event({"index": event[0], "content": delta, "tokens": [],
                                    "stop": False, "id_slot": -1,
                                    "tokens_predicted": middles.tokens[event[0]],
                                    "tokens_evaluated": job.prompt_tokens})
            if middles.done:
                break
            event = await job.next_event()
        for i in range(job.choices):
            yield sse_event({**middles.result(i, state, prompt), "content": ""})
        job.outcome = middles.finished[0]
    except Exception as exc:
        error = stream_failed(job, exc).body()
        yield f"error: {json.dumps(error, separators=(',', ':'))}\n\n"
    finally:
        job.cancel()
