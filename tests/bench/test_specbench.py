"""Spec-Bench selection and the table maths on hand-made records."""

import pytest

from specdecode.bench.specbench import GROUPS, Record, load_questions, select, summarize


def test_shipped_questions_cover_six_groups_with_480_rows():
    questions = load_questions()
    assert len(questions) == 480
    chosen = select(questions, 2)
    assert len(chosen) == 2 * len(GROUPS)


def record(qid, group, method, tokens, seconds, ids, forwards=None):
    confirmed = tokens if forwards else None
    return Record(qid, group, method, 0, tokens, seconds, forwards, confirmed, None, None, ids)


def test_summary_speedups_are_total_tokens_over_total_seconds():
    records = [
        record(1, "translation", "ar", 10, 2.0, [1, 2], 10),
        record(1, "translation", "lookup", 10, 1.0, [1, 2], 4),
        record(1, "translation", "hf", 10, 4.0, [1, 2]),
        record(2, "summarization", "ar", 20, 2.0, [3], 20),
        record(2, "summarization", "lookup", 20, 2.0, [4], 20),
        record(2, "summarization", "hf", 20, 2.0, [3]),
    ]
    summary = summarize(records)
    overall = summary["overall"]
    assert overall["ar"]["tokens_per_second"] == pytest.approx(30 / 4.0)
    assert overall["lookup"]["speedup_vs_ar"] == pytest.approx((30 / 3.0) / (30 / 4.0))
    assert overall["lookup"]["speedup_vs_hf"] == pytest.approx((30 / 3.0) / (30 / 6.0))
    assert summary["translation"]["lookup"]["tau"] == pytest.approx(10 / 4)
    assert overall["lookup"]["mismatches"] == 1  # prompt 2 differs from ar
    assert overall["hf"]["tau"] is None
