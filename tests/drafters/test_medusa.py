"""The `medusa` drafter, on the mock target and a tiny native Llama: its fixed tree is well formed
and greedy output is lossless."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.budget import DraftBudget
from specdecode.core.engine import generate, start
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.medusa import CHOICES, Medusa
from specdecode.drafters.plain import NoDrafter
from specdecode.models.heads import MedusaHeads

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def random_heads(target, num_heads: int = 3, seed: int = 0) -> MedusaHeads:
    torch.manual_seed(seed)
    heads = MedusaHeads({"hidden_size": target.hidden_size, "num_heads": num_heads}).eval()
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_(0, 0.3)
    return heads


def test_every_candidate_path_follows_its_own_prefix():
    for i, path in enumerate(CHOICES):
        assert len(set(CHOICES)) == len(CHOICES)
        assert len(path) == 1 or path[:-1] in CHOICES[:i], path


@pytest.mark.parametrize("num_heads, nodes", [(3, 12), (2, 4), (5, 18)])
def test_medusa_greedy_output_equals_plain_greedy(num_heads, nodes, make_target):
    config = GenerationConfig(30, SamplingParams())
    plain = generate(make_target(12), NoDrafter(), PROMPT, config, None)
    target = make_target(12)
    drafter = Medusa(target, random_heads(target, num_heads))
    result = generate(target, drafter, PROMPT, config, DraftLimit(nodes, num_heads))
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0
    assert max(i for i, n in enumerate(result.stats.drafted_at) if n) < num_heads


def test_medusa_tree_has_one_level_per_head_and_at_most_nodes_nodes(make_target):
    target = make_target(12)
    drafter = Medusa(target, random_heads(target, 2))
    seq = start(target, drafter, PROMPT, GenerationConfig(1), None)
    draft = drafter.propose(seq, DraftBudget(6, 5))
    assert draft.tree.depth == 2 and len(draft.tree) == 6
