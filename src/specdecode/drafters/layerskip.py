"""`layerskip`: self-speculative drafting (Draft & Verify, Zhang et al. 2024; SWIFT, Xia et al. 2024).

The target drafts for itself by running only a subset of its decoder layers (then its final norm
and LM head), with its own weights and KV cache: the draft pass writes its entries past the
cache's length, and the verification forward overwrites them, so nothing is copied.

Which layers to run is chosen per model by `search_layers` and saved in the model's profile. On a
small model few skip sets draft well enough to pay for themselves; when none beats plain decoding
the profile says so and the drafter proposes nothing (plain decoding) instead of slowing down.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Sequence

import torch

from ..errors import InvalidParameterError
from ..sampling import SamplingParams
from .base import EMPTY_DRAFT, Draft, Drafter, DrafterOptions, draft_chain, register

if TYPE_CHECKING:
    from ..models import LoadedModel

log = logging.getLogger("specdecode")
PROFILE_SECTION = "layerskip"


@register("layerskip")
class LayerSkip(Drafter):
    def __init__(self, target, layers: Sequence[int] | None, k: int = 4, note: str = "") -> None:
        self.target = target
        self.layers = None if layers is None else tuple(layers)
        self._k = k
        self.note = note

    @classmethod
    def create(cls, model: "LoadedModel", options: DrafterOptions) -> "LayerSkip":
        if model.backend != "native":
            raise InvalidParameterError("layerskip needs the native backend (a Llama-family model)")
        if options.layers is not None:
            return cls(model.target, validate_layers(options.layers, model.target.num_layers))
        from ..profiles import load_profile, save_profile_section

        profile = load_profile(model.key).get(PROFILE_SECTION)
        if profile is None:
            log.warning("no layer-skip profile for %s yet: searching once (saved for next time)",
                        model.name)
            profile = search_layers(model)
            save_profile_section(model.key, PROFILE_SECTION, profile)
        if profile["layers"] is None:
            note = (f"no skip set beat plain decoding on this model (best measured "
                    f"{profile['best_speedup']:.2f}x); decoding plainly")
            log.warning("layerskip: %s", note)
            return cls(model.target, None, k=0, note=note)  # k = 0: plain decoding steps
        return cls(model.target, profile["layers"], profile["k"])

    @property
    def default_k(self) -> int:
        return self._k

    def propose(self, context: torch.Tensor, k: int, params: SamplingParams, generator) -> Draft:
        if self.layers is None:
            return EMPTY_DRAFT
        start = self.target.length  # == len(context) - 1: the pending token is not cached yet
        forward = lambda tokens: self.target.forward(tokens, layers=self.layers)  # noqa: E731
        draft = draft_chain(forward, context[-1:], k, params, generator)
        self.target.rollback(start)
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


def skip_windows(num_layers: int, widths=(2, 4, 6, 8), stride: int = 2) -> list[tuple[int, ...]]:
    """Candidate layer subsets: the full model minus one contiguous window of middle layers.

    The first two and last two layers are always kept (measured here: they matter most)."""
    candidates = []
    for width in widths:
        for start in range(2, num_layers - 2 - width + 1, stride):
            skipped = set(range(start, start + width))
            candidates.append(tuple(i for i in range(num_layers) if i not in skipped))
    return candidates


def estimated_speedup(agreement: float, cost: float, k: int) -> float:
    """Expected speed-up of a chain drafter with per-token acceptance α and relative cost c.

    Tokens per step E = (1 − α^(k+1)) / (1 − α); time per step ≈ k·c + 1 (verification of k + 1
    tokens costs about one plain step on this path). Speed-up = E / (k·c + 1)."""
    expected = k + 1 if agreement >= 1 else (1 - agreement ** (k + 1)) / (1 - agreement)
    return expected / (k * cost + 1)


def search_layers(
    model: "LoadedModel",
    prompts: list[list[int]] | None = None,
    new_tokens: int = 32,
    candidates_to_time: int = 3,
    progress: bool = True,
) -> dict:
    """Choose the layer subset that maximises measured speed on a few calibration prompts.

    1. the full model answers each prompt greedily (reference tokens);
    2. every candidate subset (`skip_windows`) is scored by teacher-forced agreement α with those
       tokens; its best k and `estimated_speedup` follow;
    3. the best few candidates are timed for real against plain decoding, and the fastest wins.
    Returns the profile section: {"layers": [...] or None when nothing beats plain, "k", ...}.
    """
    from tqdm import tqdm

    from ..engine import GenerationConfig, generate
    from ..sampling import SamplingParams
    from .base import DraftLength, create_drafter

    target = model.target
    if prompts is None:
        from ..bench.specbench import calibration_prompts

        prompts = [model.encode_prompt(p) for p in calibration_prompts()]
    config = GenerationConfig(max_new_tokens=new_tokens, sampling=SamplingParams(), seed=0)
    plain = create_drafter("ar", model, DrafterOptions())

    def timed(drafter, k):
        seconds, outputs = 0.0, []
        for prompt in prompts:
            result = generate(target, drafter, prompt, config, DraftLength(k) if k else None,
                              model.eos_token_ids)
            seconds += result.stats.wall_seconds
            outputs.append(result.token_ids)
        return seconds, outputs

    plain_seconds, references = timed(plain, 0)
    sequences = [(p + r, len(p)) for p, r in zip(prompts, references) if r]
    scored = []
    for layers in tqdm(skip_windows(target.num_layers), desc="layerskip: scoring skip sets",
                       disable=not progress):
        agree = total = 0
        for tokens, prompt_len in sequences:
            target.reset()
            logits = target.forward(torch.tensor(tokens[:-1]), layers=layers)
            guesses = logits[prompt_len - 1 :].argmax(-1)
            agree += int((guesses == torch.tensor(tokens[prompt_len:])).sum())
            total += len(tokens) - prompt_len
        alpha = agree / max(total, 1)
        cost = len(layers) / target.num_layers
        k = max(range(1, 9), key=lambda k: estimated_speedup(alpha, cost, k))
        scored.append((estimated_speedup(alpha, cost, k), alpha, k, layers))
    target.reset()
    scored.sort(reverse=True)
    best = {"speedup": 0.0}
    for estimate, alpha, k, layers in tqdm(scored[:candidates_to_time],
                                           desc="layerskip: timing the best", disable=not progress):
        seconds, outputs = timed(LayerSkip(target, layers, k), k)
        if outputs != references:  # lossless by construction; only a numerical tie can do this
            log.warning("layerskip %s changed a greedy output (numerical tie?)", layers)
        speedup = plain_seconds / seconds
        if speedup > best["speedup"]:
            best = {"speedup": speedup, "layers": list(layers), "k": k, "agreement": alpha,
                    "estimate": estimate}
    gain = best["speedup"] > 1.0
    return {
        "layers": best["layers"] if gain else None,
        "k": best["k"],
        "best_speedup": round(best["speedup"], 3),
        "best_layers": best["layers"],
        "agreement": round(best["agreement"], 3),
        "calibration": {"prompts": len(prompts), "new_tokens": new_tokens,
                        "candidates": len(scored), "date": time.strftime("%Y-%m-%d")},
    }
