"""`specdecode tune`: every drafter's candidates, the fastest lossless configuration becomes the
model's default, and the layer search runs once per model as part of it."""

import json

from specdecode.app import layer_search
from specdecode.app.cli import main
from specdecode.app.tune import NOISE, PROFILE_SECTION, candidates, tune
from specdecode.drafters.layerskip import PROFILE_SECTION as LAYERSKIP_SECTION
from specdecode.models import load_model
from specdecode.models.timing import machine_key
from specdecode.profiles import load_profile, save_profile_section


def test_candidates_start_with_plain_decoding_and_add_a_draft_model_only_when_given(
        tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    found = candidates(model, None)
    assert found[0].method == "ar" and found[1].method == "lookup" and found[1].max_draft_depth is None
    # no heads, no skip set for this model: the training-free drafters only
    assert {c.method for c in found} == {"ar", "lookup", "suffix"}
    assert len({c.label() for c in found}) == len(found)
    assert {c.method for c in candidates(model, str(tiny_real_vocab_model))} >= {"draft"}


def test_tune_returns_the_fastest_configuration_or_the_default_within_noise(
        tiny_real_vocab_model):
    model = load_model(str(tiny_real_vocab_model))
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12]]
    result = tune(model, prompts, max_new_tokens=6)
    assert len(result["measured"]) == len(candidates(model, None))
    assert result["measured"]["ar"] == 1.0
    fastest = max(result["measured"].values())
    assert result["label"].split()[0] == result["method"]
    assert result["speedup"] == fastest or (result["label"] == "lookup"
                                            and result["speedup"] * (1 + NOISE) >= fastest)


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
    label = "lookup max-draft-depth=3 ngram-max=2"
    save_profile_section(model.key, PROFILE_SECTION, {"method": "lookup", "max_draft_depth": 3,
                                                      "options": {"ngram_max": 2},
                                                      "label": label, "speedup": 1.1})
    out = run_generate(capsys, tiny_real_vocab_model)
    assert out["method"] == "lookup" and label in out["defaults"]
    out = run_generate(capsys, tiny_real_vocab_model, "--method", "ar")
    assert out["method"] == "ar" and out["defaults"] is None


def test_a_profile_tuned_on_other_kernels_or_another_cpu_is_set_aside_with_a_warning(
        tiny_real_vocab_model, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load_model(str(tiny_real_vocab_model))
    result = tune(model, [[5, 6, 7, 5, 6, 7, 5, 6]], max_new_tokens=4)
    assert result["machine"] == machine_key(model)  # what it was measured on, kept with it
    label = "lookup max-draft-depth=3 ngram-max=2"
    tuned = {"method": "lookup", "max_draft_depth": 3, "options": {"ngram_max": 2},
             "label": label, "speedup": 1.1}
    save_profile_section(model.key, PROFILE_SECTION, {**tuned, "machine": machine_key(model)})
    assert label in run_generate(capsys, tiny_real_vocab_model)["defaults"]
    elsewhere = machine_key(model).replace(model.kernels, "avx2 (OpenMP, 64 threads)")
    save_profile_section(model.key, PROFILE_SECTION, {**tuned, "machine": elsewhere})
    assert main(["generate", "--model", str(tiny_real_vocab_model), "--json",
                 "--max-new-tokens", "3", "hello"]) == 0
    printed = capsys.readouterr()
    out = json.loads(printed.out)
    assert out["method"] == "lookup" and out["defaults"] is None  # the built-in default
    assert "the tuned profile was measured on" in printed.err


def test_the_layer_search_runs_once_per_model_unless_asked_again(tiny_real_vocab_model,
                                                                  monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDECODE_CACHE", str(tmp_path))
    model = load_model(str(tiny_real_vocab_model))
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12]]
    searched = []
    original = layer_search.search_layers
    monkeypatch.setattr(layer_search, "search_layers",
                        lambda *args: searched.append(1) or original(*args, new_tokens=4))
    profile = layer_search.search_layers_once(model, prompts=prompts)
    assert load_profile(model.key)[LAYERSKIP_SECTION] == profile and len(searched) == 1
    assert set(profile) >= {"layers", "k", "best_speedup", "best_layers", "agreement"}
    assert layer_search.search_layers_once(model, prompts=prompts) == profile
    assert len(searched) == 1
    layer_search.search_layers_once(model, redo=True, prompts=prompts)
    assert len(searched) == 2
