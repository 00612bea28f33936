"""A new drafter is one class in one file: registered with `@register`, its options declared in
its own `Options`, it is usable through the CLI's `generate` (with its own flag), `bench
--methods` and the server's `speculative.method`, with no other change. The toy drafter below is
registered from this test module."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from specdecode.app.cli import main
from specdecode.app.server import create_app
from specdecode.drafters import DRAFTERS, Draft, Drafter, option, register
from specdecode.errors import InvalidParameterError
from specdecode.models import load_model


class Repeat(Drafter):
    """Proposes the last token again, `toy_copies` times."""

    @dataclass(frozen=True)
    class Options:
        toy_copies: int = option(2, "copies of the last token to propose")

        def __post_init__(self) -> None:
            if self.toy_copies < 1:
                raise InvalidParameterError("--toy-copies must be >= 1")

    def __init__(self, copies: int) -> None:
        self.copies = copies

    @classmethod
    def create(cls, model, options: Options) -> "Repeat":
        return cls(options.toy_copies)

    def propose(self, seq, budget) -> Draft:
        return Draft(seq.context[-1:].repeat(min(budget.nodes, budget.depth, self.copies)), None)


@pytest.fixture
def toy():
    register("toy")(Repeat)
    yield "toy"
    DRAFTERS.pop("toy")


def test_the_toy_drafter_runs_through_generate_with_its_own_flag(toy, capsys,
                                                                 tiny_real_vocab_model):
    assert main(["generate", "--model", str(tiny_real_vocab_model), "--method", "toy",
                 "--toy-copies", "3", "--json", "--compare", "--max-new-tokens", "12",
                 "hello hello hello"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "toy" and out["compare"]["identical"] is True
    assert out["stats"]["drafted"] > 0
    assert main(["generate", "--model", str(tiny_real_vocab_model), "--method", "toy",
                 "--toy-copies", "0", "hi"]) == 2
    assert "--toy-copies must be >= 1" in capsys.readouterr().err


def test_the_toy_drafter_runs_in_bench(toy, capsys, tmp_path, tiny_real_vocab_model):
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question_id": 2, "category": "translation",
                                     "turns": ["Translate: Hallo Welt"]}) + "\n")
    assert main(["bench", "--model", str(tiny_real_vocab_model), "--questions", str(questions),
                 "--limit", "1", "--methods", "ar,toy", "--max-new-tokens", "6", "--repeats", "1",
                 "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert "toy" in report["info"]["methods"]
    assert report["audit"] == []  # greedy output identical to plain decoding's


def test_the_toy_drafter_serves_requests_that_name_it(toy, tiny_real_vocab_model):
    with TestClient(create_app(load_model(str(tiny_real_vocab_model)))) as client:
        response = client.post("/v1/completions", json={
            "prompt": "a b a b a b", "max_tokens": 8, "temperature": 0,
            "speculative": {"method": "toy"}})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["speculative"]["method"] == "toy"
