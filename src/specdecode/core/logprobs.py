"""Log-probabilities of the tokens a sequence confirms, and of its prompt's tokens.

Which distribution: the model's own, log_softmax of the target's raw logits at the row that
chose the token, before penalties, grammar masks, temperature and truncation (as OpenAI and vLLM
report them). Speculation has them for free: the forward that verified a token computed its row
(row 0 for the first token of a step, row i + 1 for the token after node i), and a row is the
same however many rows its forward held (`core.engine`), so they equal plain decoding's. A
prompt's come from its prefill's hidden states: the row of token j scores token j + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20  # OpenAI's limit on the alternatives reported per token


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the most likely tokens at its row, most likely first


def token_logprobs(logits: torch.Tensor, tokens: list[int], top: int) -> list[TokenLogprob]:
    """logits [R, V] (raw) of the rows that chose `tokens` (R of them) -> each token's
    log-probability and its row's `top` most likely tokens."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [R, V]
    chosen = logp.gather(-1, torch.tensor(tokens, dtype=torch.long)[:, None]).flatten().tolist()
    if top:
        values, ids = torch.topk(logp, top, dim=-1)  # [R, top]
        alternatives = [tuple(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())]
    else:
        alternatives = [()] * len(tokens)
    return [TokenLogprob(t, lp, alt) for t, lp, alt in zip(tokens, chosen, alternatives)]
