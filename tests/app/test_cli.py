"""Bad input never produces a traceback: a one-line message on stderr and exit code 2."""

import os
import subprocess
import sys

import pytest

from specdecode.app.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


BAD_INPUTS = {
    "unknown_method": (["generate", "--method", "nosuch", "hi"], "unknown method"),
    "unknown_model": (["generate", "--model", "no-such-model", "hi"], "unknown model"),
    "missing_gguf": (["generate", "--model", "/nonexistent/m.gguf", "hi"], "no such GGUF file"),
    "missing_model_dir_config": (["generate", "--model", "/tmp", "hi"], "holds no config.json"),
    "missing_prompt_file": (["generate", "--prompt-file", "/nonexistent/p.txt"], "cannot read"),
    "nodes_zero": (["generate", "--max-draft-nodes", "0", "hi"], "--max-draft-nodes must be >= 1"),
    "depth_zero": (["generate", "--max-draft-depth", "0", "hi"], "--max-draft-depth must be >= 1"),
    "negative_temperature": (["generate", "--temperature", "-0.5", "hi"], "temperature"),
    "top_p_zero": (["generate", "--top-p", "0", "hi"], "top-p"),
    "top_p_above_one": (["generate", "--top-p", "1.5", "hi"], "top-p"),
    "bad_layers": (["generate", "--method", "layerskip", "--layers", "0,99", "hi"], "--layers"),
    "draft_without_model": (["generate", "--method", "draft", "hi"], "--draft-model"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(capsys, name):
    argv, expected = BAD_INPUTS[name]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len([l for l in lines if l.startswith("specdecode: error:")]) == 1, err
    assert expected in err
    assert "Traceback" not in err


def test_argument_error_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--max-draft-nodes", "notanumber", "hi"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid int value" in err[0]


def test_log_messages_go_to_stderr_as_it_is_when_they_come(monkeypatch):
    import io
    import logging

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    with pytest.raises(SystemExit):
        main(["--help-not-an-option"])  # makes the handler while stderr is `first`
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("specdecode").warning("a later message")
    assert "specdecode: a later message" in second.getvalue()
    assert "a later message" not in first.getvalue()


def test_prompt_longer_than_context_exits_2(capsys, tiny_real_vocab_model):
    code, _, err = run_cli(capsys, "generate", "--model", str(tiny_real_vocab_model), "--no-chat",
                           "word " * 200)
    assert code == 2 and "context window" in err and "Traceback" not in err


def test_a_draft_model_of_another_vocabulary_drafts_as_text_and_keeps_the_output(
        capsys, tiny_real_vocab_model, tiny_other_vocab_model):
    code, out, err = run_cli(capsys, "generate", "--model", str(tiny_real_vocab_model),
                             "--method", "draft", "--draft-model", str(tiny_other_vocab_model),
                             "--compare", "--max-new-tokens", "16", "hi")
    assert code == 0 and "Traceback" not in err, err
    assert "another tokenizer" in out and "greedy output token-identical: yes" in out


def test_process_exit_code_and_stderr_for_bad_input():
    proc = subprocess.run([sys.executable, "-m", "specdecode.app.cli", "generate", "--top-p", "2", "x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["specdecode: error: top-p must be in (0, 1], got 2.0"]


def test_an_unknown_or_unrunnable_kernel_path_is_a_one_line_error(tiny_real_vocab_model):
    proc = subprocess.run([sys.executable, "-m", "specdecode.app.cli", "generate", "--model",
                           str(tiny_real_vocab_model), "x"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "SPECDECODE_ISA": "sse9"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specdecode: error: SPECDECODE_ISA=sse9: unknown kernel path 'sse9' (choose "
        "avx512amx, avx512vnni, avx512, avx2vnni, avx2, neondot, neon, generic, torch)"]


def test_generate_json_reports_all_stats(capsys, tiny_real_vocab_model):
    import json

    code, out, _ = run_cli(capsys, "generate", "--model", str(tiny_real_vocab_model), "--method",
                           "lookup", "--json", "--compare", "--max-new-tokens", "12", "hello hello")
    assert code == 0
    obj = json.loads(out)
    assert set(obj) >= {"text", "token_ids", "method", "stats", "kernels"}
    assert obj["kernels"].split()[0] in ("avx512amx", "avx512vnni", "avx512", "avx2vnni", "avx2",
                                           "neondot", "neon", "generic", "torch")
    assert set(obj["stats"]) >= {"new_tokens", "target_forwards", "draft_forwards", "tau",
                                 "acceptance_rate", "tokens_per_second", "wall_seconds"}
    stats = obj["stats"]
    assert stats["tokens_per_second"] == pytest.approx(
        stats["new_tokens"] / stats["wall_seconds"], rel=1e-2)
    assert obj["compare"]["identical"] is True


def test_hub_id_when_hub_unreachable_exits_2_quickly(capsys, monkeypatch):
    import specdecode.models.loader as loader

    monkeypatch.setattr(loader, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    code, _, err = run_cli(capsys, "generate", "--model", "someorg/somemodel", "hi")
    assert code == 2 and "hub is unreachable" in err and len(err.strip().splitlines()) == 1


def test_generate_says_plainly_when_the_token_limit_cut_the_answer(capsys, tiny_real_vocab_model):
    code, out, _ = run_cli(capsys, "generate", "--model", str(tiny_real_vocab_model),
                           "--max-new-tokens", "5", "hello")
    assert code == 0
    assert "the answer was cut at --max-new-tokens 5" in out
    code, out, _ = run_cli(capsys, "generate", "--model", str(tiny_real_vocab_model),
                           "--max-new-tokens", "5", "--stop", "a", "--stop", "e", "--stop", "o",
                           "--stop", " ", "hello")
    assert code == 0
    assert "cut at" not in out
