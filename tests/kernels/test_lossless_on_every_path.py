"""End to end on every kernel path: greedy output of `lookup`, `eagle` and `medusa` equals plain
greedy output token for token, through the whole loop (chain and tree steps, cache compaction).
That logits are bitwise equal, so that no near tie can flip a token on a real model, is
tests/models/test_llama.py's test on every path."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLength, GenerationConfig
from specdecode.drafters.eagle import Eagle
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.medusa import Medusa
from specdecode.drafters.plain import NoDrafter
from specdecode.models.heads import EagleHead, MedusaHeads
from specdecode.models.llama import NativeLlama

V = 48
PROMPT = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9, 10, 11, 5, 6, 7]  # repeats: lookup finds matches


def _random(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


def _drafters(target: NativeLlama, model) -> dict:
    cfg = target.layer_shape()
    return {
        "lookup": (PromptLookup(3, 1), 7),
        "eagle": (Eagle(target, _random(EagleHead(cfg), 1), topk=3, nodes=6), 3),
        "medusa": (Medusa(target, _random(MedusaHeads({**cfg, "num_heads": 3}), 2), 6), 3),
    }


@pytest.mark.parametrize("method", ["lookup", "eagle", "medusa"])
def test_greedy_speculative_output_equals_plain_greedy_output_on_every_path(kernel_path, method,
                                                                           tiny_llama):
    model = tiny_llama(21, vocab=V, layers=2)
    config = GenerationConfig(40, SamplingParams())
    plain = generate(NativeLlama.from_hf(model, kernels=kernel_path), NoDrafter(), PROMPT, config,
                     None)
    target = NativeLlama.from_hf(model, kernels=kernel_path)
    drafter, k = _drafters(target, model)[method]
    result = generate(target, drafter, PROMPT, config, DraftLength(k))
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0  # verification steps of several rows were kept
