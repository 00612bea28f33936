"""The llama.cpp peers: left out with a note where they cannot run, reproducible where they can."""

import json

import pytest

from specdecode.app.bench import llamacpp
from specdecode.app.cli import main
from specdecode.models.loader import gguf_file


def test_bench_leaves_llamacpp_out_with_a_note_for_a_model_without_gguf(
        tmp_path, tiny_real_vocab_model, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["Hi?"]}))
    out = tmp_path / "out"
    assert main(["bench", "--model", str(tiny_real_vocab_model), "--questions", str(questions),
                 "--limit", "1", "--methods", "ar,llamacpp", "--max-new-tokens", "4",
                 "--repeats", "1", "--out", str(out)]) == 0
    assert "leaving out llamacpp" in capsys.readouterr().err
    methods = {json.loads(line)["method"] for line in (out / "records.jsonl").read_text().splitlines()}
    assert methods == {"ar"}


@pytest.mark.skipif(not llamacpp.installed(), reason="llama-cpp-python not installed (peers extra)")
@pytest.mark.real_model
@pytest.mark.parametrize("lookup_tokens", [None, 10], ids=["plain", "lookup"])
def test_llamacpp_greedy_is_reproducible_stops_at_max_new_and_drops_eos(default_model,
                                                                        lookup_tokens):
    real_model = default_model
    peer = llamacpp.LlamaCppPeer(gguf_file("smollm2-135m"), 2, 1024, lookup_tokens)
    ids = real_model.encode_prompt("Name three colours.")
    first, seconds = peer.generate(ids, 24, 0.0, 0, real_model.eos_token_ids)
    again, _ = peer.generate(ids, 24, 0.0, 1, real_model.eos_token_ids)
    assert first == again and 0 < len(first) <= 24 and seconds > 0
    assert not set(first) & real_model.eos_token_ids
    assert real_model.decode(first).strip()
