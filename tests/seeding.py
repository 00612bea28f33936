"""Reproducible unseeded requests: a request's `seed` keys its draws by position
(`core.verify.verify_seeded`), so the distribution tests of recursive rejection sampling
(`core.verify.verify_sampling`) send requests without one and start each request's generator
at a seed of theirs instead."""

from __future__ import annotations

from collections.abc import Iterable
from unittest.mock import patch

import torch

import specdecode.core.engine


def generators_from(seeds: Iterable[int]):
    """A context in which the engine's requests get generators started at `seeds`, in the order
    they are admitted."""
    seeds = iter(seeds)
    return patch.object(specdecode.core.engine, "new_generator",
                        lambda _seed, device: torch.Generator(device).manual_seed(next(seeds)))
