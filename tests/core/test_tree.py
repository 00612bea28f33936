"""TokenTree: parents, depths, children, positions and the tree-attention mask."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.tree import ROOT, TokenTree

#        root
#       /    \
#     n0(5)  n1(6)
#     /  \      \
#  n2(7) n3(8)  n4(9)
#    |
#  n5(1)
TREE = TokenTree(torch.tensor([5, 6, 7, 8, 9, 1]), torch.tensor([ROOT, ROOT, 0, 0, 1, 2]))


def test_depths_count_levels_below_the_root():
    assert TREE.depths.tolist() == [1, 1, 2, 2, 2, 3]
    assert TREE.depth == 3


def test_children_are_listed_per_row_in_draft_order():
    assert TREE.children == [[0, 1], [2, 3], [4], [5], [], [], []]


def test_rows_sit_at_start_plus_depth():
    assert TREE.row_positions(10).tolist() == [10, 11, 11, 12, 12, 12, 13]


def test_each_row_attends_to_itself_and_its_ancestors_only():
    mask = TREE.row_ancestors
    allowed = {0: {0}, 1: {0, 1}, 2: {0, 2}, 3: {0, 1, 3}, 4: {0, 1, 4}, 5: {0, 2, 5}, 6: {0, 1, 3, 6}}
    for row, cols in allowed.items():
        assert set(mask[row].nonzero().flatten().tolist()) == cols


def test_attention_mask_lets_every_row_see_the_whole_cached_prefix():
    positions, mask = TREE.attention(start=4)
    assert mask.shape == (7, 11)
    assert mask[:, :4].all()
    assert torch.equal(mask[:, 4:], TREE.row_ancestors)
    assert torch.equal(positions, TREE.row_positions(4))


def test_a_chain_is_the_one_branch_tree_with_a_causal_mask():
    chain = TokenTree.chain(torch.tensor([4, 2, 7]))
    assert chain.is_chain and not TREE.is_chain
    assert chain.parents.tolist() == [ROOT, 0, 1]
    assert torch.equal(chain.row_ancestors, torch.ones(4, 4, dtype=torch.bool).tril())
    assert chain.depth == 3


def test_parents_must_point_backwards():
    with pytest.raises(ValueError, match="parents must point to the root or an earlier node"):
        TokenTree(torch.tensor([1, 2]), torch.tensor([1, ROOT]))


def test_path_tokens_follow_the_given_nodes():
    assert TREE.path_tokens([0, 2, 5]) == [5, 7, 1]
    assert TREE.path_tokens([]) == []
