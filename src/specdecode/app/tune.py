"""`specdecode tune`: measure drafting configurations on this model and machine, and save the
fastest lossless one as the model's defaults (profile section "tune"), which `resolve` (and so
`generate`, `bench` and `serve`) uses whenever the user does not choose. Before that, the model's
layer-skip profile is searched if it has none (`layer_search.py`).

What is measured: plain decoding, the built-in default, and every registered drafter's
`tune_candidates` that can run on the model. Tuning prompts are the *last* questions of each
Spec-Bench group, so the benchmark (which takes the first ones) confirms the choice on prompts the
tuner never saw.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from ..drafters import DRAFTERS, make_options
from ..errors import SpecDecodeError
from ..models import LoadedModel
from ..models.timing import machine_key
from ..pipeline import SpecDecoder
from ..spec import TUNED_SECTION, DecodingSpec, default_method, resolve

PROFILE_SECTION = TUNED_SECTION
# timings of one configuration move this much between runs here (2 cores): a configuration must
# beat the built-in default by more than this to replace it
NOISE = 0.03


def candidates(model: LoadedModel, draft_model: str | None) -> list[DecodingSpec]:
    """Plain decoding first (the reference), the built-in default second, then every drafter's
    candidates that can run here, each once."""
    found = [resolve(model, "ar", tuned=False),
             resolve(model, default_method(model), tuned=False)]
    for method in sorted(DRAFTERS):
        cls = DRAFTERS[method]
        for variant in cls.tune_candidates(model, draft_model):
            values = dict(variant)
            nodes = values.pop("max_draft_nodes", None)
            depth = values.pop("max_draft_depth", None)
            if cls.unavailable(model, make_options(method, values)):
                continue
            spec = resolve(model, method, max_draft_nodes=nodes, max_draft_depth=depth,
                           options=values, tuned=False)
            if spec.label() not in {s.label() for s in found}:
                found.append(spec)
    return found


def tune(model: LoadedModel, prompts: list[list[int]], draft_model: str | None = None,
         max_new_tokens: int = 128, progress=None) -> dict:
    """Time every candidate on every prompt (interleaved, greedy) and return the profile section
    of the fastest whose outputs equal plain decoding's; the built-in default wins unless beaten
    by more than NOISE. `progress(n)` is called after each run."""
    decoders = [SpecDecoder(model, spec) for spec in candidates(model, draft_model)]
    seconds = [0.0] * len(decoders)
    lossless = [True] * len(decoders)
    for d in decoders:  # one-time allocations are not part of any measurement
        d.generate(prompts[0], max_new_tokens=2)
    for ids in prompts:
        reference = None
        for i, d in enumerate(decoders):
            started = time.perf_counter()
            result = d.generate(ids, max_new_tokens=max_new_tokens)
            seconds[i] += time.perf_counter() - started
            reference = result.token_ids if reference is None else reference  # `ar` runs first
            lossless[i] &= result.token_ids == reference
            if progress:
                progress(1)
    labels = [d.spec.label() for d in decoders]
    if not all(lossless):
        bad = ", ".join(label for label, ok in zip(labels, lossless) if not ok)
        raise SpecDecodeError(f"tune: {bad} changed the greedy output; please report this bug")
    best = min(range(len(decoders)), key=seconds.__getitem__)
    if seconds[1] <= seconds[best] * (1 + NOISE):  # candidates()[1] is the built-in default
        best = 1
    spec = decoders[best].spec
    return {"method": spec.method, "max_draft_nodes": spec.max_draft_nodes,
            "max_draft_depth": spec.max_draft_depth, "options": asdict(spec.options),
            "label": labels[best], "speedup": round(seconds[0] / seconds[best], 3),
            "measured": {label: round(seconds[0] / s, 3) for label, s in zip(labels, seconds)},
            "kernels": model.kernels, "machine": machine_key(model),
            "date": time.strftime("%Y-%m-%d")}
