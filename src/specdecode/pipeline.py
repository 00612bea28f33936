"""The library's front door: a loaded model, a drafter and the engine, bound together.

    from specdecode import SpecDecoder
    sd = SpecDecoder.load("smollm2-135m", method="lookup")
    result = sd.generate("Translate to German: good morning", max_new_tokens=64)
    print(result.text, result.stats.tau)

The CLI, the benchmark and the server are users of this class; none of them owns decoding logic.
"""

from __future__ import annotations

from typing import Iterator

from .drafters import Drafter, DrafterOptions, DraftLength, create_drafter
from .engine import Chunk, GenerationConfig, GenerationResult, collect, stream
from .models import DEFAULT_MODEL, LoadedModel, load_model
from .sampling import SamplingParams

# The fastest lossless method measured on the default model (see BENCHMARKS in the README).
DEFAULT_METHOD = "lookup"


class SpecDecoder:
    def __init__(
        self,
        model: LoadedModel,
        method: str = DEFAULT_METHOD,
        options: DrafterOptions = DrafterOptions(),
        k: int | None = None,
        adaptive: bool = False,
        k_max: int = 16,
    ) -> None:
        self.model = model
        self.method = method
        self.drafter: Drafter = create_drafter(method, model, options)
        self.k = k if k is not None else self.drafter.default_k
        self.adaptive = adaptive
        self.k_max = max(k_max, self.k)

    @classmethod
    def load(cls, model: str = DEFAULT_MODEL, method: str = DEFAULT_METHOD, *,
             backend: str = "auto", dtype: str = "float32", **kwargs) -> "SpecDecoder":
        return cls(load_model(model, backend=backend, dtype=dtype), method, **kwargs)

    def describe(self) -> str:
        k = "adaptive from " + str(self.k) if self.adaptive else str(self.k)
        return f"{self.drafter.describe()}, k={k}" if self.k else self.drafter.describe()

    def prompt_ids(self, prompt: str | list[int], chat: bool = True) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.model.encode_prompt(prompt, chat)

    def stream(
        self,
        prompt: str | list[int],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: tuple[str, ...] = (),
        chat: bool = True,
        k: int | None = None,
    ) -> Iterator[Chunk]:
        """Yield text deltas as steps complete; the last chunk carries finish_reason and stats.
        A str prompt is tokenized (with the chat template unless chat=False); a list is token ids.
        `k` overrides the decoder's draft length for this call only."""
        config = GenerationConfig(max_new_tokens, SamplingParams(temperature, top_k, top_p), seed,
                                  tuple(stop))
        k = self.k if k is None else k
        length = DraftLength(k, self.adaptive, 1, max(self.k_max, k)) if k else None
        return stream(self.model.target, self.drafter, self.prompt_ids(prompt, chat), config,
                      length, self.model.eos_token_ids, self.model.decode)

    def generate(self, prompt: str | list[int], **kwargs) -> GenerationResult:
        """Same arguments as `stream`; returns the whole result."""
        return collect(self.stream(prompt, **kwargs))
