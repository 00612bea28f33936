"""Reproducible unseeded requests: a request's `seed` keys its draws by position
(`core.verify.verify_seeded`), so the distribution tests of recursive rejection sampling
(`core.verify.verify_sampling`) send requests without one and start each request's generator
at a seed of theirs instead."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any
from unittest.mock import patch

import torch

import specdecode.core.engine
from specdecode.core.batch import Request, generate_batch
from specdecode.core.engine import generate


def generators_from(seeds: Iterable[int]):
    """A context in which the engine's requests get generators started at `seeds`, in the order
    they are admitted."""
    seeds = iter(seeds)
    return patch.object(specdecode.core.engine, "new_generator",
                        lambda _seed, device: torch.Generator(device).manual_seed(next(seeds)))


def unseeded_outcomes(target, drafter, prompt: list[int], config, limit: Callable[[], Any],
                      seeds: Iterable[int], batched: bool = False) -> Counter:
    """Counts of the outputs of one unseeded request run once a seed (generators started at
    `seeds`), alone or eight at a time through `core.batch`; `limit()` makes each run's caps."""
    seeds = list(seeds)
    with generators_from(seeds):
        if batched:
            results = generate_batch(target, [Request(prompt, config, drafter, limit())
                                              for _ in seeds], max_batch=8)
        else:
            results = [generate(target, drafter, prompt, config, limit()) for _ in seeds]
    return Counter(tuple(r.token_ids) for r in results)
