"""The drafter interface, its registry and its options.

A drafter only proposes; the verifier decides. A drafter holds weights and a policy; whatever
changes while a request generates lives on that request's `Sequence` (`seq.drafter_state`, set up
by `start`), so one drafter serves any number of sequences.

Each drafter registers under a name with its own options, a frozen dataclass `Options` whose fields
are made with `option(...)`: the CLI's flags, the server's `speculative` fields, `resolve` and the
benchmark all read them from the registry, so a new drafter is one new file.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch

from ..core.budget import DraftBudget
from ..core.sampling import SamplingParams, greedy_tokens, probabilities, sample
from ..core.tree import TokenTree
from ..errors import InvalidParameterError

if TYPE_CHECKING:
    from ..core.sequence import Sequence
    from ..models import LoadedModel


@dataclass
class Draft:
    tokens: torch.Tensor  # [N] int64, proposed continuation(s) of the context
    q: torch.Tensor | None  # [N, V] processed draft distributions, None for deterministic drafters
    forwards: int = 0  # draft-model forward passes spent on this proposal
    parents: torch.Tensor | None = None  # [N] int64 tree parents (`tree.TokenTree`); None: a chain
    # [N] float: each node's estimated chance of lying on the accepted path, nodes best first, so
    # that the step's budget (`core.budget`) can score a prefix; None: the draft is scored whole
    chances: torch.Tensor | None = None

    @cached_property
    def tree(self) -> TokenTree:
        if self.parents is None:
            return TokenTree.chain(self.tokens)
        return TokenTree(self.tokens, self.parents)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def best(self, n: int) -> "Draft":
        """The first n nodes (parents precede children, so they form a tree)."""
        if n >= len(self):
            return self
        cut = lambda t: None if t is None else t[:n]  # noqa: E731
        return Draft(self.tokens[:n], cut(self.q), self.forwards, cut(self.parents),
                     cut(self.chances))


EMPTY_DRAFT = Draft(torch.empty(0, dtype=torch.long), None)


def option(default: Any, help: str, parse: Callable[[str], Any] | None = None) -> Any:
    """A field of a drafter's `Options`: its default, the help text of its CLI flag (`--name`
    with dashes), and how the flag's text becomes a value when `type(default)` cannot (`parse`,
    raising ValueError on bad input)."""
    return field(default=default, metadata={"help": help, "parse": parse})


@dataclass(frozen=True)
class NoOptions:
    """Options of a drafter that has none."""


class Drafter(ABC):
    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    uses_features: ClassVar[bool] = False  # True: the engine calls `observe_features`
    uses_logits: ClassVar[bool] = False  # True: the engine calls `observe_logits`
    requires: ClassVar[tuple[type, ...]] = ()  # target capabilities (`models.target`) it needs
    proposes_trees: ClassVar[bool] = False  # True: needs a target that scores trees

    @classmethod
    @abstractmethod
    def create(cls, model: "LoadedModel", options) -> "Drafter":
        """Build the drafter for this model from its `Options`; raise a SpecDecodeError for
        unusable options."""

    @classmethod
    def unavailable(cls, model: "LoadedModel", options) -> str | None:
        """Why this drafter cannot run on this model with these options (one line), or None."""
        missing = [c.__name__ for c in cls.requires if not isinstance(model.target, c)]
        if missing:
            return (f"{cls.name} needs a target with {' and '.join(missing)} (the native backend,"
                    " a Llama-family model)")
        if cls.proposes_trees and not getattr(model.target, "scores_trees", False):
            return (f"{cls.name} proposes token trees, which this target cannot score (the "
                    "transformers backend verifies chains only): use the native backend or a "
                    "chain drafter (lookup, draft)")
        return None

    @classmethod
    def tune_candidates(cls, model: "LoadedModel", draft_model: str | None) -> list[dict]:
        """The configurations `specdecode tune` times for this drafter: dicts of option values by
        field name, and "max_draft_nodes" / "max_draft_depth" (the caps); `draft_model` is tune's
        --draft-model. Default: the defaults."""
        return [{}]

    def start(self, seq: "Sequence") -> None:
        """Set up this drafter's state for a new sequence (`seq.drafter_state`)."""

    @abstractmethod
    def propose(self, seq: "Sequence", budget: DraftBudget) -> Draft:
        """Propose at most budget.nodes tokens, on paths of at most budget.depth, that continue
        seq.context (prompt + generated so far); with chances where the drafter can estimate them.

        The sequence's cache holds context[:-1] when this is called and must hold exactly that
        again when it returns (drafters that run the target roll back what they appended)."""

    def observe(self, seq: "Sequence", scored: int, accepted: int) -> None:
        """Told after each verification: how many of the proposed nodes were scored (the first
        `scored`: the step's budget may keep fewer than proposed) and how many were accepted."""

    def observe_features(self, seq: "Sequence", hidden: torch.Tensor) -> None:
        """The target's hidden states [T, H] of the positions it just added to the sequence's
        cache, in order: the prompt after prefill, then the root and accepted path each step."""

    def observe_logits(self, seq: "Sequence", tokens: list[int], logits: torch.Tensor) -> None:
        """After each verification: `tokens` [a + 1], the root (pending) token and the accepted
        path, and `logits` [a + 1, V], the target's rows for them (each predicts the next)."""

    def finish(self, seq: "Sequence") -> None:
        """Told once when a sequence has finished (not when it was cancelled)."""

    @property
    def default_budget(self) -> DraftBudget:
        """The caps when the user sets none: the most the cost rule may choose from."""
        return DraftBudget(4, 4)

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


