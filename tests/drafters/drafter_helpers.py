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


def scored(drafter, seq, budget, row_cost: float = 0.0, context: int = 64):
    """What a step scores of the drafter's proposal within `budget` when each row beyond the
    first costs `row_cost` of a step (`core.budget`)."""
    from specdecode.core.budget import allocate
    from specdecode.core.cost import StepCost

    draft = drafter.propose(seq, budget)
    n = allocate(StepCost.linear(row_cost), [(draft.chances, len(draft), context)])[0]
    return draft.best(n)
