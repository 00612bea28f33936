"""Tiny training data: a tiny random Llama's own greedy continuations of random prompts."""

from __future__ import annotations

import torch

from specdecode.app.train.objectives import TrainSequence
from specdecode.models.decoder import NativeDecoder
from specdecode.core.target import forward


def tiny_target(make_tiny_llama, seed: int = 0) -> NativeDecoder:
    return NativeDecoder.from_hf(make_tiny_llama(seed, vocab=64))


def greedy_answer(target: NativeDecoder, prompt: list[int], length: int) -> list[int]:
    cache = target.new_cache()
    logits = forward(target, cache, torch.tensor(prompt))
    answer = []
    for _ in range(length):
        answer.append(int(logits[-1].argmax()))
        logits = forward(target, cache, torch.tensor(answer[-1:]))
    return answer


def tiny_sequences(target: NativeDecoder, count: int, seed: int = 0) -> list[TrainSequence]:
    """`count` sequences: a random prompt of 4-8 tokens + the target's 12-token greedy answer,
    with the target's teacher-forced features."""
    g = torch.Generator().manual_seed(seed)
    sequences = []
    for _ in range(count):
        prompt = torch.randint(0, 64, (int(torch.randint(4, 9, (1,), generator=g)),),
                               generator=g).tolist()
        ids = prompt + greedy_answer(target, prompt, 12)
        hidden = target.prefill(target.new_cache(), torch.tensor(ids)).to(torch.bfloat16).clone()
        sequences.append(TrainSequence(torch.tensor(ids), hidden, len(prompt)))
    return sequences
