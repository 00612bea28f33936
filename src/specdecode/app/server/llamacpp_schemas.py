"""Request bodies of llama.cpp's own routes (`/completion`, `/infill`, `/tokenize`,
`/detokenize`), validated as `schema_base` says, and llama.cpp's extension fields, which its
clients send to OpenAI's routes too.

llama.cpp's samplers that this engine does not have (mirostat, DRY, XTC, typical, dynamic
temperature) are accepted at their "off" values only, as llama.cpp's own web page sends them;
anything else is refused by name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...core.logprobs import MAX_TOP_LOGPROBS
from ...core.penalties import BIAS_RANGE, PENALTY_RANGE, Penalties
from .schema_base import (MAX_STOP_STRINGS, SEED_MAX, Number, SpeculativeOptions, Strict,
                          check_bias)

DEFAULT_REPEAT_LAST_N = 64  # llama.cpp's window of the penalties
WHOLE_CONTEXT = 1 << 31  # a window no context reaches past (llama.cpp's -1)
# llama.cpp's samplers that are not this engine's, each accepted at the value that turns it off
SAMPLERS_OFF: dict[str, float] = {"typical_p": 1.0, "dynatemp_range": 0.0, "mirostat": 0,
                                  "dry_multiplier": 0.0, "xtc_probability": 0.0}
# their other settings, which mean nothing while the sampler is off
SAMPLER_SETTINGS = ("dynatemp_exponent", "mirostat_tau", "mirostat_eta", "dry_base",
                    "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
                    "xtc_threshold", "min_keep", "n_keep", "n_discard")


class LlamaCppExtensions(Strict):
    """llama.cpp's fields that its clients send to every generation route. Honoured: the token
    limit (`n_predict`, -1: none), the penalties as llama.cpp counts them (`repeat_penalty`,
    `repeat_last_n`), its top-token count (`n_probs`: alternatives per token, as logprobs),
    `return_progress` (a stream reports its prompt's read, `prompt_progress`, before its first
    token) and `timings_per_token` (a stream's chunks and its end carry llama.cpp's `timings`;
    `/completion` times every answer). Accepted as the hints they are: `cache_prompt` (prompts
    are kept in the prefix cache whatever it says), `id_slot` (there are no slots: requests
    share one batch) and `backend_sampling` (where llama.cpp draws, its GPU backend or its CPU
    sampler; here every draw is made in one place, from the same distribution)."""

    n_predict: int | None = Field(None, ge=-1)
    repeat_penalty: Number | None = Field(None, gt=0)
    repeat_last_n: int | None = Field(None, ge=-1)  # -1: the whole context; 0: penalties off
    n_probs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    cache_prompt: bool | None = None
    id_slot: int | None = None
    backend_sampling: bool | None = None
    timings_per_token: bool | None = None
    return_progress: bool = False

    @model_validator(mode="after")
    def _one_repetition_penalty(self) -> "LlamaCppExtensions":
        other = getattr(self, "repetition_penalty", 1.0)
        if self.repeat_penalty not in (None, 1.0) and other not in (1.0, self.repeat_penalty):
            raise ValueError("give one of repeat_penalty and repetition_penalty")
        return self

    @property
    def n_predict_limit(self) -> int | None:
        return None if self.n_predict in (None, -1) else self.n_predict

    def penalties_of(self, presence: float, frequency: float, repetition: float,
                     bias: tuple[tuple[int, float], ...], llamacpp: bool = False) -> Penalties:
        """The request's penalties. llama.cpp's (on its own routes, `llamacpp`, or wherever its
        `repeat_penalty` or `repeat_last_n` is given): all three count the last `repeat_last_n`
        tokens before a row, prompt included (default 64; -1: the whole context; 0: none);
        otherwise OpenAI's and vLLM's (`core.penalties`)."""
        if not (llamacpp or self.repeat_penalty is not None or self.repeat_last_n is not None):
            return Penalties(presence, frequency, repetition, bias)
        window = DEFAULT_REPEAT_LAST_N if self.repeat_last_n is None else self.repeat_last_n
        if window == 0:
            return Penalties(bias=bias)
        repeat = self.repeat_penalty if self.repeat_penalty is not None else repetition
        return Penalties(presence, frequency, repeat, bias,
                         window=WHOLE_CONTEXT if window == -1 else window)


class LlamaCppRequest(LlamaCppExtensions):
    """The generation fields of llama.cpp's `/completion` and `/infill`, with llama.cpp's
    defaults (sampled at temperature 0.8 with top-k 40, top-p 0.95 and min-p 0.05; until the
    model ends or the context is full)."""

    model_config = ConfigDict(extra="allow")  # llama.cpp's other samplers, checked below
    n_predict: int = Field(-1, ge=-1)
    max_tokens: int | None = Field(None, ge=0)  # llama.cpp's alias of n_predict
    temperature: Number = Field(0.8, ge=0)
    top_k: int = Field(40, ge=0)
    top_p: Number = Field(0.95, gt=0, le=1)
    min_p: Number = Field(0.05, ge=0, le=1)
    seed: int | None = Field(None, ge=-1, le=SEED_MAX)  # -1: a random seed, as llama.cpp reads it
    stop: list[str] = Field(default_factory=list, max_length=MAX_STOP_STRINGS)
    stream: bool = False
    n_cmpl: int = Field(1, ge=1)  # completions of each prompt
    n_indent: int = Field(0, ge=0)  # after the first line, a line indented less ends the answer
    t_max_predict_ms: Number = -1.0  # past this, a new line ends the answer (<= 0: no limit)
    return_tokens: bool = False
    presence_penalty: Number = Field(0.0, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1])
    frequency_penalty: Number = Field(0.0, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1])
    # [[token id or text, bias or false], ...] or {"token id or text": bias or false}
    logit_bias: Any = None
    json_schema: dict[str, Any] | None = None
    grammar: str | None = None
    post_sampling_probs: bool = False
    ignore_eos: bool = False
    response_fields: list[str] | None = None  # paths ("timings/prompt_n") of a flat answer
    model: str | None = None  # "" (llama.vim's default) names no model
    speculative: SpeculativeOptions | None = None
    # llama.cpp's own, sent by its clients, with no meaning here: its sampler order (the order
    # here is fixed), a prompt time limit llama.cpp does not implement either, adapters
    samplers: list[str] | str | None = None
    t_max_prompt_ms: Number | None = None
    lora: list[Any] | None = None

    @model_validator(mode="after")
    def _known_and_off(self) -> "LlamaCppRequest":
        for name, value in (self.model_extra or {}).items():
            if name in SAMPLERS_OFF:
                if value != SAMPLERS_OFF[name] or isinstance(value, bool):
                    raise ValueError(f"{name} is not supported by this server (only "
                                     f"{SAMPLERS_OFF[name]}, which turns it off)")
            elif name not in SAMPLER_SETTINGS:
                raise ValueError(f"unknown field {name!r}")
        if self.lora:
            raise ValueError("lora adapters are not supported by this server")
        if self.ignore_eos:
            raise ValueError("ignore_eos is not supported: an answer ends where the model ends it")
        if self.json_schema is not None and self.grammar is not None:
            raise ValueError("give one of json_schema and grammar")
        return self

    @property
    def token_limit(self) -> int | None:
        limit = self.max_tokens if self.max_tokens is not None else self.n_predict
        return None if limit < 0 else limit

    @property
    def sampling_seed(self) -> int | None:
        return None if self.seed in (None, -1) else self.seed

    @property
    def output_format(self) -> tuple[str, Any] | None:
        if self.json_schema is not None:
            return "json_schema", self.json_schema
        return None if self.grammar is None else ("gbnf", self.grammar)

    @field_validator("logit_bias")
    @classmethod
    def _bias_pairs(cls, bias: Any) -> list[tuple[int | str, float]]:
        """`logit_bias` as (token id or text, bias) pairs; false (never this token) is the
        lowest bias."""
        if bias is not None and not isinstance(bias, (list, dict)):
            raise ValueError("logit_bias must be a list of pairs or an object")
        pairs = (list(bias.items()) if isinstance(bias, dict)
                 else [tuple(p) if isinstance(p, list) else p for p in bias or ()])
        out: list[tuple[int | str, float]] = []
        for pair in pairs:
            if not (isinstance(pair, tuple) and len(pair) == 2
                    and isinstance(pair[0], (int, str)) and not isinstance(pair[0], bool)
                    and (pair[1] is False or type(pair[1]) in (int, float))):
                raise ValueError("logit_bias must be [[token id or text, bias or false], ...] or "
                                 "{token id or text: bias or false}")
            key, value = pair
            key = int(key) if isinstance(key, str) and key.isdigit() else key
            out.append((key, BIAS_RANGE[0] if value is False else float(value)))
        check_bias(dict(enumerate(v for _, v in out)))
        return out


def _token_or_text(part: Any) -> bool:
    return isinstance(part, str) or (type(part) is int)


class CompletionBody(LlamaCppRequest):
    """`/completion`: `prompt` as llama.cpp takes it: text, token ids, ids and text mixed,
    {"prompt_string": text}, or a list of those (several prompts: the answer is a list)."""

    prompt: Any

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, prompt: Any) -> Any:
        def one(p: Any) -> bool:
            if isinstance(p, dict):
                if p.get("multimodal_data"):
                    raise ValueError("multimodal_data is not supported: this model reads text")
                return set(p) <= {"prompt_string", "multimodal_data"} and isinstance(
                    p.get("prompt_string"), str)
            return isinstance(p, str) or (isinstance(p, list) and bool(p)
                                          and all(map(_token_or_text, p)))

        if one(prompt) or (isinstance(prompt, list) and prompt and all(map(one, prompt))):
            return prompt
        raise ValueError("prompt must be text, token ids (text may be mixed in), "
                         '{"prompt_string": text}, or a list of those')

    @property
    def batch(self) -> bool:
        """Several prompts (answered with a list)."""
        p = self.prompt
        return isinstance(p, list) and not all(map(_token_or_text, p))

    @property
    def prompts(self) -> list[str | list[int | str]]:
        """Each prompt as text or a list of token ids and texts."""
        parts = self.prompt if self.batch else [self.prompt]
        return [p["prompt_string"] if isinstance(p, dict) else p for p in parts]


class InfillFile(BaseModel):
    """One file of `/infill`'s input_extra (its `time`, which the editors send in two shapes, and
    any other key are context the server does not need)."""

    model_config = ConfigDict(strict=True, extra="ignore")

    text: str
    filename: str = "tmp"  # llama.cpp's name for a file sent without one


class InfillRequest(LlamaCppRequest):
    """llama.cpp's `/infill` body, as its editor plugins (llama.vscode, llama.vim) send it: the
    code before the cursor (`input_prefix`, then `prompt`: the cursor's line up to the cursor),
    after it (`input_suffix`) and other files (`input_extra`). Greedy unless `temperature` > 0
    (llama.cpp's own `infill` sampler is not reproduced: the middle ends where the model writes
    its end, as llama.cpp ends it, or by `n_indent`)."""

    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[InfillFile] = Field(default_factory=list)
    prompt: str = ""
    temperature: Number = Field(0.0, ge=0)
    top_k: int = Field(0, ge=0)
    top_p: Number = Field(1.0, gt=0, le=1)
    min_p: Number = Field(0.0, ge=0, le=1)


class TokenizeRequest(Strict):
    content: str
    add_special: bool = False  # the tokenizer's own special tokens (BOS) around the text
    parse_special: bool = True  # special tokens' spellings in the text are those tokens
    with_pieces: bool = False  # each token's text (its bytes where they are no UTF-8 text)


class DetokenizeRequest(Strict):
    tokens: list[int]
