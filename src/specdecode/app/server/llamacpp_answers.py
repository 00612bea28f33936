"""Serving a llama.cpp completion (`/completion`, `/infill`): the answers as their chunks arrive,
each ended by the model, a stop string, its limit or llama.cpp's own rules (`MiddleEnd`), and
sent whole (an object, a list for several) or streamed as llama.cpp streams them.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...core.engine import Chunk
from . import openai_format
from .errors import APIError
from .llamacpp_format import (STOP_TYPES, Answer, probabilities, result, settings, sse_event,
                              timings)
from .llamacpp_schemas import LlamaCppRequest
from .request import EngineRequest
from .state import ServerState, compile_grammar, ids_text, speculative
from .streaming import JobStream, next_chunk, stream_failed
from .job import Job


class MiddleEnd:
    """llama.cpp's rules for where an answer ends beyond the model's own end: with `n_indent`,
    at the start of the first line after the first that holds text indented less (the cursor's
    block is done); with `t_max_ms`, at the first new line written after that many
    milliseconds. `push` takes each text delta and gives what is safe to send: with `n_indent`,
    a last line of blanks waits until it is known to belong to the answer."""

    def __init__(self, n_indent: int = 0, t_max_ms: float = -1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.n_indent, self.t_max_ms, self.clock = n_indent, t_max_ms, clock
        self.text, self.sent, self.ended, self.start = "", 0, False, None

    def push(self, delta: str, final: bool = False) -> str:
        """The new text to send after `delta` (all that is left when `final`); sets `ended`
        when a rule ends the answer here."""
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


class Answers:
    """The answers of one request as their chunks arrive, timed from the request's arrival."""

    def __init__(self, job: Job, body: LlamaCppRequest, arrived: float) -> None:
        self.job, self.body, self.arrived = job, body, arrived
        self.ends = [MiddleEnd(body.n_indent, body.t_max_predict_ms) for _ in range(job.choices)]
        self.answers = [Answer(i) for i in range(job.choices)]
        self.first: float | None = None
        self.last = arrived

    @property
    def done(self) -> bool:
        return all(a.stop_type for a in self.answers)

    def push(self, index: int, chunk: Chunk) -> tuple[str, list]:
        """Take a chunk of answer `index`; returns the text and n_probs entries it adds."""
        self.first = self.first or time.monotonic()
        answer = self.answers[index]
        if answer.stop_type is not None:
            return "", []
        end = self.ends[index]
        delta = end.push(chunk.text, final=chunk.finish_reason is not None)
        entries = [(e.token, e.logprob, e.top) for e in chunk.logprobs or ()]
        answer.text += delta
        answer.tokens += chunk.token_ids
        answer.entries += entries
        if end.ended or chunk.finish_reason is not None:
            answer.stop_type = ("word" if chunk.stop_string else "limit" if end.ended
                                else STOP_TYPES[chunk.finish_reason])
            answer.stopping_word = chunk.stop_string or ""
            self.last = time.monotonic()
        return delta, entries

    async def prompts(self, state: ServerState) -> list[str]:
        """Each prompt's text as the model read it (llama.cpp's `prompt` of an answer)."""
        return await state.worker.call(lambda: [ids_text(state.model, ids)
                                                for ids in self.job.prompt_ids])

    def result(self, index: int, state: ServerState, truncated: bool,
               prompts: list[str]) -> dict:
        job, answer = self.job, self.answers[index]
        run = job.runs[index]
        stats = openai_format.usage(job.prompt_tokens, [run], job.decoder,
                                    job.budget)["speculative"]
        prompt = len(job.prompt_ids[index // job.request.n])
        first = self.first or self.last
        base = {"model": state.model_id, "tokens_predicted": len(answer.tokens),
                "tokens_evaluated": prompt,
                "generation_settings": settings(self.body, state.model.context_length),
                "truncated": truncated, "tokens_cached": prompt + len(answer.tokens),
                "timings": timings(prompt, run.cached_prompt_tokens, len(answer.tokens),
                                   first - self.arrived, self.last - first, stats),
                "speculative": stats}
        if job.request.logprobs is not None:
            base["completion_probabilities"] = probabilities(answer.entries, job.pieces,
                                                           self.body.post_sampling_probs)
        return result(self.body, answer, base, prompts[index // job.request.n])


async def serve(request: Request, state: ServerState, body: LlamaCppRequest,
                asked: EngineRequest, truncated: Callable[[], bool], listed: bool) -> Response:
    """Serve a llama.cpp completion request: its answers whole (one object; a list when
    `listed` or several) or streamed. `asked.n` below `body.n_cmpl`: greedy answers, all the
    same, decoded once and copied. `truncated()`: whether its prompt was cut to fit."""
    job = Job(asked, state.request_timeout)
    state.worker.submit(job)
    answers = Answers(job, body, time.monotonic())
    try:
        event = await next_chunk(job, request)
        if body.stream:
            return JobStream(_events(job, event, answers, state, truncated), job, state.metrics)
        answers.push(*event)
        while not answers.done:
            answers.push(*await next_chunk(job, request))
    except BaseException:
        job.cancel()
        raise
    job.cancel()  # an answer ended by a rule of llama.cpp's leaves the engine here
    prompts = await answers.prompts(state)
    decoded = [answers.result(i, state, truncated(), prompts) for i in range(job.choices)]
    copies = body.n_cmpl // asked.n
    out = [{**r, **({"index": i} if "index" in r else {})}
           for i, r in enumerate(r for r in decoded for _ in range(copies))]
    return JSONResponse(out if listed or len(out) > 1 else out[0])


async def _events(job: Job, event: tuple[int, Chunk], answers: Answers, state: ServerState,
                  truncated: Callable[[], bool]):
    """An answer streamed as llama.cpp streams it: a partial object per chunk (stop false:
    its text, tokens and, with n_probs, their probabilities), then each answer's whole object
    with stop true and its content already sent."""
    try:
        while True:
            index = event[0]
            delta, entries = answers.push(*event)
            answer = answers.answers[index]
            if delta or entries:
                partial = {"index": index, "content": delta, "tokens": event[1].token_ids,
                           "stop": False, "id_slot": -1,
                           "tokens_predicted": len(answer.tokens),
                           "tokens_evaluated": len(job.prompt_ids[index // job.request.n])}
                if job.request.logprobs is not None:
                    partial["completion_probabilities"] = probabilities(entries, job.pieces,
                                                                        body.post_sampling_probs)
                yield sse_event(partial)
            if answers.done:
                break
            event = await job.next_event()
        prompts = await answers.prompts(state)
        for i in range(job.choices):
            yield sse_event({**answers.result(i, state, truncated(), prompts), "content": ""})
        job.outcome = answers.answers[0].stop_type
    except Exception as exc:
        error = stream_failed(job, exc).body()
        yield f"error: {json.dumps(error, separators=(',', ':'))}\n\n"
    finally:
        job.cancel()


async def engine_request(state: ServerState, body: LlamaCppRequest,
                         prepares: list[Callable[[], list[int]]],
                         stop_token_ids: frozenset[int] = frozenset()) -> EngineRequest:
    """The engine's request for a llama.cpp completion of each prompt (`prepares`): until the
    model ends it or the context is full unless a limit is given; greedy answers decoded once
    (`serve` copies them); a bias given for a text applies to each of its tokens."""
    bias = [(key, value) for key, value in body.logit_bias or () if isinstance(key, int)]
    texts = [(key, value) for key, value in body.logit_bias or () if isinstance(key, str)]
    if texts:
        model = state.model
        bias += await state.worker.call(lambda: [
            (t, value) for text, value in texts
            for t in model.tokenize(text, add_special=False, parse_special=True)])
    penalties = body.penalties_of(body.presence_penalty, body.frequency_penalty, 1.0,
                                  tuple(bias), llamacpp=True)
    n = body.n_cmpl if body.temperature > 0 else 1
    if len(prepares) * n > state.worker.max_batch:
        raise APIError(400, f"{len(prepares)} prompt(s) x n_cmpl={n} make {len(prepares) * n} "
                            f"answers; this server decodes at most {state.worker.max_batch} "
                            f"together (serve --max-batch)", param="n_cmpl")
    return EngineRequest(prepares, body.token_limit or state.model.context_length,
                         body.temperature, body.top_k, body.top_p, body.min_p,
                         body.sampling_seed, tuple(body.stop), stop_token_ids, penalties,
                         logprobs=body.n_probs or None,
                         sampled_logprobs=body.post_sampling_probs,
                         grammar=await compile_grammar(state, body.output_format), n=n,
                         **speculative(body.speculative))


def unread(state: ServerState, body: LlamaCppRequest, prompts: int, listed: bool = False
           ) -> JSONResponse:
    """The answer to n_predict 0: llama.cpp reads the prompt into its cache then, a warm-up this
    server has no use for (its prefix cache keeps what a request read): nothing is read."""
    base = {"model": state.model_id, "tokens_predicted": 0, "tokens_evaluated": 0,
            "generation_settings": settings(body, state.model.context_length),
            "truncated": False, "tokens_cached": 0, "timings": timings(0, 0, 0, 0.0, 0.0, {}),
            "speculative": {}}
    out = [result(body, Answer(i, stop_type="limit"), base)
           for i in range(prompts * body.n_cmpl)]
    return JSONResponse(out if listed or len(out) > 1 else out[0])
