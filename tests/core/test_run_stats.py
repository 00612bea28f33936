"""`RunStats.observe` and the derived figures on a hand-made sequence of engine steps."""

from __future__ import annotations

import pytest

from specdecode.core.run_stats import RunStats

# (drafted, accepted, draft_forwards): each step also emits one recovered-or-bonus token
STEPS = [(4, 4, 4), (4, 2, 4), (3, 0, 3), (0, 0, 0), (4, 1, 4)]


@pytest.fixture
def run() -> RunStats:
    s = RunStats()
    for i, (drafted, accepted, forwards) in enumerate(STEPS):
        s.observe(drafted, accepted, accepted + 1, accepted + 1, forwards,
                  draft_seconds=0.5 * i, verify_seconds=0.25)
    return s


def test_observe_counts_forwards_drafted_and_accepted(run):
    assert run.target_forwards == 5
    assert run.draft_forwards == 15
    assert run.drafted == 15
    assert run.accepted == 7
    assert run.new_tokens == 12


def test_tau_is_confirmed_tokens_per_target_forward(run):
    assert run.tau == pytest.approx(12 / 5)


def test_acceptance_rate_is_accepted_over_drafted(run):
    assert run.acceptance_rate == pytest.approx(7 / 15)


def test_acceptance_by_position_counts_only_drafts_that_reached_the_position(run):
    # drafted_at: position 0..2 in 4 drafts, position 3 in 3 drafts (the 3-token draft lacks it)
    assert run.drafted_at == [4, 4, 4, 3]
    # accepted_at: 4/4 -> all four; 2/4 -> 0,1; 0/3 -> none; 1/4 -> 0
    assert run.accepted_at == [3, 2, 1, 1]
    assert run.acceptance_by_position == pytest.approx([3 / 4, 2 / 4, 1 / 4, 1 / 3])


def test_accepted_histogram_counts_steps_per_number_of_accepted_tokens(run):
    # accepted per step: 4, 2, 0, 0, 1
    assert run.accepted_histogram == [2, 1, 1, 0, 1]
    assert sum(run.accepted_histogram) == run.target_forwards


def test_observe_sums_seconds(run):
    assert run.draft_seconds == pytest.approx(0.5 * (0 + 1 + 2 + 3 + 4))
    assert run.verify_seconds == pytest.approx(1.25)


def test_other_seconds_is_wall_time_not_spent_in_phases(run):
    run.prefill_seconds = 1.0
    run.wall_seconds = 10.0
    assert run.other_seconds == pytest.approx(10.0 - 1.0 - 5.0 - 1.25)
    run.wall_seconds = 1.0
    assert run.other_seconds == 0.0


def test_plain_decoding_steps_give_tau_one_and_no_acceptance_rate():
    s = RunStats()
    for _ in range(7):
        s.observe(0, 0, 1, 1, 0, 0.0, 0.0)
    assert s.tau == 1.0
    assert s.acceptance_rate is None
    assert s.acceptance_by_position == []
    assert s.accepted_histogram == [7]


def test_empty_stats_have_zero_tau_and_rates():
    s = RunStats()
    assert s.tau == 0.0
    assert s.acceptance_rate is None
    assert s.tokens_per_second == 0.0
    assert s.acceptance_by_position == []


def test_to_dict_reports_the_same_figures(run):
    run.wall_seconds = 4.0
    d = run.to_dict()
    assert d["new_tokens"] == 12 and d["target_forwards"] == 5 and d["draft_forwards"] == 15
    assert d["tau"] == pytest.approx(2.4)
    assert d["acceptance_rate"] == pytest.approx(round(7 / 15, 4))
    assert d["acceptance_by_position"] == [0.75, 0.5, 0.25, 0.3333]
    assert d["accepted_histogram"] == [2, 1, 1, 0, 1]
    assert d["tokens_per_second"] == pytest.approx(3.0)
    assert RunStats().to_dict()["acceptance_rate"] is None


def test_final_eos_counts_for_tau_but_not_for_new_tokens():
    s = RunStats()
    s.observe(0, 0, 1, 1, 0, 0.0, 0.0)
    s.observe(2, 2, 1, 2, 2, 0.0, 0.0)  # accepted [x, EOS]: x returned, EOS confirmed
    assert s.new_tokens == 2
    assert s.tau == pytest.approx(3 / 2)
