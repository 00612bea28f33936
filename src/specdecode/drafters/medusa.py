"""`medusa`: Medusa-1 drafting (Cai et al. 2024) — K residual heads on the target's last feature.

Head k on h_t gives q_k, the draft distribution of x_{t+1+k} (`models.heads.MedusaHeads`). At
propose time the target's newest cached feature is h_{n-2} (it predicted the pending token
x_{n-1}), so head k drafts position n - 1 + k. The candidates form a fixed tree (`CHOICES`): a
path (r_1, .., r_d) is the r_1-th best token of head 1 followed by the r_2-th best of head 2, ..;
the first paths that fit the step's caps (nodes, depth <= heads) are drafted in one target
forward.

The tree is a deterministic function of the context, so verification treats its tokens as drafts
without a q (one-hot): lossless, greedy and sampling. (Medusa's "typical acceptance", which is
lossy, is not offered.)
"""

from __future__ import annotations

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft
from ..core.target import FeatureTarget
from ..core.tree import ROOT
from ..models.heads import MedusaHeads
from ..models.linear import Linear
from .learned import (
    DEFAULT_NODES,
    HeadOptions,
    LearnedDrafter,
    draft_lm_head,
    to_token_ids,
)
from .registry import register

# Candidate paths by rank, best first: wide where the heads are sure (head 1), narrow deeper,
# where each head's top-1 accuracy drops (Medusa's own trees are chosen the same way from
# measured per-rank accuracies; this is a small one for a CPU, where each node costs).
CHOICES: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (0, 0), (2,), (0, 1), (1, 0), (0, 0, 0), (3,), (0, 2), (0, 0, 1), (1, 1),
    (0, 1, 0), (0, 0, 0, 0), (2, 0), (1, 0, 0), (0, 0, 2), (0, 0, 0, 1), (0, 0, 0, 0, 0),
)


@register("medusa")
class Medusa(LearnedDrafter):
    def __init__(self, target: FeatureTarget, heads: MedusaHeads,
                 label: str = "medusa heads") -> None:
        self.heads = [Linear(h.weight.detach().to(target.dtype), h.bias.detach())
                      for h in heads.heads]  # H -> H each
        self.lm_head = Linear(draft_lm_head(target, heads.draft_vocab))  # H -> V'
        self.draft_vocab = heads.draft_vocab
        self.max_length = target.max_length
        self.label = label

    @classmethod
    def create(cls, model, options: HeadOptions) -> "Medusa":
        return cls(model.target, cls.load_head(model, options),
                   options.draft_model or "shipped heads")

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(DEFAULT_NODES, len(self.heads))  # one tree level per head

    def observe_features(self, seq, hidden: torch.Tensor) -> None:
        seq.drafter_state = hidden[-1]  # [H]: the newest cached position's feature

    @torch.inference_mode()
    def propose(self, seq, budget: DraftBudget) -> Draft:
        if seq.drafter_state is None:  # no feature yet: a one-token prompt
            return EMPTY_DRAFT
        context = seq.context
        h = seq.drafter_state[None]  # [1, H]
        depth = min(budget.depth, len(self.heads))
        features = torch.cat([h + torch.nn.functional.silu(head(h))
                              for head in self.heads[:depth]])  # [depth, H]
        width = 1 + max(max(path) for path in CHOICES)
        ranked = to_token_ids(self.draft_vocab, self.lm_head(features).topk(width).indices)
        nodes = min(budget.nodes, self.max_length - context.shape[0])
        paths = [p for p in CHOICES if len(p) <= depth][:nodes]
        if not paths:
            return EMPTY_DRAFT
        index = {path: i for i, path in enumerate(paths)}  # every prefix of a path precedes it
        tokens = [int(ranked[len(p) - 1, p[-1]]) for p in paths]
        parents = [ROOT if len(p) == 1 else index[p[:-1]] for p in paths]
        return Draft(torch.tensor(tokens), None, forwards=1,
                     parents=torch.tensor(parents, dtype=torch.long))

    def describe(self) -> str:
        return f"medusa ({self.label}, {len(self.heads)} heads)"
