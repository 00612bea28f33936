"""Greedy equality audit, as Spec-Bench's `equal.py` but stronger: every output is compared token
by token with our plain decoding, and where two part, the target's top-2 logit margin at that
position tells a numerical tie (two near-equal logits that rounding can swap) from a bug."""

from __future__ import annotations

import torch

from ...core.target import forward
from ...models import LoadedModel
from .records import Record
from .specbench import PEERS, UNAUDITED

TIE_MARGIN = 1e-4  # a mismatch is explained only when the top-2 logits are closer than this


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix), or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_margin(model: LoadedModel, context: list[int]) -> float:
    """logit[top1] - logit[top2] of the target's next-token distribution after `context`."""
    target, cache = model.target, model.target.new_cache()
    target.prefill(cache, torch.tensor(context[:-1]))
    logits = forward(target, cache, torch.tensor(context[-1:]))[-1]  # [V]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def greedy_audit(model: LoadedModel, records: list[Record],
                 prompts: dict[tuple[int, int], list[int]]) -> list[dict]:
    """Every (prompt, method) whose first repeat differs from `ar`'s, with where and the margin.
    prompts: (question_id, turn) -> prompt token ids."""
    first = {}
    for r in records:
        if r.repeat == 0:
            first[(r.question_id, r.turn, r.method)] = r
    found = []
    for (qid, turn, method), r in sorted(first.items()):
        reference = first.get((qid, turn, "ar"))
        if method in ("ar", *UNAUDITED) or reference is None or (qid, turn) not in prompts:
            continue
        position = first_difference(r.token_ids, reference.token_ids)
        if position is None:
            continue
        context = prompts[(qid, turn)] + reference.token_ids[:position]
        margin = top2_margin(model, context)
        found.append(dict(question_id=qid, turn=turn, method=method, position=position,
                          margin=margin, explained=margin < TIE_MARGIN,
                          peer=method.split("@")[0] in PEERS))
    return found
