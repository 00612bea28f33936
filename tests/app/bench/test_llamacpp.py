"""The llama.cpp peers: left out with a note where they cannot run, reproducible where they can;
the in-process binding runs in a child process, so a crash there (a segfault in llama.cpp) is one
line in the report while the benchmark keeps the other methods' rows and exits 0."""

import functools
import json

import peer_children
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


def test_the_peer_answers_through_its_child():
    peer = llamacpp.LlamaCppPeer("model.gguf", 1, 64, serve=peer_children.echo)
    assert peer.generate([5, 6, 7], 2, 0.0, 0, frozenset({2})) == ([5, 6], 0.001)
    peer.close()
    assert not peer.process.is_alive()


def test_a_crashed_child_is_one_line_and_stays_crashed():
    peer = llamacpp.LlamaCppPeer("model.gguf", 1, 64, serve=peer_children.segfault)
    for _ in range(2):
        with pytest.raises(llamacpp.PeerCrashed, match="crashed with signal 11"):
            peer.generate([5, 6, 7], 2, 0.0, 0, frozenset({2}))


@pytest.mark.real_model
def test_bench_keeps_the_other_rows_when_the_peer_crashes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llamacpp, "installed", lambda: True)
    monkeypatch.setattr(llamacpp, "LlamaCppPeer",
                        functools.partial(llamacpp.LlamaCppPeer, serve=peer_children.segfault))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "qa",
                                     "turns": ["Why is the sky blue?"]}))
    out = tmp_path / "out"
    assert main(["bench", "--model", "smollm2-135m", "--questions", str(questions),
                 "--methods", "ar,llamacpp", "--max-new-tokens", "4", "--repeats", "1",
                 "--out", str(out)]) == 0
    assert "llamacpp: crashed with signal 11; its rows are left out" in capsys.readouterr().err
    report = (out / "bench.md").read_text()
    assert "crashed with signal 11, its rows left out" in report
    summary = json.loads((out / "bench.json").read_text())["summary"]["overall"]
    assert list(summary) == ["ar"] and summary["ar"]["prompts"] == 1
