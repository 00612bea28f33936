"""`specdecode bench` end to end on a tiny model: the files it writes, MT-bench's second turn,
and an interrupted run that `--resume` completes without recomputing anything."""

import json

import pytest

from specdecode.app.cli import main
from specdecode.pipeline import SpecDecoder

QUESTIONS = [
    {"question_id": 1, "category": "writing", "turns": ["Say hi.", "Now say it twice."]},
    {"question_id": 2, "category": "translation", "turns": ["Translate: Hallo Welt"]},
    {"question_id": 3, "category": "qa", "turns": ["Why is the sky blue?"]},
]


@pytest.fixture
def bench_args(tmp_path, tiny_real_vocab_model):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in QUESTIONS))
    out = tmp_path / "out"
    return out, ["bench", "--model", str(tiny_real_vocab_model), "--questions", str(questions),
                 "--limit", "1", "--methods", "ar,lookup,hf", "--max-new-tokens", "6",
                 "--repeats", "1", "--out", str(out)]


def count_generate_calls(monkeypatch, fail_at: int | None = None) -> list[int]:
    calls = [0]
    original = SpecDecoder.generate

    def generate(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == fail_at:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SpecDecoder, "generate", generate)
    return calls


def records(out):
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_bench_writes_table_json_records_and_three_plots(bench_args, capsys):
    out, argv = bench_args
    assert main(argv) == 0
    for name in ("bench.md", "bench.json", "records.jsonl", "speedup_by_group.png",
                 "acceptance_by_position.png", "speedup_tau_vs_depth.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "speedup_by_group.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "bench.md").read_text()
    assert "## Speed-up over our plain decoding" in report and "greedy equality audit" in report
    # 4 prompts (question 1 has two turns) x 3 methods
    assert len(records(out)) == 12
    assert {(r["question_id"], r["turn"]) for r in records(out)} == {(1, 1), (1, 2), (2, 1), (3, 1)}
    summary = json.loads((out / "bench.json").read_text())["summary"]
    assert summary["overall"]["ar"]["prompts"] == 4


def test_bench_reports_the_step_cost_its_drafts_were_chosen_by(bench_args, capsys):
    out, argv = bench_args
    assert main(argv) == 0
    cost = json.loads((out / "bench.json").read_text())["info"]["step_cost"]
    assert cost["rows"][0] == 1 and len(cost["seconds"]) == len(cost["rows"])
    assert all(s > 0 for s in cost["seconds"])
    header = (out / "bench.md").read_text().splitlines()[2]
    assert header.startswith("step cost the drafts were chosen by: 1 / 2")


def test_interrupted_bench_resumes_without_recomputing(bench_args, monkeypatch, capsys):
    out, argv = bench_args
    # our runs per pass: 2 warm-ups, then ar and lookup on each of 4 prompts (hf is not counted)
    calls = count_generate_calls(monkeypatch, fail_at=2 + 5)
    assert main(argv) == 0  # Ctrl-C: reports what was measured
    assert "interrupted" in capsys.readouterr().out
    done = records(out)
    assert 0 < len(done) < 12
    calls = count_generate_calls(monkeypatch)
    assert main(argv + ["--resume"]) == 0
    ours_left = 4 * 2 - sum(1 for r in done if r["method"] != "hf")  # 4 prompts x (ar, lookup)
    assert calls[0] == 2 + ours_left  # warm-ups + only what was missing
    assert len(records(out)) == 12
    assert records(out)[: len(done)] == done  # earlier records kept as they were
    calls = count_generate_calls(monkeypatch)
    assert main(argv + ["--resume"]) == 0
    assert calls[0] == 0  # everything recorded: nothing runs


def test_resume_with_other_settings_exits_2(bench_args, capsys):
    out, argv = bench_args
    assert main(argv) == 0
    assert main(argv + ["--resume", "--max-new-tokens", "7"]) == 2
    assert "max_new_tokens" in capsys.readouterr().err


def memory_of(out) -> str:
    return json.loads((out / "bench.json").read_text())["info"]["methods"]["suffix"]


