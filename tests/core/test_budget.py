"""The draft budget: of every sequence's draft, the step scores the nodes that raise its expected
tokens per second; speculation shrinks as the batch grows."""

from __future__ import annotations

import time

import pytest
import torch
from mock_target import MockTarget

from specdecode.core.budget import MIN_PAUSE, allocate
from specdecode.core.cost import StepCost
from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.core.drafter import Draft, Drafter

V = 16


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


def test_a_gate_pauses_drafting_that_does_not_pay_and_tries_again_later():
    from specdecode.core.budget import GATE_STEPS, MAX_PAUSE, DraftGate

    gate = DraftGate()
    for _ in range(GATE_STEPS - 1):
        gate.observe(-1.0)
        assert gate.open()  # too few steps to judge yet
    gate.observe(-1.0)
    assert [gate.open() for _ in range(MIN_PAUSE)] == [False] * MIN_PAUSE and gate.open()
    for _ in range(GATE_STEPS):  # the steps after the pause fail too: a pause twice as long
        gate.observe(-1.0)
    assert sum(not gate.open() for _ in range(4 * MIN_PAUSE)) == 2 * MIN_PAUSE
    gate.observe(0.5)  # a step that pays
    gate.observe(-0.1)
    assert all(gate.open() for _ in range(50)) and gate.pause == MIN_PAUSE
    for _ in range(20):
        for _ in range(GATE_STEPS):
            gate.observe(-1.0)
        while not gate.open():
            pass
    assert gate.pause == MAX_PAUSE


def test_a_gate_judges_its_first_steps_by_their_mean_not_by_the_first():
    from specdecode.core.budget import GATE_STEPS, DraftGate

    gate = DraftGate()
    gate.observe(-3.0)  # a first draft that missed
    for _ in range(GATE_STEPS - 1):
        gate.observe(1.5)  # then steps that pay: on average drafting pays
    assert gate.gain == pytest.approx((-3.0 + 1.5 * (GATE_STEPS - 1)) / GATE_STEPS)
    assert all(gate.open() for _ in range(20))


class Slow(Drafter):
    """Proposes, slowly, three tokens of which the first is never the next one: drafting that
    costs 2 ms and gains nothing."""

    def __init__(self) -> None:
        self.asked = 0

    @classmethod
    def create(cls, model, options):
        raise NotImplementedError("test drafter")

    def propose(self, seq, budget):
        self.asked += 1
        time.sleep(0.002)
        return Draft(torch.tensor([V] * 3), None)  # a token id the target never picks


def test_the_engine_stops_asking_a_drafter_whose_drafting_costs_more_than_it_gains():
    slow = Slow()
    plain_step = StepCost((1, 2), (0.001, 0.0011))  # 1 ms a step, 0.1 ms a row
    result = generate(MockTarget(vocab=V + 1, layers=2, max_length=256, seed=1), slow, [1, 2, 3],
                      GenerationConfig(100), DraftLimit(3, 3), cost=plain_step)
    assert result.stats.accepted == 0 and result.stats.target_forwards == 100
    assert slow.asked < 25  # paused after each failing probe, ever longer


class SlowModelFreeMatch(Slow):
    """Slow's model drafts (2 ms, never accepted) with free drafts beside them: asked while its
    model is paused, it proposes the plain greedy continuation (as an n-gram match would)."""

    free_drafts = True

    def __init__(self, truth: list[int]) -> None:
        super().__init__()
        self.truth, self.free = truth, 0

    def propose(self, seq, budget):
        if budget.forwards:
            return super().propose(seq, budget)
        self.free += 1
        return Draft(torch.tensor(self.truth[seq.length : seq.length + 3]), None)


def test_while_the_gate_pauses_a_drafters_model_its_free_drafts_still_draft_unjudged():
    from specdecode.drafters.plain import NoDrafter

    target = MockTarget(vocab=V + 1, layers=2, max_length=256, seed=1)
    prompt = [1, 2, 3]
    truth = prompt + generate(target, NoDrafter(), prompt, GenerationConfig(200), None).token_ids
    drafter, limit = SlowModelFreeMatch(truth), DraftLimit(3, 3)
    result = generate(target, drafter, prompt, GenerationConfig(200), limit,
                      cost=StepCost((1, 2), (0.001, 0.0011)))
    assert result.token_ids == truth[len(prompt):]
    assert drafter.free > 0 and result.stats.accepted > 0  # drafted during the pauses
    # the free drafts that paid did not count for the model: its pauses kept doubling
    assert drafter.asked < 25 and limit.gate.pause >= 4 * MIN_PAUSE


