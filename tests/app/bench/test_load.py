"""`specdecode bench --load`: real servers under concurrent streaming clients, on a tiny model."""

import json

import pytest

from specdecode.app.bench.load import Timing, same_outputs, summarize
from specdecode.app.cli import main

QUESTIONS = [{"question_id": 1, "category": "qa", "turns": ["Why is the sky blue?"]},
             {"question_id": 2, "category": "translation", "turns": ["Translate: Hallo Welt"]}]


def test_the_load_benchmark_measures_every_mode_at_every_level(tmp_path, tiny_real_vocab_model,
                                                               capsys):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in QUESTIONS))
    out = tmp_path / "out"
    assert main(["bench", "--load", "1,3", "--load-modes", "one at a time,adaptive,off",
                 "--model", str(tiny_real_vocab_model), "--questions", str(questions),
                 "--max-new-tokens", "5", "--repeats", "1", "--threads", "1",
                 "--out", str(out)]) == 0
    results = json.loads((out / "load.json").read_text())["results"]
    assert set(results) == {"one at a time", "adaptive", "off"}
    for by_level in results.values():
        assert set(by_level) == {"1", "3"}
        for level, r in by_level.items():
            assert r["requests"] == max(4, 2 * int(level)) and r["tokens"] > 0
            assert r["aggregate_tps"] > 0 and r["ttft_p50"] <= r["ttft_p95"]
            # greedy: batching and speculation change no answer
            assert r["same_output"] == r["requests"]
    table = (out / "load.md").read_text()
    assert "| adaptive | 3 |" in table and (out / "load.png").stat().st_size > 0
    assert "same answer as one at a time |" in table and "| 6/6 |" in table


def test_a_levels_aggregate_is_its_median_rounds_and_latencies_span_every_request():
    fast = [Timing(10, 0.1, 1.0, 1.0), Timing(10, 0.2, 1.1, 1.1)]
    slow = [Timing(10, 0.5, 2.0, 2.0)]
    r = summarize([(fast, 2.0), (slow, 4.0), (fast, 1.0)])
    assert r["aggregate_tps"] == 10.0  # rounds give 10, 2.5 and 20 tokens/s
    assert r["requests"] == 5 and r["ttft_p95"] == 0.5
    assert r["itl_p50"] == pytest.approx(100.0)  # (1.0 - 0.1) / 9 s


@pytest.mark.parametrize("text", [",", "0,2", "a,b"])
def test_bad_levels_are_refused_in_one_line(text, capsys):
    assert main(["bench", "--load", text]) == 2
    assert "--load" in capsys.readouterr().err


def test_answers_are_compared_with_the_reference_modes_first_answer_to_the_same_prompt():
    def asked(prompt: str, text: str) -> Timing:
        return Timing(3, 0.1, 0.2, 0.3, prompt, text)

    rounds = {("one at a time", 2): [([asked("a", "x"), asked("b", "y")], 1.0),
                                     ([asked("a", "x"), asked("b", "z")], 1.0)],
              ("adaptive", 2): [([asked("b", "y"), asked("a", "x"), asked("a", "w")], 1.0)],
              ("off", 2): [([asked("c", "v")], 1.0)]}  # a prompt the reference never answered
    assert same_outputs(rounds, "one at a time") == {("one at a time", 2): 3, ("adaptive", 2): 2,
                                                     ("off", 2): 1}
