"""The benchmark's table maths and report, on hand-made records."""

import pytest

from specdecode.app.bench.records import Record
from specdecode.app.bench.report import leaderboard, summarize


def record(qid, group, method, tokens, seconds, ids, forwards=None, turn=1, drafted_at=()):
    confirmed = tokens if forwards else None
    return Record(qid, turn, group, method, 0, tokens, seconds, forwards, confirmed, None, None,
                  list(drafted_at), [d // 2 for d in drafted_at], ids)


RECORDS = [
    record(1, "translation", "ar", 10, 2.0, [1, 2], 10),
    record(1, "translation", "lookup", 10, 1.0, [1, 2], 4, drafted_at=[4, 2]),
    record(1, "translation", "hf", 10, 4.0, [1, 2]),
    record(2, "summarization", "ar", 20, 2.0, [3], 20),
    record(2, "summarization", "lookup", 20, 2.0, [4], 20, drafted_at=[2]),
    record(2, "summarization", "hf", 20, 2.0, [3]),
]


def test_summary_speedups_are_total_tokens_over_total_seconds():
    summary = summarize(RECORDS)
    overall = summary["overall"]
    assert overall["ar"]["tokens_per_second"] == pytest.approx(30 / 4.0)
    assert overall["lookup"]["speedup_vs_ar"] == pytest.approx((30 / 3.0) / (30 / 4.0))
    assert overall["lookup"]["speedup_vs_hf"] == pytest.approx((30 / 3.0) / (30 / 6.0))
    assert summary["translation"]["lookup"]["tau"] == pytest.approx(10 / 4)
    assert overall["lookup"]["mismatches"] == 1  # prompt 2 differs from ar
    assert overall["hf"]["tau"] is None
    assert overall["lookup"]["acceptance_by_position"] == pytest.approx([3 / 6, 1 / 2])


def test_a_second_turn_is_its_own_prompt_and_unfinished_prompts_are_left_out():
    records = RECORDS + [record(1, "translation", "ar", 5, 1.0, [9], 5, turn=2)]
    summary = summarize(records)  # turn 2 has no lookup or hf run yet
    assert summary["overall"]["ar"]["prompts"] == 2
    records.append(record(1, "translation", "lookup", 5, 0.5, [9], 2, turn=2))
    records.append(record(1, "translation", "hf", 5, 2.0, [9], turn=2))
    assert summarize(records)["overall"]["ar"]["prompts"] == 3


def test_leaderboard_has_a_row_per_method_and_a_column_per_group():
    lines = leaderboard(summarize(RECORDS), "ar")
    assert lines[0] == "| method | trans | sum | overall | τ | tok/s |"
    lookup = next(line for line in lines if line.startswith("| lookup"))
    assert "1.33×" in lookup and "2.00×" in lookup  # overall, translation


def test_the_decoding_rate_leaves_each_run_s_prefill_out():
    # sampled answers of different lengths: lookup stops after 4 tokens, so its whole-run rate
    # carries the prefill over few tokens; its decoding rate is twice plain decoding's
    ar = Record(1, 1, "qa", "ar", 0, 16, 1.0, 16, 16, prefill_seconds=0.5)
    lookup = Record(1, 1, "qa", "lookup", 0, 4, 0.5625, 2, 4, prefill_seconds=0.5)
    hf = Record(1, 1, "qa", "hf", 0, 16, 2.0)
    overall = summarize([ar, lookup, hf])["overall"]
    assert overall["lookup"]["speedup_vs_ar"] == pytest.approx((4 / 0.5625) / 16)
    assert overall["lookup"]["decoding_speedup_vs_ar"] == pytest.approx((4 / 0.0625) / (16 / 0.5))
    assert overall["hf"]["decoding_tokens_per_second"] is None
    assert "decoding_speedup_vs_ar" not in overall["hf"]


def test_sampled_repeats_of_different_lengths_count_each_draw_s_tokens_with_its_own_time():
    # repeat 0 stops after 4 tokens, repeat 1 runs 16: the rate is 20 tokens over both times,
    # not repeat 0's tokens over the median time
    runs = [Record(1, 1, "qa", "ar", 0, 16, 1.0, 16, 16, token_ids=[1]),
            Record(1, 1, "qa", "ar", 1, 16, 1.0, 16, 16, token_ids=[2]),
            Record(1, 1, "qa", "lookup", 0, 4, 0.25, 4, 4, token_ids=[3]),
            Record(1, 1, "qa", "lookup", 1, 16, 0.75, 10, 16, token_ids=[4])]
    overall = summarize(runs)["overall"]
    assert overall["lookup"]["tokens_per_second"] == pytest.approx(20 / 1.0)
    assert overall["lookup"]["speedup_vs_ar"] == pytest.approx(20 / 16)