def test_bench_starts_every_prompt_without_memory_unless_asked(bench_args, capsys):
    out, argv = bench_args
    argv = [a if a != "ar,lookup,hf" else "ar,suffix" for a in argv]
    assert main(argv) == 0
    assert "no memory" in memory_of(out)
    assert main(argv + ["--cross-request-memory", "--out", str(out.with_name("memory"))]) == 0
    assert "memory 65536 tokens" in memory_of(out.with_name("memory"))


def test_cross_request_memory_with_repeats_exits_2_with_one_line(bench_args, capsys):
    out, argv = bench_args
    assert main(argv + ["--cross-request-memory", "--repeats", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--repeats 1" in err and len(err.splitlines()) == 1


SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "sure": {
    "type": "boolean"}}, "required": ["answer", "sure"], "additionalProperties": False}


def test_structured_questions_run_under_their_schema_and_report_the_grammar(tmp_path, capsys,
                                                                           tiny_real_vocab_model):
    questions = tmp_path / "structured.jsonl"
    questions.write_text(json.dumps({"question_id": 7, "category": "structured",
                                     "turns": ["Is water wet? Answer as JSON."],
                                     "json_schema": SCHEMA}))
    out = tmp_path / "out"
    argv = ["bench", "--model", str(tiny_real_vocab_model), "--questions", str(questions),
            "--methods", "ar,lookup", "--max-new-tokens", "24", "--repeats", "1", "--out",
            str(out)]
    assert main(argv) == 0
    runs = records(out)
    assert {r["group"] for r in runs} == {"structured output"}
    # the random model writes what the grammar allows: the schema's own keys, in order
    assert all(r["grammar_seconds"] > 0 for r in runs)
    model_text = [r for r in runs if r["method"] == "ar"][0]
    from specdecode.models import load_model
    text = load_model(str(tiny_real_vocab_model)).decode(model_text["token_ids"])
    assert text.startswith('{"answer": "')
    lookup = [r for r in runs if r["method"] == "lookup"][0]
    assert lookup["token_ids"] == model_text["token_ids"] and lookup["forced"] > 0
    report = (out / "bench.md").read_text()
    assert "## structured output (questions with a json_schema)" in report
    summary = json.loads((out / "bench.json").read_text())["summary"]["overall"]
    assert summary["lookup"]["forced_share"] > 0 and summary["ar"]["forced_share"] == 0
    assert summary["lookup"]["grammar_ms_per_token"] > 0


def test_structured_questions_refuse_the_peers(tmp_path, capsys, tiny_real_vocab_model):
    questions = tmp_path / "structured.jsonl"
    questions.write_text(json.dumps({"question_id": 7, "category": "structured",
                                     "turns": ["Answer as JSON."], "json_schema": SCHEMA}))
    argv = ["bench", "--model", str(tiny_real_vocab_model), "--questions", str(questions),
            "--methods", "ar,hf", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "leave out hf" in capsys.readouterr().err


def test_fim_runs_the_middles_and_reports_their_latency(tmp_path, tiny_fim_model):
    out = tmp_path / "out"
    argv = ["bench", "--model", str(tiny_fim_model), "--fim", "3", "--methods", "ar,lookup",
            "--max-new-tokens", "8", "--repeats", "1", "--out", str(out)]
    assert main(argv) == 0
    runs = records(out)
    assert {r["group"] for r in runs} == {"fill-in-the-middle"} and len(runs) == 6
    assert all(0 < r["first_token_seconds"] <= r["seconds"] for r in runs)
    by = {(r["question_id"], r["method"]): r["token_ids"] for r in runs}
    assert all(by[(q, "lookup")] == by[(q, "ar")] for q, _ in by)
    report = (out / "bench.md").read_text()
    assert "## fill-in-the-middle: latency (3 middles cut from 20 modules" in report
    assert "8 new tokens, 3 fill-in-the-middle prompts, median of 1" in report.splitlines()[0]


def test_fim_needs_a_model_with_fim_tokens(tmp_path, capsys, tiny_real_vocab_model):
    argv = ["bench", "--model", str(tiny_real_vocab_model), "--fim", "3", "--methods", "ar",
            "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "--fim needs a model with fill-in-the-middle tokens" in capsys.readouterr().err
