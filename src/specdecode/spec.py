"""What runs, from what a user asked for: `resolve(model, method, ...) -> DecodingSpec`.

`generate`, `serve`, `bench` and `tune` all resolve through here, so the checks of the values, the
model's tuned profile (`specdecode tune`), the defaults and whether a drafter can run on the
model are said once.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from .core.budget import MAX_DRAFT_NODES
from .drafters import DRAFTERS, drafter_class, make_options
from .errors import InvalidParameterError
from .models import LoadedModel
from .models.timing import machine_key
from .profiles import load_profile

# The fastest lossless method measured on the default model, and on a model whose alias names a
# draft model (the Qwen2.5-Coder 1.5B with its 0.5B; docs/benchmarks/methods, qwen-pair).
DEFAULT_METHOD = "lookup"
DEFAULT_WITH_DRAFTER = "draft"
TUNED_SECTION = "tune"  # the profile section `specdecode tune` writes
_STALE_WARNED: set[str] = set()  # models whose tuned profile was found stale, warned once


@dataclass(frozen=True)
class DecodingSpec:
    method: str
    options: Any  # the drafter's own `Options`
    max_draft_nodes: int | None = None  # caps on each step's draft; None: the drafter's default
    max_draft_depth: int | None = None
    adaptive: bool = False  # the depth cap adapts per step within 1..max depth
    note: str | None = None  # where defaults came from (the tuned profile), for reports

    def label(self) -> str:
        """'lookup max-draft-depth=5 ngram-max=3': the method and what differs from its
        defaults."""
        defaults = asdict(type(self.options)())
        caps = [f"{name}={value}" for name, value in (("max-draft-nodes", self.max_draft_nodes),
                                                      ("max-draft-depth", self.max_draft_depth))
                if value]
        changed = [f"{name.replace('_', '-')}={value}" for name, value in
                   asdict(self.options).items() if value != defaults[name]]
        return " ".join([self.method] + caps + changed)


def tuned_defaults(model: LoadedModel) -> dict | None:
    """The model's tuned configuration: {"method", "max_draft_nodes", "max_draft_depth",
    "options", "speedup", "measured"}; None where there is none or it was measured on other
    kernels (another path, thread count or build) or another CPU: which method is fastest is a
    fact of those, so a profile kept across a kernel upgrade or carried to another machine would
    choose by numbers that no longer hold (said once, as a warning)."""
    section = load_profile(model.key).get(TUNED_SECTION)
    if not section:
        return None
    here = machine_key(model)
    if section.get("machine", here) != here:  # profiles written before the key: kept as they are
        if model.key not in _STALE_WARNED:
            _STALE_WARNED.add(model.key)
            logging.getLogger("specdecode").warning(
                "the tuned profile was measured on %s, not here (%s): built-in defaults until "
                "`specdecode tune` runs again", section["machine"], here)
        return None
    if "options" not in section:  # written before options were per drafter
        section = {**section, "options": {"ngram_max": section.get("ngram_max")}}
    if "k" in section:  # written when one draft length stood for the depth
        section = {**section, "max_draft_depth": section["k"]}
    return section


def resolve(model: LoadedModel, method: str | None = None, *, max_draft_nodes: int | None = None,
            max_draft_depth: int | None = None, adaptive: bool = False,
            options: dict[str, Any] | None = None, tuned: bool = True) -> DecodingSpec:
    """The spec for `method` (default: the tuned profile's, else `default_method`) with the user's
    values: the draft caps and the drafter options they set (by field name, None = unset;
    options of other drafters are ignored). What the user left unset comes from the model's tuned
    profile when it tuned this method (tuned=False: never), else from the drafter's defaults.
    Raises a one-line SpecDecodeError for a bad value or a drafter that cannot run on this
    model."""
    values = dict(options or {})
    check_caps(max_draft_nodes, max_draft_depth)
    profile = tuned_defaults(model) if tuned else None
    method = method or (profile["method"] if profile and profile["method"] in DRAFTERS
                        else default_method(model))
    cls = drafter_class(method)
    note = None
    if profile and profile["method"] == method:
        max_draft_nodes = max_draft_nodes or profile.get("max_draft_nodes")
        max_draft_depth = max_draft_depth or profile.get("max_draft_depth")
        for name, value in profile["options"].items():
            if values.get(name) is None:
                values[name] = value
        note = (f"defaults from the tuned profile: {profile.get('label', method)}, "
                f"{profile.get('speedup', 1.0):.2f}x over plain when tuned")
    drafter_options = make_options(method, values)
    reason = cls.unavailable(model, drafter_options)
    if reason:
        raise InvalidParameterError(reason)
    return DecodingSpec(method, drafter_options, max_draft_nodes, max_draft_depth, adaptive, note)


def default_method(model: LoadedModel) -> str:
    """The built-in default for this model (without a tuned profile)."""
    return DEFAULT_WITH_DRAFTER if getattr(model, "drafter", None) else DEFAULT_METHOD


def check_options(method: str | None, max_draft_nodes: int | None, max_draft_depth: int | None,
                  options: dict[str, Any]) -> None:
    """The checks that need no model, so that bad values fail before one loads."""
    check_caps(max_draft_nodes, max_draft_depth)
    for name in [method] if method else sorted(DRAFTERS):
        make_options(name, options)


def check_caps(max_draft_nodes: int | None, max_draft_depth: int | None) -> None:
    for name, value in (("max-draft-nodes", max_draft_nodes), ("max-draft-depth", max_draft_depth)):
        if value is not None and value < 1:
            raise InvalidParameterError(f"--{name} must be >= 1, got {value}")
    if max_draft_nodes is not None and max_draft_nodes > MAX_DRAFT_NODES:
        raise InvalidParameterError(f"--max-draft-nodes must be <= {MAX_DRAFT_NODES} (one step's "
                                    f"rows for a sequence), got {max_draft_nodes}")
