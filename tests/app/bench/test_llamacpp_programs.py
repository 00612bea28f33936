"""llama.cpp's programs as bench peers: the command each method runs, what is read back from its
log, and the reason given when the programs are not built. A stand-in program checks our side
of the process boundary on every machine; the real llama-speculative-simple runs where `make
peers` has built it."""

import json
import os
import stat
from pathlib import Path

import pytest

from specdecode.app.bench import llamacpp_programs as lp
from specdecode.app.cli import main
from specdecode.errors import SpecDecodeError

FINISHED = """
encoded   41 tokens in    0.512 seconds, speed:   80.078 t/s
decoded  128 tokens in    4.250 seconds, speed:   30.118 t/s

n_draft   = 3
n_predict = 128
n_drafted = 105
n_accept  = 93
accept    = 88.571%
"""


def test_the_finished_log_gives_times_and_draft_counts():
    found = lp.parse_speculative_simple(FINISHED)
    assert found == dict(encoded_tokens=41, encoded_seconds=0.512, decoded_tokens=128,
                         decoded_seconds=4.25, n_drafted=105, n_accept=93)


def test_a_log_without_its_timing_lines_is_an_error_naming_the_line():
    with pytest.raises(SpecDecodeError, match="no 'decoded ... tokens' line"):
        lp.parse_speculative_simple(FINISHED.split("decoded")[0])


COMPLETION = """
common_perf_print:    sampling time =      12.93 ms
common_perf_print:        load time =    1149.04 ms
common_perf_print: prompt eval time =     531.38 ms /    40 tokens (   13.28 ms per token)
common_perf_print:        eval time =    2214.71 ms /    63 runs   (   35.15 ms per token)
common_perf_print:       total time =    2765.28 ms /   103 tokens
"""


def test_the_completion_log_gives_prompt_and_total_time_and_runs():
    assert lp.parse_completion(COMPLETION) == dict(prompt_seconds=0.53138, runs=63,
                                                   total_seconds=2.76528)
    with pytest.raises(SpecDecodeError, match="llama-completion printed no 'eval time' line"):
        lp.parse_completion(COMPLETION.replace("  eval time", "  other time"))


def test_new_tokens_leave_out_an_end_of_text_token_the_program_counted():
    assert lp.new_tokens(decoded=64, max_new=64) == 64  # ran to the budget
    assert lp.new_tokens(decoded=66, max_new=64) == 66  # its last draft ran past it, in its time
    assert lp.new_tokens(decoded=20, max_new=64) == 19  # the 20th was end of text
    assert lp.new_tokens(decoded=0, max_new=64) == 0


def test_each_method_runs_its_program_and_only_the_draft_method_a_drafter(tmp_path):
    target, drafter = tmp_path / "t.gguf", tmp_path / "d.gguf"
    prompt = "<|im_start|>user\nhi \\n<|im_end|>\n"  # a literal backslash-n stays as it is
    plain = lp.ProgramPeer("llamacpp-bin", target, 2).command(prompt, 30, 64, 0.0, 1)
    assert Path(plain[0]).name == "llama-completion" and "--spec-type" not in plain
    assert plain[plain.index("-p") + 1] == prompt and "--no-escape" in plain
    assert plain[plain.index("-n") + 1] == "64" and "--no-display-prompt" in plain
    assert plain[plain.index("--temp") + 1] == "0"
    draft = lp.ProgramPeer("llamacpp-bin-draft", target, 2, drafter, draft_max=8)
    cmd = draft.command(prompt, 30, 64, 0.7, 3)
    assert Path(cmd[0]).name == "llama-speculative-simple"
    assert cmd[cmd.index("--spec-type") + 1] == "draft-simple"
    assert cmd[cmd.index("-n") + 1] == "63"  # its loop also decodes the prompt's last token
    assert cmd[cmd.index("-md") + 1] == str(drafter)
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "8"
    # sampling from the full distribution, as ours: no top-k, top-p or min-p cut
    assert [cmd[cmd.index(f) + 1] for f in ("--temp", "--top-k", "--top-p", "--min-p", "--seed")] \
        == ["0.7", "0", "1", "0", "3"]
    ngram = lp.ProgramPeer("llamacpp-bin-ngram", target, 2).command(prompt, 30, 64, 0, 1)
    assert ngram[ngram.index("--spec-type") + 1] == "ngram-simple" and "-md" not in ngram
    assert ngram[ngram.index("--spec-draft-n-max") + 1] == "64"  # as llama.cpp's docs give it
    assert "draft-simple with d.gguf" in draft.describe()
    with pytest.raises(SpecDecodeError, match="needs a drafter"):
        lp.ProgramPeer("llamacpp-bin-draft", target, 2)


def _stand_in(directory: Path, name: str, body: str) -> None:
    for other in ("llama-completion", "llama-speculative-simple", "llama-bench"):
        exe = directory / other
        exe.write_text("#!/bin/sh\n" + (body if other == name else "exit 3\n"))
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_a_speculative_run_returns_the_text_after_the_prompts_echo_and_the_programs_times(
        tmp_path, monkeypatch):
    # prints as llama-speculative-simple does: "\n\n", the prompt, the answer, "\n\n" on stdout,
    # its counts on stderr; the prompt is the argument after -p
    _stand_in(tmp_path, "llama-speculative-simple",
              'while [ "$1" != "-p" ]; do shift; done\n'
              'printf "\\n\\n%s a short answer\\n\\n" "$2"\n'
              f"cat >&2 <<'EOF'\n{FINISHED.replace('128 tokens', '5 tokens')}EOF\n")
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    assert lp.missing_reason() is None
    run = lp.ProgramPeer("llamacpp-bin-ngram", tmp_path / "t.gguf", 2).generate(
        "<|im_start|>user\nhi<|im_end|>\n", 9, 64, 0.0, 0)
    assert run.text == " a short answer"
    assert run.new_tokens == 4  # 5 decoded, the last one end of text
    assert run.seconds == pytest.approx(0.512 + 4.25) and run.prefill_seconds == 0.512
    assert (run.drafted, run.accepted) == (105, 93)


