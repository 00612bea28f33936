"""`core/sequence.py`: the draft caps (adaptive or not) and a sequence's own state."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.budget import DraftBudget
from specdecode.core.sequence import DraftLimit, new_generator
from specdecode.errors import InvalidParameterError


def test_fixed_caps_never_change():
    limit = DraftLimit(6, 4)
    for depth, accepted in [(4, 4), (4, 0), (3, 1)]:
        limit.update(depth, accepted)
        assert (limit.nodes, limit.depth) == (6, 4)


def test_adaptive_depth_adds_two_after_full_acceptance_and_drops_one_after_rejection():
    limit = DraftLimit(20, 4, adaptive=True, max_depth=9)
    steps = [((4, 4), 6), ((6, 6), 8), ((8, 8), 9), ((9, 9), 9), ((9, 3), 8), ((8, 0), 7)]
    for (depth, accepted), expected in steps:
        limit.update(depth, accepted)
        assert limit.depth == expected
    for _ in range(10):
        limit.update(limit.depth, 0)
    assert limit.depth == 1


def test_adaptive_depth_ignores_steps_without_a_draft():
    limit = DraftLimit(4, 4, adaptive=True)
    limit.update(0, 0)
    assert limit.depth == 4


def test_adaptive_depth_may_grow_at_least_to_its_start():
    assert DraftLimit(20, 20, adaptive=True, max_depth=16).max_depth == 20


def test_a_steps_budget_is_the_caps_within_the_room_left():
    limit = DraftLimit(10, 6)
    assert limit.budget(100) == DraftBudget(10, 6)
    assert limit.budget(3) == DraftBudget(3, 3)
    assert limit.budget(0) == DraftBudget(0, 0)


def test_caps_below_one_are_refused():
    with pytest.raises(InvalidParameterError):
        DraftLimit(0, 3)
    with pytest.raises(InvalidParameterError):
        DraftLimit(3, 0)


def test_a_seeded_generator_repeats_its_draws_and_an_unseeded_one_does_not():
    a, b = new_generator(7, torch.device("cpu")), new_generator(7, torch.device("cpu"))
    assert torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=b))
    c, d = new_generator(None, torch.device("cpu")), new_generator(None, torch.device("cpu"))
    assert not torch.equal(torch.rand(5, generator=c), torch.rand(5, generator=d))
