"""Which decoder layers `layerskip` should run on a model: part of `specdecode tune`.

Candidates are the full model minus one contiguous window of middle layers; each is scored by how
often its greedy guess matches the full model's on a few calibration prompts, and the best few are
timed for real against plain decoding. The result (or "none beats plain decoding") is the model's
`layerskip` profile section, which the drafter reads.
"""

from __future__ import annotations

import logging
import time

import torch

from ..core.engine import generate
from ..core.sampling import SamplingParams
from ..core.sequence import DraftLimit, GenerationConfig
from ..core.target import LayerSkipTarget
from ..drafters.layerskip import PROFILE_SECTION, LayerSkip
from ..drafters.plain import NoDrafter
from ..models import LoadedModel
from ..profiles import load_profile, save_profile_section

log = logging.getLogger("specdecode")


def search_layers_once(model: LoadedModel, redo: bool = False,
                       prompts: list[list[int]] | None = None) -> dict | None:
    """Search (on `prompts`, default Spec-Bench calibration prompts) and save the model's
    layer-skip profile unless it has one (or `redo`); None when the target cannot skip layers."""
    if not isinstance(model.target, LayerSkipTarget):
        return None
    profile = load_profile(model.key).get(PROFILE_SECTION)
    if profile is None or redo:
        profile = search_layers(model, prompts)
        save_profile_section(model.key, PROFILE_SECTION, profile)
    return profile


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
    model: LoadedModel,
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

    from .bench.specbench import calibration_prompts

    target = model.target
    if prompts is None:
        prompts = [model.encode_prompt(p) for p in calibration_prompts()]
    config = GenerationConfig(max_new_tokens=new_tokens, sampling=SamplingParams(), seed=0)
    plain = NoDrafter()

    def timed(drafter, k):
        seconds, outputs = 0.0, []
        for prompt in prompts:
            result = generate(target, drafter, prompt, config, DraftLimit(k, k) if k else None,
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
            logits = target.forward_layers(target.new_cache(), torch.tensor(tokens[:-1]), layers)
            guesses = logits[prompt_len - 1 :].argmax(-1)
            agree += int((guesses == torch.tensor(tokens[prompt_len:])).sum())
            total += len(tokens) - prompt_len
        alpha = agree / max(total, 1)
        cost = len(layers) / target.num_layers
        k = max(range(1, 9), key=lambda k: estimated_speedup(alpha, cost, k))
        scored.append((estimated_speedup(alpha, cost, k), alpha, k, layers))
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
    if not scored:  # too few layers to leave any out
        best = {"speedup": 0.0, "layers": None, "k": 1, "agreement": 0.0}
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
