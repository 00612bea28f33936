"""What the learned-head drafters (`eagle`, `medusa`) share: finding and checking the head, the
draft vocabulary's LM head, and turning scored candidate nodes into a `TokenTree`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..errors import InvalidParameterError, ModelLoadError
from ..models.heads import load_head
from ..tree import ROOT

if TYPE_CHECKING:
    from ..models import LoadedModel


def shipped_head_path(model_key: str, kind: str) -> Path:
    """Where a head trained by this project for an embedded model ships inside the package."""
    return Path(str(resources.files("specdecode") / "data" / "heads" / model_key / kind))


def resolve_head(model: "LoadedModel", draft_model: str | None, kind: str) -> torch.nn.Module:
    """The head given by --draft-model, else the one shipped for this model; checked against the
    target's sizes so that a head trained for another model fails with one line, not a crash."""
    if model.backend != "native":
        raise InvalidParameterError(f"{kind} needs the native backend (a Llama-family model)")
    path = Path(draft_model) if draft_model else shipped_head_path(model.key, kind)
    if not path.exists():
        raise ModelLoadError(
            f"no {kind} head for {model.name}" + (f" at {path}" if draft_model else "") +
            f": train one with `specdecode train {kind} --model {model.name}` and pass "
            "--draft-model DIR")
    head = load_head(path, kind)
    target = model.target
    if head.cfg["hidden_size"] != target.embed.shape[1] or (
            head.draft_vocab.numel() and int(head.draft_vocab.max()) >= target.vocab_size):
        raise ModelLoadError(f"the {kind} head at {path} was trained for another model "
                             f"(hidden size {head.cfg['hidden_size']})")
    return head


def draft_lm_head(lm_head: torch.Tensor, draft_vocab: torch.Tensor) -> torch.Tensor:
    """The LM-head rows the drafter scores: [V', H] for a draft vocabulary of V' ids, else all
    [V, H] (a slice copy, so the draft scores stay in fast contiguous memory)."""
    return lm_head[draft_vocab].contiguous() if draft_vocab.numel() else lm_head


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
