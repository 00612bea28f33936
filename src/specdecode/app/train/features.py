"""Teacher-forced target features: h_0..h_{L-1} = the target's final-normed hidden states over a
whole training sequence (one prefill, fp32), what its LM head reads and what a head learns from.

Cached in the output directory as safetensors shards (bf16, keyed by sample id; ~1.2 KB a token on
SmolLM2), each written aside and renamed into place, so a resumed run computes only what is missing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from .data import Sample

FEATURES_DIR = "features"
SHARD_SIZE = 64  # sequences a shard: what an interruption can lose


def extract_features(target, samples: Sequence[Sample], directory: Path,
                     progress: bool = True) -> dict[str, torch.Tensor]:
    """-> {sample id: hidden states [L, H] bf16} for every sample, computing the uncached ones
    with `target.prefill` (a new cache per sequence)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    from tqdm import tqdm

    directory.mkdir(parents=True, exist_ok=True)
    shards = sorted(directory.glob("shard-*.safetensors"))
    cached: set[str] = set()
    for shard in shards:
        with safe_open(str(shard), "pt") as f:
            cached.update(f.keys())
    todo = [s for s in samples if s.id not in cached]
    next_shard = 1 + max((int(s.stem.split("-")[1]) for s in shards), default=-1)
    pending: dict[str, torch.Tensor] = {}
    with tqdm(total=len(samples), initial=len(samples) - len(todo), desc="features",
              unit="seq", disable=not progress) as bar:
        for i, sample in enumerate(todo):
            hidden = target.prefill(target.new_cache(),
                                    torch.tensor(sample.tokens, dtype=torch.long))
            pending[sample.id] = hidden.to(torch.bfloat16).clone()
            if len(pending) == SHARD_SIZE or i == len(todo) - 1:
                path = directory / f"shard-{next_shard:05d}.safetensors"
                save_file(pending, str(path.with_suffix(".tmp")))
                os.replace(path.with_suffix(".tmp"), path)
                next_shard, pending = next_shard + 1, {}
            bar.update(1)
    wanted = {s.id for s in samples}
    features: dict[str, torch.Tensor] = {}
    for shard in sorted(directory.glob("shard-*.safetensors")):
        features.update((k, v) for k, v in load_file(str(shard)).items() if k in wanted)
    return features
