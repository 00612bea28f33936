"""The drafter interface, its registry, and the adaptive draft-length policy.

A drafter only proposes; the verifier decides. Drafters register under a name and are built from
`DrafterOptions`, so the CLI, the engine and the benchmark never branch on method names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

import torch

from ..errors import InvalidParameterError
from ..sampling import SamplingParams, probabilities, sample
from ..tree import TokenTree

if TYPE_CHECKING:
    from ..models import LoadedModel


@dataclass
class Draft:
    tokens: torch.Tensor  # [N] int64, proposed continuation(s) of the context
    q: torch.Tensor | None  # [N, V] processed draft distributions, None for deterministic drafters
    forwards: int = 0  # draft-model forward passes spent on this proposal
    parents: torch.Tensor | None = None  # [N] int64 tree parents (`tree.TokenTree`); None: a chain

    @property
    def tree(self) -> TokenTree:
        if self.parents is None:
            return TokenTree.chain(self.tokens)
        return TokenTree(self.tokens, self.parents)


EMPTY_DRAFT = Draft(torch.empty(0, dtype=torch.long), None)


@dataclass(frozen=True)
class DrafterOptions:
    """Everything any drafter may be configured with; each drafter reads what it needs."""

    draft_model: str | None = None  # `draft`: model name or path
    layers: tuple[int, ...] | None = None  # `layerskip`: decoder layers the draft pass runs
    ngram_max: int = 5  # `lookup`: longest n-gram matched against the context
    ngram_min: int = 1  # `lookup`: shortest n-gram tried before giving up
    tree_topk: int = 2  # `eagle`: children per expanded node
    tree_nodes: int | None = None  # `eagle`, `medusa`: nodes in the draft tree (None: its default)


class Drafter(ABC):
    name: ClassVar[str]
    lossless: ClassVar[bool] = True
    uses_features: ClassVar[bool] = False  # True: the engine calls `observe_features`

    @classmethod
    @abstractmethod
    def create(cls, target: "LoadedModel", options: DrafterOptions) -> "Drafter":
        """Build the drafter for this target; raise a SpecDecodeError for unusable options."""

    @abstractmethod
    def propose(
        self,
        context: torch.Tensor,
        k: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Draft:
        """Propose up to k tokens that continue context ([L] int64, prompt + generated so far).

        The target's cache holds context[:-1] when this is called and must hold exactly that
        again when it returns (drafters that run the target roll back what they appended)."""

    def observe(self, num_accepted: int) -> None:
        """Told after each verification how many draft tokens were accepted."""

    def observe_features(self, hidden: torch.Tensor) -> None:
        """The target's hidden states [T, H] of the positions it just added to its cache, in
        order: the prompt after prefill, then the root and accepted path after each step."""

    def reset(self) -> None:
        """Forget per-request state before a new request."""

    @property
    def default_k(self) -> int:
        return 4

    def describe(self) -> str:
        """One line for reports: what this drafter is configured to do."""
        return self.name


DRAFTERS: dict[str, type[Drafter]] = {}


def register(name: str) -> Callable[[type[Drafter]], type[Drafter]]:
    def add(cls: type[Drafter]) -> type[Drafter]:
        cls.name = name
        DRAFTERS[name] = cls
        return cls

    return add


def create_drafter(method: str, target: "LoadedModel", options: DrafterOptions) -> Drafter:
    if method not in DRAFTERS:
        raise InvalidParameterError(
            f"unknown method {method!r} (choose from {', '.join(sorted(DRAFTERS))})"
        )
    return DRAFTERS[method].create(target, options)


@dataclass
class DraftLength:
    """Draft length γ for the next step; optionally adaptive.

    Adaptive rule (as transformers' assisted generation): γ += 2 after a fully accepted draft,
    γ -= 1 after a rejection, always within [k_min, k_max]."""

    k: int
    adaptive: bool = False
    k_min: int = 1
    k_max: int = 16

    def __post_init__(self) -> None:
        if self.k < 1:
            raise InvalidParameterError(f"k must be >= 1, got {self.k}")
        if not 1 <= self.k_min <= self.k_max:
            raise InvalidParameterError(f"need 1 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if self.adaptive:
            self.k = min(max(self.k, self.k_min), self.k_max)

    def update(self, drafted: int, accepted: int) -> None:
        if not self.adaptive or drafted == 0:
            return
        step = 2 if accepted == drafted else -1
        self.k = min(max(self.k + step, self.k_min), self.k_max)


def draft_chain(
    forward: Callable[[torch.Tensor], torch.Tensor],
    first: torch.Tensor,
    k: int,
    params: SamplingParams,
    generator: torch.Generator | None,
) -> Draft:
    """Autoregressive drafting with any causal model: feed `first` ([T] int64, T >= 1), then take
    k tokens one at a time, each from q = probabilities(draft logits) (the argmax when greedy).

    `forward` appends tokens to the draft model's cache and returns their logits [T, V]."""
    tokens, qs = [], []
    logits = forward(first)[-1]
    for i in range(k):
        if params.greedy:
            token = logits.argmax()
        else:
            q = probabilities(logits, params)
            qs.append(q)
            token = sample(q, generator)
        tokens.append(token)
        if i + 1 < k:
            logits = forward(token.view(1))[-1]
    q = torch.stack(qs) if qs else None
    return Draft(torch.stack(tokens).long(), q, forwards=k)