def test_drafting_that_pays_is_never_paused():
    from specdecode.core.budget import DraftGate
    from specdecode.drafters.plain import NoDrafter

    target = MockTarget(vocab=V, layers=2, max_length=256, seed=1)
    prompt = [4, 5, 6, 7]
    truth = prompt + generate(target, NoDrafter(), prompt, GenerationConfig(40), None).token_ids

    class Right(Drafter):
        """Proposes the plain greedy continuation: every draft is accepted."""

        @classmethod
        def create(cls, model, options):
            raise NotImplementedError("test drafter")

        def propose(self, seq, budget):
            n = seq.length
            return Draft(torch.tensor(truth[n : n + 3]), None)

    class Recording(DraftGate):
        def open(self) -> bool:
            opened.append(super().open())
            return opened[-1]

    opened: list[bool] = []
    result = generate(target, Right(), prompt, GenerationConfig(40),
                      DraftLimit(3, 3, gate=Recording()), cost=StepCost((1, 2), (0.01, 0.0101)))
    assert result.token_ids == truth[len(prompt):]
    assert result.stats.accepted > 0 and len(opened) > 5 and all(opened)


def test_the_price_of_a_first_draft_row_grows_with_the_batch():
    from specdecode.core.budget import min_chance

    cost = StepCost.linear(0.1)
    prices = [min_chance(cost, b, 64 * b, b, 64) for b in (1, 2, 4, 8, 16)]
    assert prices[0] == pytest.approx(0.1)
    assert prices[3] == pytest.approx(8 * 0.1 / 1.7)
    assert prices == sorted(prices)


def test_no_node_below_the_first_rows_price_is_kept_on_a_linear_curve():
    from specdecode.core.budget import min_chance

    cost = StepCost.linear(0.08)
    drafts = [(torch.tensor([0.9, 0.6, 0.45, 0.3, 0.2, 0.1]), 6, 64) for _ in range(8)]
    price = min_chance(cost, 8, 8 * 64, 8, 64)
    counts = allocate(cost, drafts)
    kept = [c for (chances, _, _), n in zip(drafts, counts) for c in chances[:n].tolist()]
    assert kept and min(kept) >= price


def test_a_prompt_chunk_beside_the_sequences_does_not_make_draft_rows_pay_more():
    # on a curve where every row costs the same, 64 prompt rows in the step change nothing: their
    # seconds are spent whatever is drafted (counting them made a 0.05 chance pay for its row)
    cost = StepCost.linear(0.1)
    drafts = [(chances(0.9, 0.5, 0.2, 0.05), 4, 64), (chances(0.3, 0.08), 2, 64)]
    assert allocate(cost, drafts, other_rows=64, other_cached=64 * 100) == allocate(cost, drafts)
    assert allocate(cost, drafts) == [2, 1]


def test_a_decoding_token_beside_a_prompt_chunk_is_priced_as_without_it():
    from specdecode.core.budget import StepShape, min_chance, prompt_share, step_gain

    cost = StepCost.linear(0.1)
    rows, cached = 2 + 64, 2 * 64 + 64 * 100  # two sequences of 64 tokens, a chunk after 100
    spent = prompt_share(cost, rows, cached, 64, 64 * 100)
    assert spent == pytest.approx(cost.step(rows, cached) - cost.step(2, 2 * 64))
    assert min_chance(cost, rows, cached, 2, 64, spent) == pytest.approx(
        min_chance(cost, 2, 2 * 64, 2, 64))
    # two drafted rows of one of the two, one of them accepted: the same gain as without the chunk
    beside = StepShape(rows + 2, cached + 2 * 64, 2, prompt_rows=64, prompt_cached=64 * 100)
    without = StepShape(4, 4 * 64, 2)
    assert step_gain(cost, 1, 2, 64, 0.001, beside) == pytest.approx(
        step_gain(cost, 1, 2, 64, 0.001, without))
