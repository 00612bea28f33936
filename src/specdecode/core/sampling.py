"""Logits processing shared by the target and every drafter.

There is exactly one implementation, so that the target distribution p and the draft distribution q
are processed identically (temperature, then min-p, top-k and top-p) before the verifier compares
them; speculative sampling is lossless only with respect to the *processed* p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. `temperature == 0` means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0 disables the filter
    top_p: float = 1.0  # 1.0 disables the filter
    min_p: float = 0.0  # 0 disables the filter

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise InvalidParameterError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidParameterError(f"top-k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise InvalidParameterError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise InvalidParameterError(f"min-p must be in [0, 1], got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Processed distribution over the vocabulary.

    p = softmax(top_p(top_k(min_p(logits / T)))), where min_p keeps the tokens at least min_p times
    as likely as the most likely one (after temperature, as vLLM applies it), top_k keeps the k
    largest logits and top_p keeps the smallest set of most likely tokens whose total probability
    reaches top_p (always at least one); filtered tokens get probability 0. Greedy params give the
    one-hot of the argmax.

    logits: [..., V]  ->  probs: [..., V] (float32, rows sum to 1)
    """
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if params.min_p > 0:  # p(t) >= min_p * p_max  <=>  l(t) >= l_max + log(min_p)
        floor = logits.max(-1, keepdim=True).values + torch.log(torch.tensor(params.min_p))
        logits = logits.masked_fill(logits < floor, float("-inf"))
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # mass strictly before each token; a token is kept while that mass is still below top_p
        before = sorted_probs.cumsum(-1) - sorted_probs
        drop_sorted = before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def greedy_tokens(logits: torch.Tensor) -> list[int]:
    """The argmax of each row (the first of equal maxima), logits: [R, V] -> R token ids. On the
    CPU by numpy, whose reduction over a large vocabulary is many times faster than torch's
    (docs/benchmarks/defaults)."""
    if logits.device.type == "cpu":
        return logits.detach().numpy().argmax(-1).tolist()
    return logits.argmax(-1).tolist()


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row, drawn with a uniform from `generator` (`sample_at`; torch.multinomial
    draws the same distribution, many times slower on a large vocabulary: docs/benchmarks/defaults).
    probs: [..., V] -> ids: [...]"""
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.rand(flat.shape[0], 1, dtype=torch.float64, device=flat.device, generator=generator)
    return sample_at(flat, u).reshape(probs.shape[:-1])


def sample_at(probs: torch.Tensor, u: torch.Tensor | float) -> torch.Tensor:
    """The token at `u` in [0, 1) of each row's cumulative distribution, in float64 (inverse
    transform sampling): the first token whose cumulative mass exceeds u times the row's total, so
    a token of probability 0 is never drawn. probs: [R, V] (or [V]), u: [R, 1] (or a float) ->
    ids: [R] (or [])"""
    cdf = probs.double().cumsum(-1)
    total = cdf[..., -1:]
    return torch.searchsorted(cdf, total * u, right=True).squeeze(-1)  # u < 1: ids < V


_MASK64 = (1 << 64) - 1


def keyed_uniform(seed: int, position: int) -> float:
    """A uniform in [0, 1) that depends on (seed, position) alone: a seeded request draws the
    token at each position with its own, so what it samples there does not depend on how many
    draws came before (how its drafts were shaped, what it was batched with, timing). Two
    rounds of SplitMix64 (Steele et al. 2014) over the pair; the top 53 bits make the float."""
    bits = _splitmix64(_splitmix64(seed & _MASK64) ^ (position & _MASK64))
    return (bits >> 11) / float(1 << 53)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)