def drafter_class(method: str) -> type[Drafter]:
    if method not in DRAFTERS:
        raise InvalidParameterError(
            f"unknown method {method!r} (choose from {', '.join(sorted(DRAFTERS))})"
        )
    return DRAFTERS[method]


def make_options(method: str, values: dict[str, Any]):
    """The `Options` of `method` from user values by field name; values for fields the drafter
    does not have (another drafter's) are ignored. Text values (from a CLI flag or a form) are
    parsed; the dataclass validates."""
    cls = drafter_class(method).Options
    given = {}
    for f in fields(cls):
        if values.get(f.name) is None:
            continue
        value, parse = values[f.name], f.metadata.get("parse")
        if isinstance(value, str) and parse is not None:
            try:
                value = parse(value)
            except ValueError:
                raise InvalidParameterError(
                    f"--{f.name.replace('_', '-')}: cannot read {value!r}") from None
        given[f.name] = value
    return cls(**given)


def option_fields() -> dict[str, list[tuple[str, Any]]]:
    """Every option of every registered drafter: name -> [(method, dataclass field)], for the
    CLI's flags and the server's fields (an option several drafters share appears once)."""
    found: dict[str, list[tuple[str, Any]]] = {}
    for method in sorted(DRAFTERS):
        for f in fields(DRAFTERS[method].Options):
            found.setdefault(f.name, []).append((method, f))
    return found


def draft_chain(
    forward: Callable[[torch.Tensor], torch.Tensor],
    first: torch.Tensor,
    length: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    vocabulary: torch.Tensor | None = None,
    vocab_size: int | None = None,
    stop_below: float = 0.0,
) -> Draft:
    """Autoregressive drafting with any causal model: feed `first` ([T] int64, T >= 1), then take
    up to `length` tokens one at a time, each from q = probabilities(draft logits) (the argmax
    when greedy). A token's chance is the product of the draft model's probabilities of the
    tokens up to it (its confidence that the whole path is right, as EAGLE-2 ranks its nodes);
    drafting stops before a token whose chance is below `stop_below`. The draft's `forwards`
    counts the calls of `forward`: it has fed `first` and the draft's first forwards - 1 tokens.

    `forward` appends tokens to the draft model's cache and returns their logits [T, V'].
    `vocabulary`: [V'] int64, the token id each logits column scores (a drafter whose output layer
    covers only some tokens), None: column i is token i. The draft's q are then over all
    `vocab_size` ids, zero outside `vocabulary`: a token is drafted from exactly that q."""
    tokens, qs, chances = [], [], []
    logits, forwards, chance = forward(first)[-1], 1, 1.0
    for i in range(length):
        if params.greedy:
            pick = torch.tensor(greedy_tokens(logits[None])[0], device=logits.device)
            chance *= float(torch.softmax(logits.float(), -1)[pick])
        else:
            q = probabilities(logits, params)
            pick = sample(q, generator)
            chance *= float(q[pick])
            if vocabulary is not None:
                q = torch.zeros(vocab_size, dtype=q.dtype).index_copy_(0, vocabulary, q)
        if chance < stop_below:
            break
        if not params.greedy:
            qs.append(q)
        token = pick if vocabulary is None else vocabulary[pick]
        tokens.append(token)
        chances.append(chance)
        if i + 1 < length:
            logits, forwards = forward(token.view(1))[-1], forwards + 1
    if not tokens:
        return Draft(torch.empty(0, dtype=torch.long), None, forwards)
    q = torch.stack(qs) if qs else None
    return Draft(torch.stack(tokens).long(), q, forwards, chances=torch.tensor(chances))


def create_drafter(method: str, model: "LoadedModel", options=None) -> Drafter:
    """The drafter registered as `method`, built with `options` (its Options; default: its
    defaults)."""
    cls = drafter_class(method)
    return cls.create(model, cls.Options() if options is None else options)
