"""Penalties and biases as a stage of verification: the formula, every draft row processed with
the counts of the text before it, greedy speculative output token-identical to plain greedy with
the same penalties (chains, trees, batched), and speculative sampling distributed as plain
sampling with them (the chi-square test of `test_distribution`, with a power check that fails a
stage that penalizes every row with the root's counts)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from mock_target import MockTarget
from test_distribution import (ALPHA, LENGTH, PLAIN_SEEDS, PROMPT, SPEC_SEEDS, T1,
                               FixedDrafter, homogeneity_pvalue, suffix_drafter)
from test_distribution import draft_model, target_model  # noqa: F401,F811 (their fixtures)

import specdecode.core.penalties
from specdecode.core.batch import Request, generate_batch
from specdecode.core.cost import StepCost
from specdecode.core.engine import generate
from specdecode.core.penalties import Penalties, PenaltyState
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.core.tree import TokenTree
from specdecode.drafters.draft_model import DraftModel
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter
from specdecode.errors import InvalidParameterError
from specdecode.models.decoder import NativeDecoder
from seeding import unseeded_outcomes

# --- the formula and the rows -----------------------------------------------------------------


def test_the_formula_biases_then_scales_seen_tokens_then_subtracts_counts():
    p = Penalties(presence=0.5, frequency=0.25, repetition=2.0, bias=((0, 1.0),))
    state = PenaltyState(p, prompt=[1], vocab=4)  # token 1 seen in the prompt only
    state.accept([0, 0, 3])
    out = state.apply(torch.tensor([[1.0, 3.0, -1.0, -2.0]]), TokenTree.chain(torch.tensor([])
                                                                              .long()))
    # 0: (1 + 1) / 2 - 0.25 * 2 - 0.5;  1: 3 / 2;  2: unseen, unchanged;  3: -2 * 2 - 0.25 - 0.5
    assert out.tolist() == [[0.0, 1.5, -1.0, -4.75]]


@pytest.mark.parametrize("window", [0, 1, 3, 64], ids=["all", "window 1", "window 3",
                                                       "window 64"])
def test_every_row_is_processed_with_the_counts_of_the_text_before_it(window):
    """Row r of a tree equals the root row of a sequence that confirmed the path to it (with a
    window: the last tokens before each row, prompt included, however many the path brings)."""
    p = Penalties(presence=0.3, frequency=0.7, repetition=1.5, bias=((2, -1.0), (5, 0.5)),
                  window=window)
    tree = TokenTree(torch.tensor([2, 2, 5, 2, 7]), torch.tensor([-1, 0, 0, 1, -1]))
    logits = torch.randn(len(tree) + 1, 8, generator=torch.Generator().manual_seed(0))
    state = PenaltyState(p, prompt=[1, 2], vocab=8)
    state.accept([5, 3])
    rows = state.apply(logits, tree)
    empty = TokenTree.chain(torch.tensor([], dtype=torch.long))
    for r in range(len(tree) + 1):
        alone = PenaltyState(p, prompt=[1, 2], vocab=8)
        alone.accept([5, 3])
        path = tree.row_ancestors[r, 1:].nonzero().flatten()
        if len(path):
            alone.accept(tree.tokens[path].tolist())
        assert torch.equal(rows[r], alone.apply(logits[r : r + 1], empty)[0]), r


def test_a_window_counts_the_last_tokens_prompt_included_as_llamacpp_does():
    p = Penalties(presence=0.5, frequency=0.25, repetition=2.0, window=3)
    state = PenaltyState(p, prompt=[1, 2], vocab=4)
    state.accept([0, 0, 3])  # the window: 0, 0, 3 (1 and 2 have left it)
    out = state.apply(torch.tensor([[1.0, 3.0, -1.0, -2.0]]), TokenTree.chain(torch.tensor([])
                                                                              .long()))
    # 0: 1 / 2 - 0.25 * 2 - 0.5;  1, 2: out of the window;  3: -2 * 2 - 0.25 - 0.5
    assert out.tolist() == [[-0.5, 3.0, -1.0, -4.75]]


@pytest.mark.parametrize("kwargs, message", [
    ({"window": -1}, "a penalty window must be >= 0"),
    ({"presence": 2.5}, "presence penalty must be in"),
    ({"frequency": -3.0}, "frequency penalty must be in"),
    ({"repetition": 0.0}, "repetition penalty must be > 0"),
    ({"bias": ((1, 101.0),)}, "a logit bias must be in"),
])
def test_out_of_range_values_are_refused_in_one_line(kwargs, message):
    with pytest.raises(InvalidParameterError, match=message):
        Penalties(**kwargs)


def test_a_bias_on_a_token_past_the_vocabulary_is_refused():
    with pytest.raises(InvalidParameterError, match=r"logit bias token ids must be in \[0, 4\)"):
        PenaltyState(Penalties(bias=((4, 1.0),)), [0], 4)


# --- greedy: token-identical to plain greedy with the same penalties ---------------------------

VOCAB = 16
PENALTIES = Penalties(presence=0.2, frequency=0.3, repetition=1.3, bias=((5, 2.0), (7, -3.0)))
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6] * 3, [1, 2, 3] * 8, [7, 7, 8, 9, 3, 1, 3, 1] * 2]


def greedy_runs(drafter, limit, penalties=PENALTIES, target=None):
    t = target or MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    return [generate(t, drafter, p, GenerationConfig(40, penalties=penalties),
                     limit and DraftLimit(limit.nodes, limit.depth)) for p in PROMPTS]


def test_penalties_change_plain_greedy_output():
    """The penalties here move the mock target's choices, and a window moves them again: the
    tests below would catch a stage that ignored them."""
    with_them, without = greedy_runs(NoDrafter(), None), greedy_runs(NoDrafter(), None,
                                                                      Penalties())
    windowed = greedy_runs(NoDrafter(), None, Penalties(**{**PENALTIES.__dict__, "window": 4}))
    runs = [[r.token_ids for r in rs] for rs in (with_them, without, windowed)]
    assert runs[0] != runs[1] and runs[2] != runs[0]


@pytest.mark.parametrize("drafter, limit", [
    (PromptLookup(3, 1), DraftLimit(6, 6)),
    (FixedDrafter([5, 1, 5, 1, 2]), DraftLimit(5, 5)),
    (suffix_drafter(), DraftLimit(8, 4)),
], ids=["lookup", "fixed", "suffix-tree"])
@pytest.mark.parametrize("window", [0, 4], ids=["all", "window 4"])
def test_greedy_speculative_output_with_penalties_equals_plain_greedy_with_them(drafter, limit,
                                                                                window):
    penalties = Penalties(**{**PENALTIES.__dict__, "window": window})
    plain = greedy_runs(NoDrafter(), None, penalties)
    spec = greedy_runs(drafter, limit, penalties)
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert sum(r.stats.accepted for r in spec) > 0


def test_greedy_batched_with_penalties_equals_plain_greedy_with_them():
    t = MockTarget(vocab=VOCAB, layers=2, max_length=256, seed=5)
    plain = greedy_runs(NoDrafter(), None, target=t)
    reqs = [Request(p, GenerationConfig(40, penalties=PENALTIES), d, DraftLimit(6, 6))
            for p, d in zip(PROMPTS, [PromptLookup(3, 1), suffix_drafter(), PromptLookup(2, 1)])]
    batched = generate_batch(t, reqs, max_batch=3, cost=StepCost.linear(0.1))
    assert [r.token_ids for r in batched] == [r.token_ids for r in plain]


# --- sampling: distributed as plain sampling with the same penalties --------------------------

# strong enough to move the distribution over the test's 3 tokens far from the unpenalized one
SAMPLED = Penalties(presence=0.8, frequency=1.2, repetition=1.6, bias=((2, 1.0),))


def penalized_outcomes(target, drafter, k: int | None, seeds, batched: bool = False) -> Counter:
    config = GenerationConfig(LENGTH, T1, penalties=SAMPLED)  # unseeded: recursive rejection
    limit = (lambda: DraftLimit(k, k)) if k else (lambda: None)
    return unseeded_outcomes(target, drafter, PROMPT, config, limit, seeds, batched)


_plain: dict = {}


def penalized_pvalue(target_model, drafter, k: int, batched: bool = False) -> float:
    if "plain" not in _plain:
        _plain["plain"] = penalized_outcomes(NativeDecoder.from_hf(target_model), NoDrafter(),
                                             None, PLAIN_SEEDS)
    target = NativeDecoder.from_hf(target_model)
    return homogeneity_pvalue(penalized_outcomes(target, drafter, k, SPEC_SEEDS, batched),
                              _plain["plain"])


def test_speculative_sampling_with_penalties_matches_plain_sampling_with_them(target_model,
                                                                              draft_model):
    draft = DraftModel(NativeDecoder.from_hf(draft_model))
    assert penalized_pvalue(target_model, draft, 2) > ALPHA
    assert penalized_pvalue(target_model, FixedDrafter([2, 2, 0]), 3) > ALPHA


def test_batched_tree_sampling_with_penalties_matches_plain_sampling_with_them(target_model):
    assert penalized_pvalue(target_model, suffix_drafter(), 2, batched=True) > ALPHA


def test_the_penalties_move_the_sampled_distribution(target_model):
    """Power of the comparison: plain sampling with and without them differs."""
    without = Counter(tuple(generate(NativeDecoder.from_hf(target_model), NoDrafter(), PROMPT,
                                     GenerationConfig(LENGTH, T1, seed=s), None).token_ids)
                      for s in SPEC_SEEDS)
    penalized_pvalue(target_model, NoDrafter(), None)  # fills the plain reference
    assert homogeneity_pvalue(without, _plain["plain"]) < ALPHA


def test_a_stage_that_penalizes_every_row_like_the_root_is_detected(monkeypatch, target_model):
    """Power check: rows scored with the confirmed text's counts only (the draft's own tokens
    not counted, as an engine that processes the root's row and copies it would) move the
    distribution, and the test above catches it."""
    real = PenaltyState.apply

    def root_counts_only(self, logits, tree):
        empty = TokenTree.chain(torch.tensor([], dtype=torch.long))
        return torch.cat([real(self, logits[r : r + 1], empty) for r in range(len(logits))])

    monkeypatch.setattr(specdecode.core.penalties.PenaltyState, "apply", root_counts_only)
    assert penalized_pvalue(target_model, FixedDrafter([2, 2, 0]), 3) < ALPHA
