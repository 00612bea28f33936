"""Training objectives of the two head kinds, on batches of padded teacher-forced sequences.

Notation: a sequence x_0..x_{L-1} whose first p tokens are the prompt, target features h_t, the
target's frozen embedding e and LM head W (its rows for the draft vocabulary when there is one).
Only predictions of answer tokens (index in [p, L-1]) count.

EAGLE (Li et al. 2024, EAGLE-1 loss), pair j = 0..L-2 at rotary position j:
    ĥ_{j+1} = head(h_j + noise, e(x_{j+1})),    counted when p <= j+2 <= L-1,
    loss = SmoothL1(ĥ_{j+1}, h_{j+1}) + w · CE(softmax(W h_{j+1}), log_softmax(W ĥ_{j+1})),
the soft target being the target's own next-token distribution (renormalised over the draft
vocabulary), w = 0.1 as the paper. Accuracy: argmax W ĥ_{j+1} == x_{j+2}, the first draft token.

Medusa (Cai et al. 2024, Medusa-1 loss), head k = 1..K on h_t predicting x_{t+1+k}:
    loss = Σ_k 0.8^(k-1) · CE(W f_k(h_t), x_{t+1+k}),   counted when p <= t+1+k <= L-1;
a token outside the draft vocabulary cannot be learned (left out of the CE, a miss in accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...core.target import FeatureTarget

EAGLE_CE_WEIGHT = 0.1  # w, the EAGLE paper's classification weight
# U(-0.1, 0.1) on the input features, EAGLE's augmentation: drafting later feeds the head its own
# imperfect ĥ, so it must not rely on exact inputs (final-normed SmolLM2 features have std ~2)
EAGLE_FEATURE_NOISE = 0.2
MEDUSA_DECAY = 0.8  # head k's loss weight is 0.8^(k-1), as Medusa


@dataclass
class TrainSequence:
    """One training sequence: token ids [L], target features [L, H] (bf16), prompt length p."""
    ids: torch.Tensor
    hidden: torch.Tensor
    prompt_length: int


@dataclass
class Batch:
    ids: torch.Tensor  # [B, T] int64, zero-padded on the right
    hidden: torch.Tensor  # [B, T, H] float32, zero-padded
    lengths: torch.Tensor  # [B] L of each row
    prompt_lengths: torch.Tensor  # [B] p of each row


def collate(sequences: Sequence[TrainSequence]) -> Batch:
    """Right padding: under causal attention the padding never reaches a real position."""
    width = max(len(s.ids) for s in sequences)
    H = sequences[0].hidden.shape[-1]
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    hidden = torch.zeros(len(sequences), width, H)
    for row, s in enumerate(sequences):
        ids[row, :len(s.ids)] = s.ids
        hidden[row, :len(s.ids)] = s.hidden.float()
    return Batch(ids, hidden, torch.tensor([len(s.ids) for s in sequences]),
                 torch.tensor([s.prompt_length for s in sequences]))


@dataclass
class Result:
    loss: torch.Tensor  # scalar, differentiable
    correct: torch.Tensor  # [K] top-1 hits per draft position (EAGLE: K = 1)
    counted: torch.Tensor  # [K] predictions counted


class _Objective:
    """What both kinds share: the frozen LM head over the draft vocabulary and the map from
    token ids to its rows."""

    def __init__(self, target: FeatureTarget, draft_vocab: Sequence[int] | None) -> None:
        lm_head = target.lm_head_rows().float()
        if draft_vocab:
            rows = torch.tensor(list(draft_vocab), dtype=torch.long)
            self.weight = lm_head[rows].clone()  # [Vd, H]
            self.index = torch.full((lm_head.shape[0],), -1, dtype=torch.long)  # id -> row, -1: none
            self.index[rows] = torch.arange(len(rows))
        else:
            self.weight = lm_head.clone()
            self.index = torch.arange(lm_head.shape[0])

    def hits(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Number of rows whose argmax is the token (a token outside the vocabulary is a miss)."""
        return (logits.argmax(-1) == self.index[tokens]).sum()


class EagleObjective(_Objective):
    def __init__(self, target: FeatureTarget, draft_vocab: Sequence[int] | None,
                 ce_weight: float = EAGLE_CE_WEIGHT, noise: float = EAGLE_FEATURE_NOISE) -> None:
        super().__init__(target, draft_vocab)
        self.target = target  # its embedding and rotary tables
        self.ce_weight, self.noise = ce_weight, noise

    def __call__(self, head: nn.Module, batch: Batch,
                 generator: torch.Generator | None = None) -> Result:
        """`generator` given: training, with feature noise; None: evaluation, without."""
        T = batch.ids.shape[1]
        inputs = batch.hidden[:, :-1]  # h_j
        if generator is not None:
            inputs = inputs + (torch.rand(inputs.shape, generator=generator) - 0.5) * self.noise
        cos, sin = self.target.rope_tables(T - 1)
        next_embeds = self.target.embedding(batch.ids[:, 1:].reshape(-1)).view(*inputs.shape)
        predicted = head(inputs, next_embeds, cos, sin)  # ĥ_{j+1}: [B, T-1, H]
        j = torch.arange(T - 1)[None]
        mask = (j + 2 >= batch.prompt_lengths[:, None]) & (j + 2 < batch.lengths[:, None])
        predicted, actual = predicted[mask], batch.hidden[:, 1:][mask]  # [N, H]
        next_tokens = F.pad(batch.ids[:, 2:], (0, 1))[mask]  # x_{j+2}; the pad is never counted
        log_q = F.log_softmax(predicted @ self.weight.T, dim=-1)
        with torch.no_grad():
            p = F.softmax(actual @ self.weight.T, dim=-1)
        n = max(len(next_tokens), 1)  # means over the counted pairs; a batch may have none
        regression = F.smooth_l1_loss(predicted, actual, reduction="sum") / (n * actual.shape[-1])
        loss = regression + self.ce_weight * -(p * log_q).sum() / n
        return Result(loss, self.hits(log_q, next_tokens).view(1),
                      torch.tensor([len(next_tokens)]))


class MedusaObjective(_Objective):
    def __init__(self, target: FeatureTarget, draft_vocab: Sequence[int] | None,
                 decay: float = MEDUSA_DECAY) -> None:
        super().__init__(target, draft_vocab)
        self.decay = decay

    def __call__(self, head: nn.Module, batch: Batch,
                 generator: torch.Generator | None = None) -> Result:
        """`generator` is unused (Medusa trains without feature noise)."""
        features = head(batch.hidden)  # [K, B, T, H]
        T = batch.ids.shape[1]
        t = torch.arange(T)[None]
        loss = torch.zeros(())
        correct, counted = [], []
        for k in range(1, features.shape[0] + 1):
            mask = (t + 1 + k >= batch.prompt_lengths[:, None]) & (t + 1 + k < batch.lengths[:, None])
            tokens = F.pad(batch.ids[:, 1 + k:], (0, 1 + k))[mask]  # x_{t+1+k}
            logits = features[k - 1][mask] @ self.weight.T
            labels = self.index[tokens]
            if (labels >= 0).any():  # cross_entropy's ignore_index: tokens outside the vocabulary
                loss = loss + self.decay ** (k - 1) * F.cross_entropy(logits, labels, ignore_index=-1)
            correct.append(self.hits(logits, tokens))
            counted.append(len(tokens))
        return Result(loss, torch.stack(correct), torch.tensor(counted))


OBJECTIVES = {"eagle": EagleObjective, "medusa": MedusaObjective}
