"""Log-probabilities of the tokens a sequence confirms, and of its prompt's tokens.

Which distribution: the model's own, log_softmax of the target's raw logits at the row that
chose the token, before penalties, grammar masks, temperature and truncation (as OpenAI and vLLM
report them); or, asked for (`GenerationConfig.sampled_logprobs`, llama.cpp's
post_sampling_probs), the one the token was drawn from, after all of them (`sampled`).
Speculation has them for free: the forward that verified a token computed its row (row 0 for the
first token of a step, row i + 1 for the token after node i), and a row is the same however many
rows its forward held (`core.engine`), so they equal plain decoding's. A prompt's come from its
prefill's hidden states: the row of token j scores token j + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .sampling import SamplingParams, probabilities

MAX_TOP_LOGPROBS = 20  # OpenAI's limit on the alternatives reported per token


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the most likely tokens at its row, most likely first


def token_logprobs(logits: torch.Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """logits [R, V] (raw, or `sampled`'s) of the rows that chose `tokens` (R of them) -> each
    token's log-probability and its row's `top` most likely tokens (those with any chance)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [R, V]
    chosen = logp.gather(-1, torch.tensor(tokens, dtype=torch.long)[:, None]).flatten().tolist()
    if top:
        values, ids = torch.topk(logp, top, dim=-1)  # [R, top]
        alternatives = [tuple((i, v) for i, v in zip(row_ids, row_values) if v > -math.inf)
                        for row_ids, row_values in zip(ids.tolist(), values.tolist())]
    else:
        alternatives = [()] * len(tokens)
    return [TokenLogprob(t, lp, alt) for t, lp, alt in zip(tokens, chosen, alternatives)]


def sampled(processed: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """processed [R, V]: logits after penalties and the grammar's masks -> the log-probabilities
    of the distribution a token is drawn from there (greedy: 0 at the argmax, -inf elsewhere)."""
    if sampling.greedy:
        out = torch.full_like(processed, -math.inf, dtype=torch.float32)
        return out.scatter_(-1, processed.argmax(-1, keepdim=True), 0.0)
    return torch.log(probabilities(processed, sampling))
