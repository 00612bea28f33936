"""The autoregressive chain a one-token-at-a-time drafter (a draft model, a layer-skipping copy of
the target) proposes: the shared algorithm behind `draft_model`, `layerskip` and
`cross_tokenizer`, token by token under the grammar's mask where there is one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core.constraint import Constraint, allowed, mask_words
from ..core.drafter import Draft
from ..core.sampling import SamplingParams, greedy_tokens, probabilities


def draft_chain(
    forward: Callable[[torch.Tensor], torch.Tensor],
    first: torch.Tensor,
    length: int,
    params: SamplingParams,
    draw: Callable[[torch.Tensor, int], torch.Tensor] | None,
    vocabulary: torch.Tensor | None = None,
    vocab_size: int | None = None,
    stop_below: float = 0.0,
    constraint: Constraint | None = None,
) -> Draft:
    """Autoregressive drafting with any causal model: feed `first` ([T] int64, T >= 1), then take
    up to `length` tokens one at a time, each from q = probabilities(draft logits) (the argmax
    when greedy) by `draw(q, i)` for the i-th token (`SequenceState.draw`; q over the target's
    token ids, None when greedy). A token's chance is the product of the draft model's probabilities of the
    tokens up to it (its confidence that the whole path is right, as EAGLE-2 ranks its nodes);
    drafting stops before a token whose chance is below `stop_below`. The draft's `forwards`
    counts the calls of `forward`; every drafted token but the last has been fed (the last too
    when drafting stopped early).

    `forward` appends tokens to the draft model's cache and returns logits [T', V'] whose last
    row is the last token's (`core.target.forward_last`: that row alone).
    `vocabulary`: [V'] int64, the token id each logits column scores (a drafter whose output layer
    covers only some tokens), None: column i is token i. The draft's q are then over all
    `vocab_size` ids, zero outside `vocabulary`: a token is drafted from exactly that q.

    `constraint` (the sequence's grammar, left where it was found): the draft model drafts under
    it, from its logits masked to what the grammar allows (q is then that masked distribution,
    exactly what the token was drawn from), and a span the grammar forces is taken whole, at
    its state's one choice (q one-hot: the proposal is certain given the path), and fed in one
    forward."""
    tokens: list[int] = []
    qs, chances, forced = [], [], 0
    logits, forwards, chance = forward(first)[-1], 1, 1.0
    size = vocab_size or logits.shape[-1]
    try:
        while len(tokens) < length:
            span = constraint.take_forced(length - len(tokens)) if constraint else []
            if span:
                tokens += span
                forced += len(span)
                chances += [chance] * len(span)
                if not params.greedy:
                    qs += [torch.nn.functional.one_hot(torch.tensor(t), size).float()
                           for t in span]
                if len(tokens) < length:
                    logits, forwards = forward(torch.tensor(span))[-1], forwards + 1
                continue
            if constraint is not None:
                logits = _masked(constraint, logits, vocabulary, size)
                if logits is None:  # nothing the grammar allows is in the draft's vocabulary
                    break
            if params.greedy:
                pick = torch.tensor(greedy_tokens(logits[None])[0], device=logits.device)
                chance *= float(torch.softmax(logits.float(), -1)[pick])
            else:
                q = probabilities(logits, params)
                if vocabulary is not None:
                    q = torch.zeros(size, dtype=q.dtype).index_copy_(0, vocabulary, q)
                pick = draw(q, len(tokens))
                chance *= float(q[pick])
            if chance < stop_below:
                break
            token = int(pick if vocabulary is None or not params.greedy else vocabulary[pick])
            if constraint is not None:
                constraint.accept(token)
            if not params.greedy:
                qs.append(q)
            tokens.append(token)
            chances.append(chance)
            if len(tokens) < length:
                logits, forwards = forward(torch.tensor([token]))[-1], forwards + 1
    finally:
        if constraint is not None and tokens:
            constraint.rollback(len(tokens))
    if not tokens:
        return Draft(torch.empty(0, dtype=torch.long), None, forwards)
    q = torch.stack(qs) if qs else None
    return Draft(torch.tensor(tokens, dtype=torch.long), q, forwards,
                 chances=torch.tensor(chances), forced=forced)


def _masked(constraint: Constraint, logits: torch.Tensor, vocabulary: torch.Tensor | None,
            size: int) -> torch.Tensor | None:
    """logits [V'] with -inf where the grammar forbids the column's token; None when it allows
    none of them."""
    bits = torch.empty(1, mask_words(size), dtype=torch.int32)
    constraint.fill(bits, 0)
    ok = allowed(bits, size)[0]
    if vocabulary is not None:
        ok = ok[vocabulary]
    if not bool(ok.any()):
        return None
    return logits.masked_fill(~ok, float("-inf"))
