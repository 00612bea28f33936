"""The fill-in-the-middle set: real code, a middle of whole lines cut out, the same set for the
same seed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specdecode.app.bench.fim import MIDDLE_LINES, fim_questions
from specdecode.app.bench.specbench import group_of


def test_each_middle_sits_between_its_prefix_and_suffix_in_the_source():
    for q in fim_questions(12):
        module, function, line = q["source"].split(":")
        text = Path(importlib.util.find_spec(module).origin).read_text()
        assert q["prefix"] + q["middle"] + q["suffix"] in text, q["source"]
        assert q["prefix"].endswith("\n") and q["middle"].endswith("\n")
        assert 1 <= len(q["middle"].splitlines()) <= MIDDLE_LINES
        assert group_of(q) == "fill-in-the-middle" and q["turns"] == [q["prefix"]]


def test_the_set_is_the_same_for_the_same_seed_and_its_ids_are_apart_from_spec_bench():
    first, again, other = fim_questions(8), fim_questions(8), fim_questions(8, seed=1)
    assert first == again and first != other
    assert len({q["question_id"] for q in first}) == 8 and min(
        q["question_id"] for q in first) >= 10_000
