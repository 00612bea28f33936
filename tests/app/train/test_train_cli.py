"""`specdecode train` end to end on a tiny model, and its one-line errors."""

import json

import pytest

from specdecode.app.cli import main
from specdecode.app.train import run as train_run
from specdecode.drafters import create_drafter, make_options
from specdecode.models import load_model
from specdecode.models.heads import load_head

WORDS = "red green blue cat dog sun moon tree fish bird".split()


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [{"id": f"{source}-{i}", "prompt": f"{WORDS[i]} {source}", "source": source}
            for source in ("math", "chat") for i in range(len(WORDS))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(capsys, *argv):
    code = main(["train", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("method", ["eagle", "medusa"])
def test_train_writes_a_head_its_drafter_runs_and_resume_redoes_nothing(
        capsys, tmp_path, prompts, tiny_real_vocab_model, method):
    out = tmp_path / "run"
    argv = [method, "--model", str(tiny_real_vocab_model), "--prompts", str(prompts),
            "--out", str(out), "--num-prompts", "6", "--val-prompts", "2", "--max-new-tokens", "8",
            "--epochs", "2", "--draft-vocab", "300", "--medusa-heads", "2", "--batch-size", "2"]
    code, stdout, err = _train(capsys, *argv)
    assert code == 0, err
    assert "validation τ" in stdout and "Traceback" not in err
    head = load_head(out / "head", method)
    info = head.cfg["training"]
    assert len(head.cfg["draft_vocab"]) == 300 and head.cfg["target"] == str(tiny_real_vocab_model)
    assert info["train_prompts"] == 6 and info["val_prompts"] == 2
    assert [e["epoch"] for e in info["history"]] == [1, 2]
    assert info["validation_tau"]["tau"] >= 1.0
    model = load_model(str(tiny_real_vocab_model))
    create_drafter(method, model, make_options(method, {"draft_model": str(out / "head")}))

    answers = (out / "answers.jsonl").read_text()
    code, _, err = _train(capsys, *argv, "--resume")
    assert code == 0, err
    assert (out / "answers.jsonl").read_text() == answers
    assert len(list((out / "features").iterdir())) == 1  # no shard recomputed
    resumed = load_head(out / "head", method).cfg["training"]
    assert resumed["history"] == info["history"] and resumed["resumed"]

    code, _, err = _train(capsys, *argv, "--resume", "--lr", "0.01")  # a training setting
    assert code == 0 and "training starts over" in err, err
    assert (out / "answers.jsonl").read_text() == answers
    retrained = load_head(out / "head", method).cfg["training"]
    assert [e["epoch"] for e in retrained["history"]] == [1, 2] and retrained["lr"] == 0.01


BAD = {
    "missing_prompts": (["--prompts", "/nonexistent/p.jsonl"], "cannot read prompts file"),
    "zero_prompts": (["--num-prompts", "0"], "--num-prompts must be >= 1"),
    "zero_epochs": (["--epochs", "0"], "--epochs must be >= 1"),
    "negative_vocab": (["--draft-vocab", "-1"], "--draft-vocab must be >= 0"),
    "bad_lr": (["--lr", "0"], "--lr must be > 0"),
    "too_many_prompts": (["--num-prompts", "500", "--max-new-tokens", "8"], "only 20 prompts"),
    "answers_fill_context": (["--max-new-tokens", "128"], "leaves no room"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_exit_2(capsys, tmp_path, prompts, tiny_real_vocab_model, name):
    extra, expected = BAD[name]
    argv = ["eagle", "--model", str(tiny_real_vocab_model), "--prompts", str(prompts),
            "--out", str(tmp_path / "run"), *extra]
    code, _, err = _train(capsys, *argv)
    assert code == 2
    assert err.strip().count("\n") == 0 and expected in err, err
    assert not (tmp_path / "run").exists()  # nothing written: the corrected command just runs


def test_a_used_out_dir_needs_resume_and_the_same_data_settings(capsys, tmp_path, prompts,
                                                           tiny_real_vocab_model):
    out = tmp_path / "run"
    out.mkdir()
    (out / train_run.RUN_FILE).write_text(json.dumps({"num_prompts": 3}))
    argv = ["eagle", "--model", str(tiny_real_vocab_model), "--prompts", str(prompts),
            "--out", str(out), "--num-prompts", "4", "--val-prompts", "2", "--max-new-tokens", "8"]
    code, _, err = _train(capsys, *argv)
    assert code == 2 and "pass --resume" in err and err.count("\n") == 1
    code, _, err = _train(capsys, *argv, "--resume")
    assert code == 2 and "other settings" in err and err.count("\n") == 1


def test_unknown_kind_and_missing_out_are_one_line_argument_errors(capsys):
    for argv in (["draft", "--out", "x", "--prompts", "p"], ["eagle", "--prompts", "p"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["train", *argv])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_train_without_prompts_reads_the_shipped_ones(capsys, tmp_path, tiny_real_vocab_model):
    """A fresh install trains from the prompts shipped with the package (none is Spec-Bench's)."""
    from specdecode.app.bench.specbench import load_questions
    from specdecode.app.train.data import read_prompts, shipped_prompts

    records = read_prompts(shipped_prompts())
    assert len(records) == 11949 and {"MIT", "Apache-2.0"} <= {r["license"] for r in records}
    turns = {t.strip() for q in load_questions() for t in q["turns"]}
    assert not turns & {r["prompt"].strip() for r in records}
    out = tmp_path / "run"
    code, stdout, err = _train(capsys, "eagle", "--model", str(tiny_real_vocab_model), "--out",
                               str(out), "--num-prompts", "4", "--val-prompts", "2",
                               "--max-new-tokens", "4", "--epochs", "1", "--draft-vocab", "300")
    assert code == 0, err
    assert "validation τ" in stdout
    settings = json.loads((out / train_run.RUN_FILE).read_text())
    assert settings["prompts"] == str(shipped_prompts().resolve())
