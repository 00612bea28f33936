"""The suffix tree drafter: candidates from the context, earlier outputs and the target's recycled
top tokens, grown best-first within the caps; a step scores the nodes that pay for their rows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from drafter_helpers import as_model, scored

from specdecode.core.budget import DraftBudget
from specdecode.core.cost import StepCost
from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.core.tree import ROOT
from specdecode.drafters import make_options
from specdecode.drafters.plain import NoDrafter
from specdecode.drafters.suffix import Memory, SuffixTree, shared_memory
from specdecode.errors import InvalidParameterError


def seq(*ids: int, prompt: int | None = None) -> SimpleNamespace:
    """What the drafter reads of a sequence."""
    tokens = torch.tensor(ids, dtype=torch.long)
    length = len(ids)
    return SimpleNamespace(tokens=tokens, length=length, drafter_state=None,
                           config=GenerationConfig(),
                           generated=tokens[prompt or 0 : length].tolist())


def grow(s: SimpleNamespace, *ids: int) -> None:
    s.tokens = torch.cat([s.tokens, torch.tensor(ids, dtype=torch.long)])
    s.length = len(s.tokens)


def drafter(memory: Memory | None = None, **options) -> SuffixTree:
    return SuffixTree(SuffixTree.Options(**options), memory)


def caps(nodes: int, depth: int = 8) -> DraftBudget:
    return DraftBudget(nodes, depth)


def test_the_context_continuation_is_proposed_as_a_chain_with_siblings():
    s = seq(1, 2, 3, 4, 5, 1, 2, 3, 7, 1, 2, 3)
    draft = drafter(branches=2).propose(s, caps(8, 3))
    tree = draft.tree
    assert draft.q is None
    first = [int(tree.tokens[i]) for i in tree.children[0]]
    assert first == [7, 4]  # both continuations of "1 2 3", the most recent first
    assert tree.depth == 3 and len(tree) <= 8
    for row in tree.children:  # siblings are distinct tokens
        tokens = [int(tree.tokens[i]) for i in row]
        assert len(tokens) == len(set(tokens))


def test_nodes_come_best_first_so_every_prefix_is_a_tree():
    draft = drafter(branches=3).propose(seq(1, 2, 3, 4, 5, 6, 1, 2, 3, 8, 1, 2, 3), caps(16))
    chances = draft.chances.tolist()
    assert chances == sorted(chances, reverse=True) and 0 < chances[-1] <= chances[0] <= 1
    assert all(p < i for i, p in enumerate(draft.parents.tolist()))


def test_no_node_is_scored_when_no_row_pays():
    s = seq(1, 2, 3, 4, 1, 2, 3)
    assert len(scored(drafter(), s, caps(8), row_cost=1.0)) == 0
    assert len(scored(drafter(), seq(1, 2, 3, 4, 1, 2, 3), caps(8), row_cost=0.1)) > 0


def test_dearer_rows_give_smaller_trees():
    s = [1, 2, 3, 4, 5, 6, 1, 2, 3, 8, 1, 2, 3]
    sizes = [len(scored(drafter(branches=3), seq(*s), caps(16), cost))
             for cost in (0.0, 0.05, 0.2, 0.5)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]


def test_the_node_budget_and_depth_are_caps():
    s = seq(*([1, 2, 3, 4, 5, 6, 7, 8] * 3))
    assert len(drafter().propose(s, caps(5)).tokens) == 5
    assert drafter().propose(seq(*([1, 2, 3, 4, 5, 6, 7, 8] * 3)), caps(16, 2)).tree.depth == 2


def test_nodes_the_step_did_not_score_are_not_counted_as_tried():
    d = drafter(branches=2)
    s = seq(1, 2, 3, 4, 1, 2, 5, 1, 2)
    draft = d.propose(s, caps(8, 1))
    assert len(draft) == 2
    d.observe(s, 1, 0)  # only the first scored, and rejected
    tried = s.drafter_state.pending.classes
    grow(s, 9)
    d.propose(s, caps(8, 1))
    assert sum(s.drafter_state.verdicts.tried.values()) == 1 and len(tried) == 1


def test_a_rejected_class_loses_rate_and_an_accepted_one_gains():
    d = drafter(branches=1)
    kept, lost = seq(1, 2, 3, 1, 2), seq(1, 2, 3, 1, 2)
    for s, follow in ((kept, 3), (lost, 9)):
        draft = d.propose(s, caps(1, 1))
        assert draft.tokens.tolist() == [3]
        first = s.drafter_state.pending.classes[0]
        before = d._rate(s.drafter_state, first)
        grow(s, follow, 5)  # the draft accepted (3) or rejected (9), then one more token
        d.propose(s, caps(1, 1))
        after = d._rate(s.drafter_state, first)
        assert (after > before) if follow == 3 else (after < before)


def test_recycled_top_tokens_are_candidates_after_the_token_they_followed():
    d = drafter(branches=3)
    s = seq(5, 6, 7)
    d.start(s)
    logits = torch.zeros(2, 16)
    logits[0, 11], logits[0, 12] = 2.0, 1.0  # the target's top two after token 7
    d.observe_logits(s, [7, 3], logits)
    grow(s, 3, 7)  # no earlier "7" followed by anything but the recycled tokens
    draft = d.propose(s, caps(4, 1))
    assert draft.tokens.tolist() == [3, 11, 12]  # the context's "7 3", then the target's 11, 12
    assert [c for c, *_ in s.drafter_state.pending.classes] == ["context", "recycled", "recycled"]


def test_memory_carries_an_earlier_output_to_a_later_request():
    memory = Memory(3, capacity=100)
    d = drafter(memory)
    earlier = seq(1, 40, 41, 42, 43, prompt=1)
    d.start(earlier)
    d.finish(earlier)
    later = seq(9, 9, 40, 41)
    assert d.propose(later, caps(4)).tokens.tolist()[:2] == [42, 43]
    assert drafter().propose(seq(9, 9, 40, 41), caps(4)).tokens.numel() == 0  # no memory


def test_memory_forgets_the_oldest_output_past_its_capacity():
    memory = Memory(2, capacity=6)
    memory.add([1, 2, 3], {})
    memory.add([4, 5, 6], {})
    assert memory.continuations((1,)) == (1, [2])
    memory.add([7, 8], {})
    assert memory.continuations((1,)) == (0, [])
    assert memory.continuations((7,)) == (1, [8]) and memory.size == 5


def test_memories_are_never_shared_between_models():
    a = shared_memory("model-a", 3, 100)
    assert shared_memory("model-a", 3, 100) is a
    assert shared_memory("model-b", 3, 100) is not a


def test_memory_is_off_with_zero_tokens(make_target):
    model = as_model(make_target())
    assert SuffixTree.create(model, make_options("suffix", {"memory_tokens": 0})).memory is None
    assert SuffixTree.create(model, make_options("suffix", {})).memory is not None


@pytest.mark.parametrize("values", [{"branches": 0}, {"ngram_max": 0}, {"memory_tokens": -1}])
def test_invalid_options_are_rejected(values):
    with pytest.raises(InvalidParameterError):
        make_options("suffix", values)


def test_suffix_greedy_output_equals_plain_greedy(make_target):
    prompt = [3, 1, 4, 1, 5, 3, 1, 4, 1, 5, 3, 1, 2, 6, 5, 3, 1]
    config = GenerationConfig(40)
    plain = generate(make_target(), NoDrafter(), prompt, config, None)
    d = drafter(branches=3)
    result = generate(make_target(), d, prompt, config, DraftLimit(12, 12),
                      cost=StepCost.linear(0.05))
    assert result.token_ids == plain.token_ids
    assert result.stats.drafted > 0


def test_suffix_with_memory_stays_lossless_across_requests(make_target):
    """The second request drafts from the first's output; its greedy output does not change."""
    memory, target = Memory(5, 1000), make_target()
    d = drafter(memory)
    config = GenerationConfig(30)
    for prompt in ([3, 1, 4, 1, 5], [2, 7, 1, 8, 2], [3, 1, 4, 1, 5]):
        plain = generate(target, NoDrafter(), prompt, config, None)
        assert generate(target, d, prompt, config, DraftLimit(12, 12),
                        cost=StepCost.linear(0.05)).token_ids == plain.token_ids
    assert memory.size >= 60


def test_suffix_sampling_runs_with_trees(make_target):
    config = GenerationConfig(20, SamplingParams(temperature=1.0), seed=0)
    result = generate(make_target(), drafter(branches=3), [1, 2, 3, 1, 2, 3, 1, 2], config,
                      DraftLimit(8, 8))
    assert len(result.token_ids) == 20 and result.stats.drafted > 0


def test_the_root_is_the_parent_of_the_first_level():
    draft = drafter(branches=3).propose(seq(1, 2, 1, 3, 1, 4, 1), caps(3, 1))
    assert draft.parents.tolist() == [ROOT, ROOT, ROOT]
    assert sorted(draft.tokens.tolist()) == [2, 3, 4]
