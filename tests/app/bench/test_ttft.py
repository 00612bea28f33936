"""`specdecode bench --ttft`: a recorded agent request read cold, from the server's memory and
from disk after a restart, on real servers of a tiny model."""

import json

import pytest

from specdecode.app.bench.ttft import _without_ids, prompt_tokens, read_request
from specdecode.app.cli import main

SYSTEM = "You are a coding agent. Follow the rules below. " * 8


def test_a_recorded_request_is_answered_cold_from_memory_and_from_disk_alike(
        tmp_path, tiny_real_vocab_model, capsys):
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"method": "POST", "path": "/v1/chat/completions?x=1",
                                   "body": json.dumps({"model": "agent", "stream": True,
                                                       "messages": [
                                                           {"role": "system", "content": SYSTEM},
                                                           {"role": "user", "content": "Go."}]})}))
    assert main(["bench", "--ttft", str(request), "--model", str(tiny_real_vocab_model),
                 "--threads", "1"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    prompt = int(lines["cold"].split("prompt ")[1].split()[0])
    assert ", 0 from the cache" in lines["cold"]
    for phase in ("memory", "disk,"):  # all of the prompt but its last token kept
        assert f"prompt {prompt} tokens, {prompt - 1} from the cache" in lines[phase]
    assert "the same token in all three" in out


def test_each_routes_usage_gives_the_prompt_and_its_cached_tokens():
    assert prompt_tokens({"input_tokens": 10, "cache_read_input_tokens": 90}) == (100, 90)
    assert prompt_tokens({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 9}}) == (
        100, 9)
    assert prompt_tokens({"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}) == (
        7, 0)


@pytest.mark.parametrize("recorded", ['{"path": "/v1/embeddings", "body": {}}', '{"body": {}}',
                                      "not json"])
def test_a_request_that_cannot_be_replayed_is_a_one_line_error(tmp_path, recorded, capsys):
    path = tmp_path / "r.json"
    path.write_text(recorded)
    assert main(["bench", "--ttft", str(path)]) == 2
    assert "--ttft" in capsys.readouterr().err


def test_a_replayed_request_is_one_greedy_token_not_streamed(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"path": "/v1/responses", "body": {"input": "hi", "stream": True,
                                                                 "max_output_tokens": 900}}))
    route, body = read_request(str(path))
    assert route == "/v1/responses"
    assert body == {"input": "hi", "stream": False, "temperature": 0, "max_output_tokens": 1}


def test_answers_are_compared_without_the_ids_each_response_draws():
    a = [{"id": "msg_1", "type": "message", "content": [{"type": "output_text", "text": "x"}]},
         {"id": "fc_1", "call_id": "call_1", "type": "function_call", "name": "f"}]
    b = [{"id": "msg_2", "type": "message", "content": [{"type": "output_text", "text": "x"}]},
         {"id": "fc_2", "call_id": "call_2", "type": "function_call", "name": "f"}]
    assert _without_ids(a) == _without_ids(b) != _without_ids([{**b[0], "content": []}, b[1]])

