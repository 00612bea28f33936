import json
from collections import Counter

import pytest

from specdecode.app.train.data import (
    balanced_order,
    generate_answers,
    read_answers,
    read_prompts,
    select_prompts,
)
from specdecode.errors import InvalidParameterError, SpecDecodeError


def _records(counts: dict[str, int]) -> list[dict]:
    return [{"id": f"{source}-{i}", "prompt": f"{source} {i}", "source": source}
            for source, n in counts.items() for i in range(n)]


def test_balanced_order_takes_sources_in_turn_whatever_their_size():
    order = balanced_order(_records({"big": 50, "small": 3, "mid": 10}), seed=1)
    assert Counter(r["source"] for r in order[:9]) == {"big": 3, "small": 3, "mid": 3}
    assert len(order) == 63 and len({r["id"] for r in order}) == 63


def test_balanced_order_is_seeded():
    records = _records({"a": 20, "b": 20})
    assert balanced_order(records, 0) == balanced_order(records, 0)
    assert balanced_order(records, 0) != balanced_order(records, 1)


def test_validation_prompts_are_held_out_and_too_long_prompts_skipped():
    records = _records({"a": 10, "b": 10})
    encode = lambda text: [1] * (9 if text.endswith(" 0") else 2)  # prompt 0 of each: too long
    chosen = select_prompts(records, encode, num_train=6, num_val=4, max_prompt_tokens=8, seed=0)
    val = [r["id"] for r, split, _ in chosen if split == "val"]
    train = [r["id"] for r, split, _ in chosen if split == "train"]
    assert len(val) == 4 and len(train) == 6 and not set(val) & set(train)
    assert not any(i.endswith("-0") for i in val + train)
    with pytest.raises(InvalidParameterError, match="only 18 prompts"):
        select_prompts(records, encode, num_train=20, num_val=4, max_prompt_tokens=8, seed=0)


def test_answer_generation_resumes_without_regenerating_finished_prompts(tmp_path):
    chosen = [({"id": f"p{i}", "source": "s"}, "train", [i] * (1 + i % 3)) for i in range(10)]
    calls: list[list[list[int]]] = []

    def answer(prompts):
        calls.append(prompts)
        return [[p[0], 99] for p in prompts]

    def interrupted(prompts):
        if calls:
            raise KeyboardInterrupt  # during the second batch
        return answer(prompts)

    path = tmp_path / "answers.jsonl"
    with pytest.raises(KeyboardInterrupt):
        generate_answers(chosen, interrupted, path, batch_size=4, progress=False)
    assert len(read_answers(path)) == 4
    with path.open("a") as f:  # and a line cut short by the interruption
        f.write('{"id": "p9", "split": "tr')
    calls.clear()
    samples = generate_answers(chosen, answer, path, batch_size=4, progress=False)
    assert sum(len(batch) for batch in calls) == 6  # only the 6 unfinished prompts
    assert [s.id for s in samples] == [f"p{i}" for i in range(10)]  # in the chosen order
    assert all(s.answer_ids == [s.prompt_ids[0], 99] for s in samples)
    calls.clear()
    generate_answers(chosen, answer, path, batch_size=4, progress=False)
    assert calls == []


def test_bad_prompt_files_are_one_line_errors(tmp_path):
    with pytest.raises(SpecDecodeError, match="cannot read prompts file"):
        read_prompts(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": 1, "prompt": "x"}) + "\n{not json\n")
    with pytest.raises(SpecDecodeError, match=r"bad.jsonl:2 is not valid JSON"):
        read_prompts(bad)
    bad.write_text(json.dumps({"id": 1, "text": "x"}) + "\n")
    with pytest.raises(SpecDecodeError, match="needs the fields"):
        read_prompts(bad)


def test_prompts_may_contain_unicode_line_separators(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": 1, "prompt": "a\u2028b\x85c"}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    assert [r["prompt"] for r in read_prompts(path)] == ["a\u2028b\x85c"]
