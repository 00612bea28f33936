"""The draft budget: of every sequence's draft, the step scores the nodes that raise its expected
tokens per second; speculation shrinks as the batch grows."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.budget import allocate
from specdecode.core.cost import StepCost


def chances(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def test_a_lone_sequence_scores_the_nodes_whose_chance_pays_for_its_row():
    # row cost 0.2: (1 + 0.9) / 1.2 > (1 + 0.9 + 0.5) / 1.4 > 1 / 1 ... the third node (0.1) loses
    nodes = chances(0.9, 0.5, 0.1)
    assert allocate(StepCost.linear(0.2), [(nodes, 3, 64)]) == [2]
    assert allocate(StepCost.linear(0.0), [(nodes, 3, 64)]) == [3]  # free rows: everything
    assert allocate(StepCost.linear(1.0), [(nodes, 3, 64)]) == [0]  # a row costs a step


def test_the_count_is_the_best_prefix_even_past_a_dip():
    # the second node alone does not pay at 0.3, the second and third together do
    cost = StepCost((1, 2, 3, 4), (1.0, 1.3, 1.6, 1.7))
    assert allocate(cost, [(chances(0.6, 0.35, 0.34), 3, 64)]) == [3]


def test_drafts_without_chances_are_scored_whole():
    assert allocate(StepCost.linear(0.5), [(None, 5, 64), (chances(0.2), 1, 64)]) == [5, 0]


def test_speculation_shrinks_as_the_batch_grows():
    cost = StepCost.linear(0.1)
    draft = (chances(0.7, 0.45, 0.3, 0.2), 4, 64)
    alone = sum(allocate(cost, [draft]))
    per_sequence = [sum(allocate(cost, [draft] * b)) / b for b in (1, 2, 4, 8, 16)]
    assert per_sequence[0] == alone > 0
    assert per_sequence == sorted(per_sequence, reverse=True) and per_sequence[-1] < alone


def test_the_likeliest_nodes_of_the_whole_batch_win():
    cost = StepCost.linear(0.1)
    sure, unsure = (chances(0.95, 0.9), 2, 64), (chances(0.15, 0.1), 2, 64)
    assert allocate(cost, [unsure, sure, unsure, sure]) == [0, 2, 0, 2]


def test_longer_contexts_make_rows_dearer():
    cost = StepCost((1, 2), (1.0, 1.1), context=64, per_cached=0.0002)
    draft = chances(0.3, 0.2)
    assert allocate(cost, [(draft, 2, 64)]) == [2]
    assert allocate(cost, [(draft, 2, 4096)]) == [0]


def test_a_sequences_rows_fit_one_row_invariant_attention_call():
    from specdecode.core.budget import MAX_DRAFT_NODES
    from specdecode.core.sequence import DraftLimit
    from specdecode.errors import InvalidParameterError
    from specdecode.kernels import ROW_INVARIANT_ROWS

    assert MAX_DRAFT_NODES + 1 == ROW_INVARIANT_ROWS
    DraftLimit(MAX_DRAFT_NODES, 8)
    with pytest.raises(InvalidParameterError, match="max-draft-nodes"):
        DraftLimit(MAX_DRAFT_NODES + 1, 8)
