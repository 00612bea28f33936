"""Spec-Bench's questions: six task groups, MT-bench with two turns."""

from specdecode.app.bench.specbench import GROUPS, group_of, load_questions, select, turns_of


def test_shipped_questions_cover_six_groups_with_480_rows():
    questions = load_questions()
    assert len(questions) == 480
    chosen = select(questions, 2)
    spec_bench = set(GROUPS) - {"code generation", "structured output", "fill-in-the-middle"}
    assert len(chosen) == 2 * len(spec_bench) == 12
    assert {group_of(q) for q in chosen} == spec_bench
    assert [group_of(q) for q in chosen[:2]] == ["multi-turn conversation"] * 2


def test_mt_bench_questions_run_both_turns_and_others_one():
    questions = load_questions()
    turns = {group_of(q): len(turns_of(q)) for q in questions}
    assert turns.pop("multi-turn conversation") == 2
    assert set(turns.values()) == {1}
