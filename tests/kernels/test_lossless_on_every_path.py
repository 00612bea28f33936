"""End to end on every kernel path: greedy output of `lookup`, `eagle` and `medusa` equals plain
greedy output token for token, through the whole loop (chain and tree steps, cache compaction).
That logits are bitwise equal, so that no near tie can flip a token on a real model, is
tests/models/test_decoder.py's test on every path."""

from __future__ import annotations

import pytest
import torch

from specdecode.core.engine import generate
from specdecode.core.sampling import SamplingParams
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.drafters.eagle import Eagle
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.medusa import Medusa
from specdecode.drafters.plain import NoDrafter
from specdecode.models.heads import EagleHead, MedusaHeads
from specdecode.models.decoder import NativeDecoder

V = 48
PROMPT = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9, 10, 11, 5, 6, 7]  # repeats: lookup finds matches


def _random(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


def _drafters(target: NativeDecoder, model) -> dict:
    """name -> (drafter, its caps)"""
    cfg = target.layer_shape()
    return {
        "lookup": (PromptLookup(3, 1), DraftLimit(7, 7)),
        "eagle": (Eagle(target, _random(EagleHead(cfg), 1), topk=3), DraftLimit(6, 3)),
        "medusa": (Medusa(target, _random(MedusaHeads({**cfg, "num_heads": 3}), 2)),
                   DraftLimit(6, 3)),
    }


@pytest.mark.parametrize("kv", [torch.float32, torch.float16], ids=["fp32-cache", "fp16-cache"])
@pytest.mark.parametrize("method", ["lookup", "eagle", "medusa"])
def test_greedy_speculative_output_equals_plain_greedy_output_on_every_path(kernel_path, method,
                                                                           kv, tiny_llama):
    model = tiny_llama(21, vocab=V, layers=2)
    config = GenerationConfig(40, SamplingParams())
    plain = generate(NativeDecoder.from_hf(model, kernels=kernel_path, kv_dtype=kv), NoDrafter(),
                     PROMPT, config, None)
    target = NativeDecoder.from_hf(model, kernels=kernel_path, kv_dtype=kv)
    drafter, limit = _drafters(target, model)[method]
    result = generate(target, drafter, PROMPT, config, limit)
    assert result.token_ids == plain.token_ids
    assert result.stats.accepted > 0  # verification steps of several rows were kept


@pytest.mark.parametrize("kv", [torch.float32, torch.float16], ids=["fp32-cache", "fp16-cache"])
def test_sixteen_batched_greedy_requests_equal_each_request_alone_on_every_path(kernel_path, kv,
                                                                                tiny_llama):
    """Mixed prompts and methods (plain, lookup, suffix, eagle, medusa trees) in one batch, the
    draft rows chosen for the whole batch by cost: every request's tokens are those it gets alone
    (where it drafts differently), so a request's output never depends on the load."""
    from specdecode.core.batch import Request, generate_batch
    from specdecode.core.cost import StepCost
    from specdecode.drafters.suffix import SuffixTree

    model = tiny_llama(21, vocab=V, layers=2)
    target = NativeDecoder.from_hf(model, kernels=kernel_path, kv_dtype=kv)
    drafters = {name: pair for name, pair in _drafters(target, model).items()}
    drafters["plain"] = (NoDrafter(), None)
    drafters["suffix"] = (SuffixTree(SuffixTree.Options(memory_tokens=0)), DraftLimit(8, 8))
    names = sorted(drafters)
    cost = StepCost.linear(0.05)
    requests = []
    for i in range(16):
        drafter, limit = drafters[names[i % len(names)]]
        prompt = PROMPT[i % 5 :] + [12 + i % 7, 13, 5 + i % 3]
        requests.append(Request(prompt, GenerationConfig(12 + 5 * (i % 4), SamplingParams()),
                                drafter, limit and DraftLimit(limit.nodes, limit.depth)))
    alone = [generate(target, r.drafter, r.prompt, r.config, r.limit, cost=cost).token_ids
             for r in requests]
    together = generate_batch(target, requests, max_batch=16, cost=cost)
    assert [r.token_ids for r in together] == alone
    assert sum(r.stats.accepted for r in together) > 0
