"""`specdecode tune`: measure a few drafting configurations on this model and machine, and save the
fastest lossless one as the model's defaults (profile section "tune"), which `generate`, `bench` and
`serve` then use whenever the user does not choose.

Tuning prompts are the *last* questions of each Spec-Bench group, so the benchmark (which takes
the first ones) confirms the choice on prompts the tuner never saw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .drafters import DrafterOptions
from .drafters.learned import shipped_head_path
from .errors import SpecDecodeError
from .models import LoadedModel
from .pipeline import DEFAULT_METHOD, SpecDecoder
from .profiles import load_profile

PROFILE_SECTION = "tune"
# timings of one configuration move this much between runs here (2 cores): a configuration must
# beat the built-in default by more than this to replace it
NOISE = 0.03


@dataclass(frozen=True)
class Candidate:
    method: str
    k: int | None = None  # None: the method's own default (and for `ar`)
    ngram_max: int | None = None  # `lookup` only

    @property
    def label(self) -> str:
        parts = [self.method] + ([f"k={self.k}"] if self.k else [])
        return " ".join(parts + ([f"ngram-max={self.ngram_max}"] if self.ngram_max else []))


@dataclass
class TunedDefaults:
    method: str
    k: int | None = None
    ngram_max: int | None = None
    speedup: float = 1.0  # measured over plain decoding on the tuning prompts
    measured: dict[str, float] = field(default_factory=dict)  # label -> speed-up over plain


def candidates(model: LoadedModel, draft_model: str | None) -> list[Candidate]:
    """What `tune` measures: plain decoding, the built-in default (DEFAULT_METHOD with its own
    settings), prompt lookup over K and n-gram size, layerskip when the model's searched profile
    found a skip set, a draft model when one is given, eagle and medusa when heads ship for it."""
    default = Candidate(DEFAULT_METHOD)
    found = [Candidate("ar"), default]
    found += [Candidate("lookup", k, n) for n in (3, 5) for k in (3, 5, 7, 10)
              if (k, n) != (7, 5)]  # lookup's own default (k = 7, ngram-max = 5) is `default`
    if (load_profile(model.key).get("layerskip") or {}).get("layers"):
        found.append(Candidate("layerskip"))
    if draft_model:
        found += [Candidate("draft", k) for k in (2, 4, 6)]
    found += [Candidate(kind) for kind in ("eagle", "medusa")
              if shipped_head_path(model.key, kind).is_dir()]
    return found


def tune(model: LoadedModel, prompts: list[list[int]], draft_model: str | None = None,
         max_new_tokens: int = 128, progress=None) -> TunedDefaults:
    """Time every candidate on every prompt (interleaved, greedy) and return the fastest whose
    outputs equal plain decoding's; the built-in default wins unless beaten by more than NOISE.
    `progress(n)` is called after each run."""
    options = {c: DrafterOptions(draft_model if c.method == "draft" else None, None,
                                 c.ngram_max or DrafterOptions.ngram_max)
               for c in candidates(model, draft_model)}
    decoders = {c: SpecDecoder(model, c.method, o, c.k) for c, o in options.items()}
    seconds = dict.fromkeys(decoders, 0.0)
    lossless = dict.fromkeys(decoders, True)
    for d in decoders.values():  # one-time allocations are not part of any measurement
        d.generate(prompts[0], max_new_tokens=2)
    for ids in prompts:
        reference = None
        for c, d in decoders.items():
            started = time.perf_counter()
            result = d.generate(ids, max_new_tokens=max_new_tokens)
            seconds[c] += time.perf_counter() - started
            reference = result.token_ids if reference is None else reference  # `ar` runs first
            lossless[c] &= result.token_ids == reference
            if progress:
                progress(1)
    plain = seconds[Candidate("ar")]
    measured = {c.label: plain / s for c, s in seconds.items()}
    if not all(lossless.values()):
        bad = ", ".join(c.label for c, ok in lossless.items() if not ok)
        raise SpecDecodeError(f"tune: {bad} changed the greedy output; please report this bug")
    best = min(seconds, key=seconds.get)
    if seconds[Candidate(DEFAULT_METHOD)] <= seconds[best] * (1 + NOISE):
        best = Candidate(DEFAULT_METHOD)
    return TunedDefaults(best.method, best.k, best.ngram_max, plain / seconds[best], measured)


def tuned_defaults(model: LoadedModel) -> TunedDefaults | None:
    """The model's saved tuning result, if `specdecode tune` ran for it."""
    section = load_profile(model.key).get(PROFILE_SECTION)
    return TunedDefaults(**section) if section else None
