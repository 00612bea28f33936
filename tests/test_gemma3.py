"""End-to-end on Gemma 3 270M (`gemma3-270m`, `make models`; no network), natively: it continues
a sentence sensibly, and lookup, suffix and a batch of requests keep its greedy tokens exactly
(its sliding-window layers, GeGLU and four norms a layer on the same kernels as plain decoding)."""

import pytest

from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

pytestmark = pytest.mark.real_model

# repeats itself, so lookup and suffix find drafts in the prompt
PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef")


@pytest.fixture(scope="module")
def model():
    return load_model("gemma3-270m")


@pytest.fixture(scope="module")
def plain(model):
    return SpecDecoder(model, "ar").generate(model.encode_prompt(PROMPT, chat=False),
                                             max_new_tokens=40)


def test_gemma3_runs_natively_and_continues_the_code(model, plain):
    assert model.backend == "native" and model.target.family.name == "gemma3"
    assert "return a" in model.decode(plain.token_ids)


@pytest.mark.parametrize("method", ["lookup", "suffix"])
def test_gemma3_drafters_keep_its_greedy_tokens(model, plain, method):
    result = SpecDecoder(model, method).generate(model.encode_prompt(PROMPT, chat=False),
                                                 max_new_tokens=40)
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0


def test_gemma3_in_a_batch_keeps_each_requests_greedy_tokens(model, plain):
    other = "The three primary colours are"
    prompts = [model.encode_prompt(p, chat=False) for p in (PROMPT, other, PROMPT)]
    alone = SpecDecoder(model, "ar").generate(prompts[1], max_new_tokens=40)
    results = SpecDecoder(model, "lookup").generate_batch(prompts, max_new_tokens=40, max_batch=3)
    assert [r.token_ids for r in results] == [plain.token_ids, alone.token_ids, plain.token_ids]
