"""Request bodies of OpenAI's chat completions and completions, validated as `schema_base` says.

Clients of llama.cpp's server send its extension fields to these routes too
(`llamacpp_schemas.LlamaCppExtensions`): those the engine can honour are honoured, its pure hints
accepted, the rest refused by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ...core.logprobs import MAX_TOP_LOGPROBS
from ...core.penalties import PENALTY_RANGE, Penalties
from .chat_schemas import ChatMessage, Tool
from .llamacpp_schemas import LlamaCppExtensions
from .schema_base import (SEED_MAX, SEED_MIN, Number, SpeculativeOptions, Strict, check_bias,
                          stop_list, text_content)

MAX_COMPLETION_LOGPROBS = 5  # OpenAI's limit for /v1/completions (chat's is MAX_TOP_LOGPROBS)

class Prediction(Strict):
    """OpenAI's predicted output: text the answer is expected to repeat, such as the file an edit
    rewrites. The drafters copy from it (`GenerationConfig.reference`); the answer is the same
    with or without it."""

    type: Literal["content"]
    content: Any

    @field_validator("content")
    @classmethod
    def _text_only(cls, content: Any) -> str:
        return text_content(content)


class StreamOptions(Strict):
    include_usage: bool = False


class JSONSchemaFormat(Strict):
    """`response_format.json_schema`: the schema the answer must be valid against. Generation is
    always constrained to it, so `strict` true and false are both honoured (strict's promise)."""

    model_config = ConfigDict(populate_by_name=True)

    # OpenAI requires a name; llama.cpp's and vLLM's clients may leave it out (it names nothing
    # the answer depends on)
    name: str = Field("response", min_length=1, max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None
    # llama.cpp's extension: {"type": "json_object", "schema": {...}} is that schema's JSON
    schema_: dict[str, Any] | None = Field(None, alias="schema")

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError('json_schema is required with type "json_schema" and only then')
        if self.schema_ is not None and self.type != "json_object":
            raise ValueError('schema goes with type "json_object" (llama.cpp\'s spelling)')
        return self


class GenerationRequest(LlamaCppExtensions):
    """Parameters shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None  # optional; when given it must name the served model
    max_tokens: int | None = None  # 1..context length, checked against the model by the app
    temperature: Number = Field(1.0, ge=0)  # OpenAI's default; 0 = greedy
    top_p: Number = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=-1)  # extension; 0 or -1 (vLLM's spelling) = off
    min_p: Number = Field(0.0, ge=0, le=1)  # extension (vLLM, llama.cpp); 0 = off
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: Any = None  # a string or a list of strings; see _stop_strings
    n: int = Field(1, ge=1)  # choices per prompt, decoded together (one prefill); see app
    stream: bool = False
    stream_options: StreamOptions | None = None
    speculative: SpeculativeOptions | None = None
    user: str | None = None
    # structured output: OpenAI's response_format, or llama.cpp's json_schema or GBNF grammar
    response_format: ResponseFormat | None = None
    json_schema: dict[str, Any] | None = None
    grammar: str | None = None
    # penalties and biases (`core.penalties`): OpenAI's, and vLLM's repetition_penalty
    presence_penalty: Number = Field(0.0, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1])
    frequency_penalty: Number = Field(0.0, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1])
    repetition_penalty: Number = Field(1.0, gt=0)
    logit_bias: dict[str, Number] | None = None  # token id (as a string) -> added to its logit
    prediction: Prediction | None = None  # OpenAI's (chat); /v1/completions takes it too

    # Fields that take several shapes are typed Any and checked by hand: a pydantic union reports
    # one error per member ("stop.str: ..., stop.list[str]: ..."), which reads badly as `param`.
    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, stop: Any) -> list[str]:
        return stop_list(stop)

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for key in bias or {}:
            if not key.isdigit():
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        check_bias({int(k): v for k, v in (bias or {}).items()})
        return bias

    @model_validator(mode="after")
    def _one_format(self) -> "GenerationRequest":
        formats = [name for name in ("json_schema", "grammar") if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type != "text":
            formats.append("response_format")
        if len(formats) > 1:
            raise ValueError(f"give one of response_format, json_schema and grammar, not "
                             f"{' and '.join(formats)}")
        return self

    @property
    def output_format(self) -> tuple[str, Any] | None:
        """What the output must match: ("json_schema", schema), ("json_object", None) or
        ("gbnf", text); None for free text."""
        if self.json_schema is not None:
            return "json_schema", self.json_schema
        if self.grammar is not None:
            return "gbnf", self.grammar
        fmt = self.response_format
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return ("json_object", None) if fmt.schema_ is None else ("json_schema", fmt.schema_)
        return "json_schema", fmt.json_schema.json_schema

    @property
    def penalties(self) -> Penalties:
        return self.penalties_of(self.presence_penalty, self.frequency_penalty,
                                 self.repetition_penalty,
                                 tuple((int(k), v) for k, v in (self.logit_bias or {}).items()))

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens if self.max_tokens is not None else self.n_predict_limit

    @property
    def token_logprobs(self) -> int | None:
        """Alternatives reported beside each generated token's log-probability (None: off)."""
        return self.n_probs or None

    @property
    def prompt_logprobs(self) -> int | None:
        """The same for the prompt's tokens (None: not scored)."""
        return None

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.stop or ())  # the validator turned it into a list

    @property
    def include_usage_chunk(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _token_ids(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(type(t) is int for t in value))  # not bool, which is an int subclass


class CompletionRequest(GenerationRequest):
    prompt: Any  # a string, token ids, or a batch of either; see _prompts
    echo: bool = False  # the prompt before the completion (and its logprobs, when asked)
    best_of: int | None = None  # only n: every choice decoded is returned
    suffix: str | None = None  # the text after the middle to fill (fill-in-the-middle)
    logprobs: int | None = Field(None, ge=0, le=MAX_COMPLETION_LOGPROBS)

    @field_validator("prompt")
    @classmethod
    def _prompts(cls, prompt: Any) -> list[str | list[int]]:
        """A batch of prompts, each text or token ids (OpenAI's four shapes)."""
        if isinstance(prompt, str) or _token_ids(prompt):
            return [prompt]
        if (isinstance(prompt, list) and prompt
                and (all(isinstance(p, str) for p in prompt) or all(map(_token_ids, prompt)))):
            return prompt
        raise ValueError("prompt must be a string, a list of token ids, or a list of either")

    @model_validator(mode="after")
    def _unsupported_completion(self) -> "CompletionRequest":
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of must equal n: this server returns every choice it decodes")
        if self.suffix is not None and not all(isinstance(p, str) for p in self.prompt):
            raise ValueError("suffix needs text prompts (the code before the middle)")
        return self

    @property
    def token_logprobs(self) -> int | None:
        return self.logprobs if self.logprobs is not None else self.n_probs or None

    @property
    def prompt_logprobs(self) -> int | None:
        if not self.echo:
            return None
        if self.logprobs is None:  # max_tokens 0 echoes the prompt without generating
            return 0 if self.max_tokens == 0 else None
        return self.logprobs


class ChatCompletionRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    # vLLM's and llama.cpp's: continue the last (assistant) message instead of starting a turn
    continue_final_message: bool = False
    add_generation_prompt: bool = True  # false only with continue_final_message
    max_completion_tokens: int | None = None  # newer spelling of max_tokens
    tools: list[Tool] | None = None
    tool_choice: Any = None  # "none", "auto", "required" or {"type": "function", "function": {"name"}}
    parallel_tool_calls: bool = True
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    verbose: bool = False  # llama.cpp's: the answer's `__verbose` has the prompt as read

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, choice: Any) -> Any:
        if choice is None or choice in ("none", "auto", "required"):
            return choice
        if (isinstance(choice, dict) and choice.get("type") == "function"
                and isinstance(choice.get("function"), dict)
                and isinstance(choice["function"].get("name"), str) and len(choice) == 2
                and len(choice["function"]) == 1):
            return choice
        raise ValueError('tool_choice must be "none", "auto", "required" or '
                         '{"type": "function", "function": {"name": ...}}')

    @model_validator(mode="after")
    def _tools(self) -> "ChatCompletionRequest":
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice needs tools")
        if self.forced_tool_calls and self.output_format is not None:
            raise ValueError("a required tool call cannot also follow a response format")
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.add_generation_prompt == self.continue_final_message:
            raise ValueError("continue_final_message goes with add_generation_prompt: false, "
                             "and only with it")
        # as llama.cpp's server: the answer is the turn after the last, or continues it
        if len(self.messages) > 1 and {m.role for m in self.messages[-2:]} == {"assistant"}:
            raise ValueError("messages end in two assistant messages: join them into one")
        if self.verbose and self.stream:
            raise ValueError("verbose is reported on whole responses, not streamed ones")
        return self

    @property
    def token_logprobs(self) -> int | None:
        if self.logprobs:
            return self.top_logprobs or 0
        return self.n_probs or None

    @property
    def tools_in_prompt(self) -> list[dict] | None:
        """The tools the template describes (none for tool_choice "none")."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    @property
    def forced_tool_calls(self) -> tuple[str | None] | None:
        """(the named function, or None for any) when the answer must be tool calls."""
        if self.tool_choice == "required":
            return (None,)
        if isinstance(self.tool_choice, dict):
            return (self.tool_choice["function"]["name"],)
        return None

    @property
    def token_limit(self) -> int | None:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return super().token_limit