def test_a_plain_run_counts_the_budgets_last_token_that_was_never_evaluated(tmp_path,
                                                                          monkeypatch):
    _stand_in(tmp_path, "llama-completion",
              f"printf 'the answer [end of text]\\n\\n'\ncat >&2 <<'EOF'\n{COMPLETION}EOF\n")
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    peer = lp.ProgramPeer("llamacpp-bin", tmp_path / "t.gguf", 2)
    run = peer.generate("hi", 1, 64, 0.0, 0)  # 63 runs: the 64th token was sampled, not run
    assert (run.text, run.new_tokens, run.seconds, run.prefill_seconds) == (
        "the answer", 64, 2.76528, 0.53138)
    assert peer.generate("hi", 1, 100, 0.0, 0).new_tokens == 63  # ended by end of text


def test_a_failing_program_is_an_error_with_its_last_line(tmp_path, monkeypatch):
    _stand_in(tmp_path, "llama-completion", 'echo "main: error: unable to load model" >&2\n'
                                            "exit 1\n")
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    with pytest.raises(SpecDecodeError,
                       match=r"llama-completion failed \(exit status 1\): main: error: unable "
                             r"to load model"):
        lp.ProgramPeer("llamacpp-bin", tmp_path / "t.gguf", 2).generate("hi", 1, 4, 0.0, 0)


def test_a_program_killed_by_a_signal_is_an_error_naming_the_signal(tmp_path, monkeypatch):
    # as llama.cpp's AMX matrix path dies on some Xeons (llama.cpp's bug report 20824)
    _stand_in(tmp_path, "llama-bench",
              'echo "load_tensors: AMX model buffer" >&2\nkill -SEGV $$\n')
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    with pytest.raises(SpecDecodeError, match=r"llama-bench failed \(killed by SIGSEGV\): "
                                              r"load_tensors: AMX model buffer"):
        lp.llama_bench(tmp_path / "t.gguf", 2)


def test_floor_keeps_its_measurement_and_says_why_when_llama_bench_dies(tmp_path, monkeypatch,
                                                                      default_model):
    from specdecode.app.bench.floor import peer_lines

    _stand_in(tmp_path, "llama-bench", "kill -SEGV $$\n")
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    assert peer_lines(default_model, 0.01, 500.0) == [
        "llama.cpp: not compared (llama-bench failed (killed by SIGSEGV): no output)"]


def _bench(tmp_path: Path, model: str, methods: str) -> list[dict]:
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["Hi?"]}))
    out = tmp_path / "out"
    assert main(["bench", "--model", model, "--questions", str(questions), "--limit", "1",
                 "--methods", methods, "--max-new-tokens", "4", "--repeats", "1",
                 "--out", str(out)]) == 0
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def test_bench_leaves_the_program_peers_out_with_the_reason(tmp_path, monkeypatch, capsys,
                                                            tiny_real_vocab_model):
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path / "none"))
    assert "llama-completion is not in" in lp.missing_reason()
    assert "make peers" in lp.missing_reason()
    records = _bench(tmp_path, str(tiny_real_vocab_model), "ar,llamacpp-bin")
    assert "leaving out llamacpp-bin (the model has no GGUF file)" in capsys.readouterr().err
    assert {r["method"] for r in records} == {"ar"}


@pytest.mark.real_model
def test_bench_records_a_program_peers_run_with_its_own_times(tmp_path, monkeypatch):
    _stand_in(tmp_path, "llama-completion",
              f"printf ' Hello'\ncat >&2 <<'EOF'\n{COMPLETION}EOF\n")
    monkeypatch.setenv("SPECDECODE_LLAMA_CPP_BIN", str(tmp_path))
    peer = [r for r in _bench(tmp_path, "smollm2-135m", "ar,llamacpp-bin")
            if r["method"] == "llamacpp-bin"]
    assert len(peer) == 1 and peer[0]["seconds"] == 2.76528 and peer[0]["new_tokens"] == 4
    assert peer[0]["prefill_seconds"] == 0.53138 and peer[0]["token_ids"]
    report = (tmp_path / "out" / "bench.md").read_text()
    assert "llama.cpp's llama-completion on" in report


@pytest.mark.skipif(lp.missing_reason() is not None, reason="llama.cpp's programs not built "
                    "(make peers)")
def test_the_real_program_decodes_the_default_model_greedily(default_model):
    from specdecode.models.loader import gguf_file

    ids = default_model.encode_prompt("Count from one to ten.")
    run = lp.ProgramPeer("llamacpp-bin", gguf_file(default_model.name), os.cpu_count() or 1) \
        .generate(default_model.tokenizer.decode(ids), len(ids), 8, 0.0, 0)
    assert run.new_tokens == 8 and run.seconds > run.prefill_seconds > 0
    assert run.text.strip()
