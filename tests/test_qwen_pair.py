"""End-to-end on the Qwen2.5-Coder pair (`make models`; no network): the 1.5B target writes
correct code natively, and its default drafter, the 0.5B, reduced vocabulary and all, keeps its
greedy tokens exactly. Loads about 1.6 GB: the slowest module of the suite."""

import pytest

from specdecode.models import load_model
from specdecode.pipeline import SpecDecoder

pytestmark = pytest.mark.real_model

PROMPT = ("Complete this Python function and return only the code.\n\n"
          "def fibonacci(n: int) -> int:\n"
          "    \"\"\"The n-th Fibonacci number, fibonacci(0) == 0, fibonacci(1) == 1.\"\"\"\n")


@pytest.fixture(scope="module")
def target():
    return load_model("qwen2.5-coder-1.5b")


@pytest.fixture(scope="module")
def plain(target):
    return SpecDecoder(target, "ar").generate(target.encode_prompt(PROMPT), max_new_tokens=48)


def test_the_native_1_5b_writes_the_function(target, plain):
    assert target.backend == "native" and target.drafter == "qwen2.5-coder-0.5b"
    text = target.decode(plain.token_ids)
    assert "def fibonacci(n: int) -> int:" in text and "return" in text


@pytest.mark.parametrize("options", [{}, {"draft_vocab": 32768, "draft_dtype": "q4_0"}],
                         ids=["as-stored", "cut-vocab-q4_0"])
def test_the_default_drafter_keeps_greedy_tokens_and_is_mostly_accepted(target, plain, options):
    decoder = SpecDecoder(target, "draft", **options)
    result = decoder.generate(target.encode_prompt(PROMPT), max_new_tokens=48)
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0.5 * result.stats.drafted > 0
