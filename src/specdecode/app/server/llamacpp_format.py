"""llama.cpp's answer shapes, for `/completion` and `/infill`: one completion with its timings
and settings, the top tokens of `n_probs`, `response_fields`' flat answers, and server-sent
events as llama.cpp writes them.

Its answers are compact JSON on one line: llama.vim accepts an answer only when it matches
`"content"\\s*:"` (no space after the colon) and, in Vim, reads it line by line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ...core.run_stats import RunStats
from .llamacpp_schemas import DEFAULT_REPEAT_LAST_N, LlamaCppRequest

# llama.cpp's stop_type: the model's end, a stop string, the token limit (or a rule of its own)
STOP_TYPES = {"stop": "eos", "length": "limit"}


@dataclass
class Answer:
    """One completion as its chunks arrive."""

    index: int
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    entries: list[tuple[int, float, tuple]] = field(default_factory=list)  # n_probs' per token
    stop_type: str | None = None  # "eos", "word" or "limit" once it ended
    stopping_word: str = ""


def timings(prompt_tokens: int, cached: int, predicted: int, prompt_seconds: float,
            predict_seconds: float, stats: dict) -> dict:
    """llama.cpp's timings: the prompt's tokens read (`prompt_n`; those served from the prefix
    cache are `cache_n`) to the first token, the predicted ones after it, and as llama.cpp
    reports speculation, the tokens drafted and accepted."""
    read = prompt_tokens - cached
    return {"cache_n": cached, "prompt_n": read, "prompt_ms": prompt_seconds * 1e3,
            "prompt_per_token_ms": prompt_seconds * 1e3 / max(read, 1),
            "prompt_per_second": read / prompt_seconds if prompt_seconds else 0.0,
            "predicted_n": predicted, "predicted_ms": predict_seconds * 1e3,
            "predicted_per_token_ms": predict_seconds * 1e3 / max(predicted, 1),
            "predicted_per_second": predicted / predict_seconds if predict_seconds else 0.0,
            "draft_n": stats.get("drafted", 0), "draft_n_accepted": stats.get("accepted", 0)}


def run_timings(prompt_tokens: int, run: RunStats) -> dict:
    """llama.cpp's timings of a run so far, or whole (`timings_per_token`): its prompt's read up
    to the first token, its tokens after it."""
    return timings(prompt_tokens, run.cached_prompt_tokens, run.new_tokens,
                   run.first_token_seconds, max(run.wall_seconds - run.first_token_seconds, 0.0),
                   run.to_dict())


def settings(body: LlamaCppRequest, context_length: int) -> dict:
    """`generation_settings`: the request's settings as they were applied."""
    return {"n_ctx": context_length, "n_predict": body.token_limit or -1,
            "temperature": body.temperature, "top_k": body.top_k, "top_p": body.top_p,
            "min_p": body.min_p, "seed": body.seed if body.seed is not None else -1,
            "stop": body.stop, "n_indent": body.n_indent, "n_probs": body.n_probs or 0,
            "repeat_penalty": body.repeat_penalty if body.repeat_penalty is not None else 1.0,
            "repeat_last_n": (DEFAULT_REPEAT_LAST_N if body.repeat_last_n is None
                              else body.repeat_last_n),
            "presence_penalty": body.presence_penalty,
            "frequency_penalty": body.frequency_penalty, "stream": body.stream}


def probabilities(entries: list[tuple[int, float, tuple]], pieces: dict[int, bytes],
                  sampled: bool = False) -> list:
    """`completion_probabilities`: each token with its log-probability and its top
    alternatives', their texts and bytes; `sampled` (post_sampling_probs): of the distribution it
    was drawn from, as probabilities (`prob`, `top_probs`), the alternatives with no chance left
    out."""
    def one(token: int, logprob: float) -> dict:
        return {"id": token, "token": pieces[token].decode("utf-8", "replace"),
                "bytes": list(pieces[token]),
                **({"prob": math.exp(logprob)} if sampled else {"logprob": logprob})}

    top = "top_probs" if sampled else "top_logprobs"
    return [{**one(t, lp), top: [one(*a) for a in alternatives]} for t, lp, alternatives in entries]


def result(body: LlamaCppRequest, answer: Answer, base: dict, prompt: str | None = None
           ) -> dict:
    """One completion in llama.cpp's shape; `base` holds what every completion of the request
    shares (model, settings, counts, timings, our `speculative` extension)."""
    out = {"index": answer.index, "content": answer.text,
           "tokens": answer.tokens if body.return_tokens else [], "id_slot": 0, "stop": True,
           **base, "has_new_line": "\n" in answer.text,
           "stop_type": answer.stop_type or "limit", "stopping_word": answer.stopping_word}
    if prompt is not None:
        out["prompt"] = prompt
    return fields(out, body.response_fields)


def fields(answer: dict, paths: list[str] | None) -> dict:
    """llama.cpp's `response_fields`: the answer flattened to the paths asked ("timings/prompt_n"
    as a key of its own); paths it lacks are left out."""
    if not paths:
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
