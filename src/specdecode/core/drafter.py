"""The drafter interface the engine calls, and what a drafter returns: a `Draft`.

A drafter only proposes; the verifier decides. A drafter holds weights and a policy; whatever
changes while a request generates lives on that request's `SequenceState` (`seq.drafter_state`,
set up by `start`), so one drafter serves any number of sequences. The drafters themselves, their
registry and their options live in `drafters`, above this layer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from .budget import DraftBudget
from .tree import TokenTree

if TYPE_CHECKING:
    from .sequence import SequenceState


@dataclass
class Draft:
    tokens: torch.Tensor  # [N] int64, proposed continuation(s) of the context
    q: torch.Tensor | None  # [N, V] processed draft distributions, None for deterministic drafters
    forwards: int = 0  # draft-model forward passes spent on this proposal
    parents: torch.Tensor | None = None  # [N] int64 tree parents (`tree.TokenTree`); None: a chain
    # [N] float: each node's estimated chance of lying on the accepted path, nodes best first, so
    # that the step's budget (`core.budget`) can score a prefix; None: the draft is scored whole
    chances: torch.Tensor | None = None
    forced: int = 0  # nodes a grammar forced within the drafter's own drafting (no choice made)

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


    def keep(self, nodes: list[int]) -> "Draft":
        """The draft of these nodes only (ascending; each one's parent kept too)."""
        index = torch.tensor(nodes, dtype=torch.long)
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        parents = None
        if self.parents is not None:
            renumber = {old: new for new, old in enumerate(nodes)}
            parents = torch.tensor([-1 if p < 0 else renumber[p]
                                    for p in self.parents[index].tolist()], dtype=torch.long)
        return Draft(self.tokens[index], pick(self.q), self.forwards, parents,
                     pick(self.chances))

    def extended(self, tokens: list[int]) -> "Draft":
        """A deterministic chain (q None) with `tokens` appended, each as likely as its last node
        (certain for an empty draft)."""
        assert self.q is None and self.tree.is_chain, "only deterministic chains extend"
        more = torch.tensor(tokens, dtype=torch.long)
        chances = self.chances
        if not len(self):
            chances = torch.ones(len(tokens))
        elif chances is not None:
            chances = torch.cat([chances, chances[-1:].expand(len(tokens))])
        return Draft(torch.cat([self.tokens, more]), None, self.forwards, None, chances)


EMPTY_DRAFT = Draft(torch.empty(0, dtype=torch.long), None)


@dataclass(frozen=True)
class NoOptions:
    """Options of a drafter that has none."""


class Drafter(ABC):
    """`model` below is a `models.LoadedModel` (typed loosely: this layer does not import the
    models above it)."""

    name: ClassVar[str]
    Options: ClassVar[type] = NoOptions
    uses_features: ClassVar[bool] = False  # True: the engine calls `observe_features`
    uses_logits: ClassVar[bool] = False  # True: the engine calls `observe_logits`
    requires: ClassVar[tuple[type, ...]] = ()  # target capabilities (`core.target`) it needs
    proposes_trees: ClassVar[bool] = False  # True: needs a target that scores trees
    # True: besides its model's drafts it has drafts that cost no forward (n-gram matches), which
    # it still proposes while its gate pauses the model (`DraftBudget.forwards` False)
    free_drafts: bool = False

    @classmethod
    @abstractmethod
    def create(cls, model: Any, options) -> "Drafter":
        """Build the drafter for this model from its `Options`; raise a SpecDecodeError for
        unusable options."""

    @classmethod
    def unavailable(cls, model: Any, options) -> str | None:
        """Why this drafter cannot run on this model with these options (one line), or None."""
        missing = [c.__name__ for c in cls.requires if not isinstance(model.target, c)]
        if missing:
            return (f"{cls.name} needs a target with {' and '.join(missing)} (the native backend,"
                    " a family it computes)")
        if cls.proposes_trees and not getattr(model.target, "scores_trees", False):
            return (f"{cls.name} proposes token trees, which this target cannot score (the "
                    "transformers backend verifies chains only): use the native backend or a "
                    "chain drafter (lookup, draft)")
        return None

    @classmethod
    def tune_candidates(cls, model: Any, draft_model: str | None) -> list[dict]:
        """The configurations `specdecode tune` times for this drafter: dicts of option values by
        field name, and "max_draft_nodes" / "max_draft_depth" (the caps); `draft_model` is tune's
        --draft-model. Default: the defaults."""
        return [{}]

    def start(self, seq: "SequenceState") -> None:
        """Set up this drafter's state for a new sequence (`seq.drafter_state`)."""

    def prepare(self, seq: "SequenceState") -> None:
        """Told once the sequence's prompt is in the target's cache, before its first step: a
        drafter that reads the prompt itself (a draft model's own prefill) does it here, where it
        counts as prefill, so that the first step's drafting time is drafting alone."""

    @abstractmethod
    def propose(self, seq: "SequenceState", budget: DraftBudget) -> Draft:
        """Propose at most budget.nodes tokens, on paths of at most budget.depth, that continue
        seq.context (prompt + generated so far); with chances where the drafter can estimate them.

        The sequence's cache holds context[:-1] when this is called and must hold exactly that
        again when it returns (drafters that run the target roll back what they appended)."""

    def observe(self, seq: "SequenceState", scored: int, accepted: int) -> None:
        """Told after each verification: how many of the proposed nodes were scored (the first
        `scored`: the step's budget may keep fewer than proposed) and how many were accepted."""

    def observe_features(self, seq: "SequenceState", hidden: torch.Tensor) -> None:
        """The target's hidden states [T, H] of the positions it just added to the sequence's
        cache, in order: the prompt after prefill, then the root and accepted path each step."""

    def observe_logits(self, seq: "SequenceState", tokens: list[int], logits: torch.Tensor) -> None:
        """After each verification: `tokens` [a + 1], the root (pending) token and the accepted
        path, and `logits` [a + 1, V], the target's rows for them (each predicts the next)."""

    def finish(self, seq: "SequenceState") -> None:
        """Told once when a sequence has finished (not when it was cancelled)."""

    @property
    def default_budget(self) -> DraftBudget:
        """The caps when the user sets none: the most the cost rule may choose from."""
        return DraftBudget(4, 4)

    def describe(self) -> str:
        """One line for reports: what this drafter is configured to do."""
        return self.name
