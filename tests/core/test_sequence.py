"""`core/sequence.py`: the adaptive draft length and a sequence's own state."""

from __future__ import annotations

import torch

from specdecode.core.sequence import DraftLength, new_generator


def test_fixed_draft_length_never_changes():
    length = DraftLength(4)
    for drafted, accepted in [(4, 4), (4, 0), (3, 1)]:
        length.update(drafted, accepted)
        assert length.k == 4


def test_adaptive_draft_length_adds_two_after_full_acceptance_and_drops_one_after_rejection():
    length = DraftLength(4, adaptive=True, k_min=2, k_max=9)
    steps = [((4, 4), 6), ((6, 6), 8), ((8, 8), 9), ((9, 9), 9), ((9, 3), 8), ((8, 0), 7)]
    for (drafted, accepted), k in steps:
        length.update(drafted, accepted)
        assert length.k == k
    for _ in range(10):
        length.update(length.k, 0)
    assert length.k == 2


def test_adaptive_draft_length_ignores_steps_without_a_draft():
    length = DraftLength(4, adaptive=True)
    length.update(0, 0)
    assert length.k == 4


def test_adaptive_draft_length_clamps_initial_k():
    assert DraftLength(20, adaptive=True, k_max=16).k == 16
    assert DraftLength(1, adaptive=True, k_min=3, k_max=5).k == 3


def test_a_seeded_generator_repeats_its_draws_and_an_unseeded_one_does_not():
    a, b = new_generator(7, torch.device("cpu")), new_generator(7, torch.device("cpu"))
    assert torch.equal(torch.rand(5, generator=a), torch.rand(5, generator=b))
    c, d = new_generator(None, torch.device("cpu")), new_generator(None, torch.device("cpu"))
    assert not torch.equal(torch.rand(5, generator=c), torch.rand(5, generator=d))
