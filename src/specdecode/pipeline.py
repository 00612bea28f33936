"""The library's front door: a loaded model, a drafter and the engine, bound together.

    from specdecode import SpecDecoder
    sd = SpecDecoder.load("smollm2-135m", method="lookup")
    result = sd.generate("Translate to German: good morning", max_new_tokens=64)
    print(result.text, result.stats.tau)

The CLI, the benchmark and the server are users of this class; none of them owns decoding logic.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Iterator, Sequence

from .core.batch import collect_each, stream_batch
from .core.budget import DraftBudget
from .core.constraint import Grammar
from .core.cost import StepCost
from .core.engine import Chunk, GenerationResult, Request, Speculation, collect, stream
from .core.penalties import Penalties
from .core.sampling import SamplingParams
from .core.sequence import DraftLimit, GenerationConfig
from .drafters import Drafter, drafter_class
from .errors import InvalidParameterError
from .grammars import GrammarCompiler, grammar_compiler
from .models import DEFAULT_MODEL, LoadedModel, load_model
from .models.timing import step_cost
from .spec import DecodingSpec, resolve


class SpecDecoder:
    """A model and a drafter, ready to generate. `spec` is a resolved `DecodingSpec`, or a method
    name (None: the model's tuned or the default method) resolved with the draft caps
    `max_draft_nodes` and `max_draft_depth`, `adaptive` and drafter options given by name
    (`ngram_max=3`, `draft_model="..."`). Each step scores the part of the draft that pays for
    its rows on this machine (`cost`, the target's measured step cost)."""

    def __init__(self, model: LoadedModel, spec: DecodingSpec | str | None = None, *,
                 max_draft_nodes: int | None = None, max_draft_depth: int | None = None,
                 adaptive: bool = False, **options: Any) -> None:
        if not isinstance(spec, DecodingSpec):
            spec = resolve(model, spec, max_draft_nodes=max_draft_nodes,
                           max_draft_depth=max_draft_depth, adaptive=adaptive, options=options)
        self.model, self.spec = model, spec
        self.method = spec.method
        self.drafter: Drafter = drafter_class(spec.method).create(model, spec.options)
        default = self.drafter.default_budget  # (0 nodes: a drafter that drafts nothing)
        self.budget = default if not default.nodes else DraftBudget(
            spec.max_draft_nodes or default.nodes, spec.max_draft_depth or default.depth)
        self.adaptive = spec.adaptive

    @cached_property
    def cost(self) -> StepCost | None:
        """The target's step cost on this machine, for a drafting method: from the model's
        profile, else measured when first needed (said in the log) and saved there, not when the
        decoder is made."""
        return step_cost(self.model) if self.budget.nodes else None

    def caps(self, nodes: int | None = None, depth: int | None = None) -> DraftBudget:
        """The caps a request runs with, resolved here only: its own where it gives them, else
        this decoder's (the user's, else the tuned profile's, else the drafter's default: see
        `spec.resolve`); none for a drafter that drafts nothing (plain decoding)."""
        if not self.budget.nodes:
            return self.budget
        return DraftBudget(nodes or self.budget.nodes, depth or self.budget.depth)

    @property
    def grammars(self) -> GrammarCompiler:
        """Compiles JSON schemas and grammars for this model's tokenizer (`request(grammar=)`)."""
        return grammar_compiler(self.model)

    @classmethod
    def load(cls, model: str = DEFAULT_MODEL, method: str | None = None, *,
             backend: str = "auto", dtype: str = "auto", device: str = "cpu",
             **kwargs: Any) -> "SpecDecoder":
        return cls(load_model(model, backend=backend, dtype=dtype, device=device), method,
                   **kwargs)

    def describe(self) -> str:
        if not self.budget.nodes:
            return self.drafter.describe()
        adaptive = ", adaptive depth" if self.adaptive else ""
        return (f"{self.drafter.describe()}, up to {self.budget.nodes} nodes at depth "
                f"{self.budget.depth}{adaptive}, {self.cost}")

    def prompt_ids(self, prompt: str | list[int], chat: bool = True) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.model.encode_prompt(prompt, chat)

    def request(
        self,
        prompt: str | list[int],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        seed: int | None = None,
        stop: tuple[str, ...] = (),
        stop_token_ids: frozenset[int] = frozenset(),
        penalties: Penalties = Penalties(),
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        chat: bool = True,
        max_draft_nodes: int | None = None,
        max_draft_depth: int | None = None,
        grammar: Grammar | None = None,
        prediction: str | list[int] | None = None,
        sampled_logprobs: bool = False,
        generated: Sequence[Sequence[int]] = (),
    ) -> Request:
        """One generation's request: a str prompt is tokenized (with the chat template unless
        chat=False), a list is token ids; `max_draft_nodes` / `max_draft_depth` replace the
        decoder's caps for this request only; `grammar` (from `self.grammars`) constrains the
        output; `penalties` (presence, frequency, repetition, logit bias) process the logits;
        `logprobs` / `prompt_logprobs` (alternatives per token, None: off) report the generated /
        prompt tokens' log-probabilities on the chunks (`core.logprobs`); `stop_token_ids` end
        the output as the model's EOS does (a fill-in-the-middle's ends: `LoadedModel.fim`);
        `prediction` (text, or token ids) is what the output is expected to repeat, such as the
        file an edit rewrites: drafters that copy n-gram matches copy from it too (the output
        is the same with or without it); `sampled_logprobs`: logprobs of the distribution each
        token was drawn from, not the model's (`GenerationConfig`); `generated`: a continuation's
        tokens generated before, in the chunks they were sent in (`core.engine.admit`)."""
        if isinstance(prediction, str):
            prediction = self.model.encode_text(prediction)
        config = GenerationConfig(max_new_tokens, SamplingParams(temperature, top_k, top_p, min_p),
                                  seed, tuple(stop), frozenset(stop_token_ids), grammar, penalties,
                                  logprobs, prompt_logprobs, tuple(prediction or ()),
                                  sampled_logprobs)
        caps = self.caps(max_draft_nodes, max_draft_depth)
        limit = DraftLimit(caps.nodes, caps.depth, self.adaptive) if caps.nodes else None
        return Request(self.prompt_ids(prompt, chat), config, self.drafter, limit,
                       tuple(tuple(ids) for ids in generated))

    def stream(self, prompt: str | list[int], **kwargs: Any) -> Iterator[Chunk]:
        """Yield text deltas as steps complete; the last chunk carries finish_reason and stats.
        Arguments as `request`."""
        r = self.request(prompt, **kwargs)
        return stream(self.model.target, r.drafter, r.prompt, r.config, r.limit,
                      self.model.eos_token_ids, self.model.decode, self.cost, r.generated)

    def generate(self, prompt: str | list[int], **kwargs) -> GenerationResult:
        """Same arguments as `stream`; returns the whole result."""
        return collect(self.stream(prompt, **kwargs))

    def stream_batch(self, prompts: list[str | list[int]], *, max_batch: int = 8,
                     seed: int | None = None, speculation: Speculation = "adaptive",
                     **kwargs: Any) -> Iterator[tuple[int, Chunk]]:
        """Several prompts at once, up to `max_batch` sharing each target forward: yields (index
        of the prompt, chunk) as steps complete, each prompt's last chunk with its finish_reason
        and stats. Each prompt gets what `generate` gives it alone (prompt i is seeded with
        seed + i when a seed is given). `speculation`: draft rows chosen for the whole batch
        (adaptive), for each prompt as if alone (always), or none (off). Other arguments as
        `request`."""
        if max_batch < 1:
            raise InvalidParameterError(f"max_batch must be >= 1, got {max_batch}")
        requests = [self.request(prompt, seed=None if seed is None else seed + i, **kwargs)
                    for i, prompt in enumerate(prompts)]
        return stream_batch(self.model.target, requests, max_batch, self.cost,
                            self.model.eos_token_ids, self.model.decode, speculation)

    def generate_batch(self, prompts: list[str | list[int]], **kwargs: Any
                       ) -> list[GenerationResult]:
        """`stream_batch` (same arguments) to the end: results in the order of `prompts`."""
        return collect_each(self.stream_batch(prompts, **kwargs), len(prompts))
