"""The one request the engine worker understands: what every dialect (chat completions,
completions, llama.cpp's /infill) turns its own request into. A sampling or stopping setting is a
field here, read by name by the worker and the dialects that carry it; nothing travels as a dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ...core.constraint import Grammar
from ...core.penalties import Penalties


@dataclass(frozen=True)
class EngineRequest:
    """`n` choices of each prompt, choice i of prompt p at index p * n + i.

    `prompts` run on the worker thread and return each prompt's token ids: the tokenizer is not
    thread-safe, so it is only ever used there."""

    prompts: list[Callable[[], list[int]]]
    max_new_tokens: int
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None  # choice i is seeded seed + i
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()  # tokens that end a choice as EOS does
    penalties: Penalties = field(default_factory=Penalties)
    logprobs: int | None = None  # alternatives per generated token (None: no logprobs)
    prompt_logprobs: int | None = None  # the same for the prompt's tokens (None: not scored)
    sampled_logprobs: bool = False  # logprobs as each token was drawn (`GenerationConfig`)
    prediction: list[int] | None = None  # OpenAI's predicted output, tokenized
    grammar: Grammar | None = None  # what the output must match, compiled by the dialect
    method: str | None = None  # the speculative method (None: the server's)
    max_draft_nodes: int | None = None  # the request's draft caps (None: the method's)
    max_draft_depth: int | None = None
    n: int = 1
    echo: bool = False  # the prompt's text (and, when scored, logprobs) precedes each choice

    @property
    def choices(self) -> int:
        return len(self.prompts) * self.n

    def engine_settings(self, choice: int) -> dict:
        """`SpecDecoder.request`'s keyword arguments for choice `choice` of a prompt."""
        return dict(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                    top_k=self.top_k, top_p=self.top_p, min_p=self.min_p,
                    seed=None if self.seed is None else self.seed + choice, stop=self.stop,
                    stop_token_ids=self.stop_token_ids, penalties=self.penalties,
                    logprobs=self.logprobs, prompt_logprobs=self.prompt_logprobs,
                    sampled_logprobs=self.sampled_logprobs, prediction=self.prediction,
                    grammar=self.grammar)

    def with_grammar(self, grammar: Grammar | None) -> "EngineRequest":
        return replace(self, grammar=grammar)
