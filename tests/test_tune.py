"""`specdecode tune`: the fastest lossless configuration becomes the model's default."""

import json
from dataclasses import asdict

from specdecode.cli import main
from specdecode.models import load_model
from specdecode.profiles import save_profile_section
from specdecode.tune import NOISE, PROFILE_SECTION, Candidate, TunedDefaults, candidates, tune


def test_candidates_start_with_plain_decoding_and_add_a_draft_model_only_when_given(
        tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    found = candidates(model, None)
    assert found[0] == Candidate("ar")
    assert {c.method for c in found} == {"ar", "lookup"}
    assert {c.method for c in candidates(model, str(tiny_real_vocab_model))} >= {"draft"}


def test_tune_returns_the_fastest_configuration_or_the_default_within_noise(
        tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12]]
    result = tune(model, prompts, max_new_tokens=6)
    assert len(result.measured) == len(candidates(model, None))
    assert result.measured["ar"] == 1.0
    fastest = max(result.measured.values())
    best = [label for label, v in result.measured.items() if v == result.speedup][0]
    assert best.split()[0] == result.method
    assert result.speedup == fastest or (best == "lookup"
                                         and result.speedup * (1 + NOISE) >= fastest)


def run_generate(capsys, model_dir, *extra):
    assert main(["generate", "--model", str(model_dir), "--json", "--max-new-tokens", "3",
                 *extra, "hello"]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_uses_the_tuned_profile_unless_told_otherwise(
        tiny_real_vocab_model, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load_model(str(tiny_real_vocab_model))
    out = run_generate(capsys, tiny_real_vocab_model)
    assert out["method"] == "lookup" and out["defaults"] is None  # no profile: built-in default
    save_profile_section(model.key, PROFILE_SECTION, asdict(TunedDefaults("ar", speedup=1.0)))
    out = run_generate(capsys, tiny_real_vocab_model)
    assert out["method"] == "ar" and "tuned profile" in out["defaults"]
    out = run_generate(capsys, tiny_real_vocab_model, "--method", "lookup")
    assert out["method"] == "lookup" and out["defaults"] is None
