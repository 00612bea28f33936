"""Every drafter's tests run on two targets: the mock (plain torch, no native model; tests/
mock_target.py) and a tiny native Llama."""

from __future__ import annotations

import pytest
from drafter_helpers import V
from mock_target import MockTarget

from specdecode.models.decoder import NativeDecoder


@pytest.fixture(params=["mock", "native"])
def make_target(request, tiny_llama):
    """Factory: make_target(seed, layers=2, max_positions=256) -> a fresh target of this test's
    kind."""
    def make(seed: int = 11, layers: int = 2, max_positions: int = 256):
        if request.param == "mock":
            return MockTarget(vocab=V, layers=layers, max_length=max_positions, seed=seed)
        return NativeDecoder.from_hf(tiny_llama(seed, vocab=V, layers=layers,
                                              max_positions=max_positions))
    return make
