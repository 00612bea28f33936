"""llama.cpp's answer shapes (`llamacpp_format`)."""

from __future__ import annotations

from specdecode.app.server.llamacpp_format import fields, probabilities, timings


def test_response_fields_flatten_the_paths_asked_and_skip_the_missing():
    answer = {"content": "x", "timings": {"prompt_n": 3}, "truncated": False}
    assert fields(answer, ["content", "timings/prompt_n", "timings/nope", ""]) == {
        "content": "x", "timings/prompt_n": 3}
    assert fields(answer, None) is answer
    assert fields(answer, []) is answer  # llama.cpp's own tests send [] for the whole answer


def test_probabilities_give_each_token_and_its_alternatives_with_text_and_bytes():
    pieces = {5: b"hi", 6: b"\xe2\x82", 7: b" a"}
    out = probabilities([(5, -0.1, ((5, -0.1), (6, -2.5))), (7, -1.0, ())], pieces)
    assert out[0] == {"id": 5, "token": "hi", "bytes": [104, 105], "logprob": -0.1,
                      "top_logprobs": [{"id": 5, "token": "hi", "bytes": [104, 105],
                                        "logprob": -0.1},
                                       {"id": 6, "token": "\ufffd", "bytes": [226, 130],
                                        "logprob": -2.5}]}
    assert out[1]["top_logprobs"] == [] and out[1]["token"] == " a"


def test_timings_count_the_cached_prompt_apart_and_report_the_drafts():
    t = timings(10, 4, 5, 0.5, 1.0, {"drafted": 8, "accepted": 3})
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (4, 6, 5)
    assert t["prompt_per_second"] == 12.0 and t["predicted_per_second"] == 5.0
    assert (t["draft_n"], t["draft_n_accepted"]) == (8, 3)
