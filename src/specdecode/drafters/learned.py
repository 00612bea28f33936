"""What the learned-head drafters (`eagle`, `medusa`) share: finding and checking the head, the
draft vocabulary's LM head, and turning scored candidate nodes into a `TokenTree`."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..core.drafter import Drafter
from ..core.target import FeatureTarget
from ..core.tree import ROOT
from ..errors import InvalidParameterError, ModelLoadError
from ..models.heads import load_head
from .registry import option

if TYPE_CHECKING:
    from ..models import LoadedModel


def shipped_head_path(model_key: str, kind: str) -> Path:
    """Where a head trained by this project for an embedded model ships inside the package."""
    return Path(str(resources.files("specdecode") / "data" / "heads" / model_key / kind))


def head_path(model: "LoadedModel", draft_model: str | None, kind: str) -> Path:
    """The head given by --draft-model, else the one shipped for this model."""
    return Path(draft_model) if draft_model else shipped_head_path(model.key, kind)


def missing_head(model: "LoadedModel", draft_model: str | None, kind: str) -> str | None:
    """Why there is no head to load (one line), or None."""
    if head_path(model, draft_model, kind).exists():
        return None
    where = f" at {draft_model}" if draft_model else ""
    return (f"no {kind} head for {model.name}{where}: train one with `specdecode train {kind} "
            f"--model {model.name}` and pass --draft-model DIR")


def resolve_head(model: "LoadedModel", draft_model: str | None, kind: str) -> torch.nn.Module:
    """The head (--draft-model, else the shipped one), checked against the target's sizes so that
    a head trained for another model fails with one line, not a crash."""
    reason = missing_head(model, draft_model, kind)
    if reason:
        raise ModelLoadError(reason)
    path = head_path(model, draft_model, kind)
    head = load_head(path, kind)
    target = model.target
    if head.cfg["hidden_size"] != target.hidden_size or (
            head.draft_vocab.numel() and int(head.draft_vocab.max()) >= target.vocab_size):
        raise ModelLoadError(f"the {kind} head at {path} was trained for another model "
                             f"(hidden size {head.cfg['hidden_size']})")
    return head


# Small trees by default: on a small target the heads' deeper guesses are right too rarely to pay
# for the rows and tree levels that draft them (docs/benchmarks/defaults).
DEFAULT_NODES = 3


@dataclass(frozen=True)
class HeadOptions:
    """The options of every learned drafter."""

    draft_model: str | None = option(
        None, "a trained head directory (default: the head shipped for the model)")


class LearnedDrafter(Drafter):
    """What `eagle` and `medusa` share: a trained head that drafts from the target's features."""

    Options = HeadOptions
    uses_features = True
    requires = (FeatureTarget,)

    @classmethod
    def unavailable(cls, model: "LoadedModel", options) -> str | None:
        return super().unavailable(model, options) or missing_head(model, options.draft_model,
                                                                   cls.name)

    @classmethod
    def load_head(cls, model: "LoadedModel", options) -> torch.nn.Module:
        """The head the options name (else the shipped one) for a target that has features."""
        reason = super().unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        return resolve_head(model, options.draft_model, cls.name)


def draft_lm_head(target: FeatureTarget, draft_vocab: torch.Tensor) -> torch.Tensor:
    """The LM-head rows the drafter scores: [V', H] for a draft vocabulary of V' ids, else all
    [V, H]."""
    return target.lm_head_rows(draft_vocab if draft_vocab.numel() else None)


def positive(name: str, value: int | None) -> None:
    """A one-line error for a tree option below 1."""
    if value is not None and value < 1:
        raise InvalidParameterError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def to_token_ids(draft_vocab: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Map indices into the draft vocabulary back to the target's token ids."""
    return draft_vocab[indices] if draft_vocab.numel() else indices


def select_nodes(parents: list[int], scores: list[float], budget: int) -> tuple[list[int], list[int]]:
    """Keep the `budget` candidates with the highest scores as a tree.

    parents: ROOT or an earlier candidate; scores: cumulative draft log-probabilities, so a child
    never outscores its parent and the best `budget` are closed under ancestors (ties go to the
    shallower, earlier candidate). Returns (kept candidate indices in tree order, their parents as
    indices into the kept list): parents first, siblings by score."""
    def depth(i: int) -> int:
        return 1 if parents[i] == ROOT else 1 + depth(parents[i])

    best = sorted(range(len(scores)), key=lambda i: (-scores[i], depth(i), i))[:budget]
    order = sorted(best, key=lambda i: (depth(i), -scores[i], i))
    position = {c: j for j, c in enumerate(order)}
    return order, [ROOT if parents[c] == ROOT else position[parents[c]] for c in order]
