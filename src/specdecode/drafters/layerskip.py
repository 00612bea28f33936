"""`layerskip`: self-speculative drafting (Draft & Verify, Zhang et al. 2024; SWIFT, Xia et al. 2024).

The target drafts for itself by running only a subset of its decoder layers (then its final norm
and LM head), with its own weights and KV cache: the draft pass writes its entries past the
cache's length, and the verification forward overwrites them, so nothing is copied.

Which layers to run is chosen per model by `specdecode tune` (`app/layer_search.py`) and saved in
the model's profile, or given with --layers. On a small model few skip sets draft well enough to
pay for themselves; when none beats plain decoding the profile says so, and without a profile
nothing has been searched: in both cases the drafter proposes nothing (plain decoding) instead of
slowing down, and says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..core.target import LayerSkipTarget
from ..errors import InvalidParameterError
from ..profiles import load_profile
from .chain import draft_chain
from .registry import option, register

log = logging.getLogger("specdecode")
PROFILE_SECTION = "layerskip"


def parse_layers(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2); ValueError for anything else."""
    return tuple(int(x) for x in text.split(","))


@register("layerskip")
class LayerSkip(Drafter):
    requires = (LayerSkipTarget,)

    @dataclass(frozen=True)
    class Options:
        layers: tuple[int, ...] | None = option(
            None, "comma-separated decoder layers the draft pass runs (default: the model's "
                  "profile from `specdecode tune`)", parse=parse_layers)

    def __init__(self, target: LayerSkipTarget, layers: Sequence[int] | None, length: int = 4,
                 note: str = "") -> None:
        self.target = target
        self.layers = None if layers is None else tuple(layers)
        self.length = length  # draft length when the user sets no cap (the profile's)
        self.note = note

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        """Only a searched skip set that beat plain decoding is worth timing."""
        return [{}] if (load_profile(model.key).get(PROFILE_SECTION) or {}).get("layers") else []

    @classmethod
    def create(cls, model, options: Options) -> "LayerSkip":
        reason = cls.unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        if options.layers is not None:
            return cls(model.target, validate_layers(options.layers, model.target.num_layers))
        profile = load_profile(model.key).get(PROFILE_SECTION)
        if profile is None or profile["layers"] is None:
            note = ("no layer-skip profile for this model: run `specdecode tune` or give --layers"
                    if profile is None else
                    f"no skip set beat plain decoding on this model (best measured "
                    f"{profile['best_speedup']:.2f}x)")
            log.warning("layerskip: %s; decoding plainly", note)
            return cls(model.target, None, length=0, note=note + "; decoding plainly")
        return cls(model.target, profile["layers"], profile["k"])

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(self.length, self.length)

    def propose(self, seq, budget: DraftBudget) -> Draft:
        if self.layers is None:
            return EMPTY_DRAFT
        start = seq.cache.length  # == len(context) - 1: the pending token is not cached yet
        draft = draft_chain(
            lambda tokens: self.target.forward_layers(seq.cache, tokens, self.layers),
            seq.context[-1:], min(budget.nodes, budget.depth), seq.sampling, seq.draw,
            constraint=seq.constraint)  # drafts under the sequence's grammar
        seq.cache.rollback(start)
        return draft

    def describe(self) -> str:
        if self.layers is None:
            return f"layerskip ({self.note})"
        return f"layerskip ({len(self.layers)}/{self.target.num_layers} layers)"


def validate_layers(layers: Sequence[int], num_layers: int) -> tuple[int, ...]:
    chosen = tuple(sorted(set(layers)))
    if not chosen or chosen[0] < 0 or chosen[-1] >= num_layers:
        raise InvalidParameterError(
            f"--layers must name layers in 0..{num_layers - 1}, got {list(layers)}"
        )
    return chosen
