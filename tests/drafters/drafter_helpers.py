"""What the drafter tests share: the vocabulary size of their targets and a loaded model around a
target (what drafters' `create` reads)."""

from __future__ import annotations

from mock_target import MockModel, MockTarget

from specdecode.models.loader import LoadedModel

V = 16  # a small vocabulary: random heads' guesses are often right, so paths get accepted


def as_model(target, key: str = "tiny"):
    if isinstance(target, MockTarget):
        return MockModel(target, key)
    return LoadedModel(key, key, None, target, "native", frozenset(), key)
