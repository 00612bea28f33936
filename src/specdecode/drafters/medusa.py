"""`medusa`: Medusa-1 drafting (Cai et al. 2024) — K residual heads on the target's last feature.

Head k on h_t gives q_k, the draft distribution of x_{t+1+k} (`models.heads.MedusaHeads`). At
propose time the target's newest cached feature is h_{n-2} (it predicted the pending token
x_{n-1}), so head k drafts position n - 1 + k. The candidates form a fixed tree (`CHOICES`): a
path (r_1, .., r_d) is the r_1-th best token of head 1 followed by the r_2-th best of head 2, ..;
the `nodes` first paths that fit the heads are drafted in one target forward.

The tree is a deterministic function of the context, so verification treats its tokens as drafts
without a q (one-hot): lossless, greedy and sampling. (Medusa's "typical acceptance", which is
lossy, is not offered.)
"""

from __future__ import annotations

import torch

from ..models.heads import MedusaHeads
from ..models.linear import Linear
from ..models.llama import NativeLlama
from ..sampling import SamplingParams
from ..tree import ROOT
from .base import EMPTY_DRAFT, Draft, Drafter, DrafterOptions, register
from .learned import draft_lm_head, resolve_head, to_token_ids

# Candidate paths by rank, best first: wide where the heads are sure (head 1), narrow deeper,
# where each head's top-1 accuracy drops (Medusa's own trees are chosen the same way from
# measured per-rank accuracies; this is a small one for a CPU, where each node costs).
CHOICES: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (0, 0), (2,), (0, 1), (1, 0), (0, 0, 0), (3,), (0, 2), (0, 0, 1), (1, 1),
    (0, 1, 0), (0, 0, 0, 0), (2, 0), (1, 0, 0), (0, 0, 2), (0, 0, 0, 1), (0, 0, 0, 0, 0),
)


@register("medusa")
class Medusa(Drafter):
    uses_features = True

    def __init__(self, target: NativeLlama, heads: MedusaHeads, nodes: int = 3,
                 label: str = "medusa heads") -> None:
        self.heads = [Linear(h.weight.detach().to(target.dtype), h.bias.detach())
                      for h in heads.heads]  # H -> H each
        self.lm_head = Linear(draft_lm_head(target.lm_head, heads.draft_vocab))  # H -> V'
        self.draft_vocab = heads.draft_vocab
        self.max_length = target.max_length
        self.nodes, self.label = nodes, label
        self.last_feature: torch.Tensor | None = None  # [H]: the newest cached position's h

    @classmethod
    def create(cls, model, options: DrafterOptions) -> "Medusa":
        heads = resolve_head(model, options.draft_model, "medusa")
        # 3 nodes measured fastest with the shipped SmolLM2 heads: τ 1.34 at 1.01x plain, where 6
        # nodes gave τ 1.41 at 0.63x; with the packed-panel kernels (8 rows ~1.24 one-token
        # steps) on the last 2 Spec-Bench prompts per group, 3 nodes 1.04x, 7 nodes 0.92-1.06x
        return cls(model.target, heads, options.tree_nodes or 3,
                   options.draft_model or "shipped heads")

    @property
    def default_k(self) -> int:
        return len(self.heads)  # tree depth: one level per head

    def reset(self) -> None:
        self.last_feature = None

    def observe_features(self, hidden: torch.Tensor) -> None:
        self.last_feature = hidden[-1]

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, params: SamplingParams, generator) -> Draft:
        if self.last_feature is None:
            return EMPTY_DRAFT
        h = self.last_feature[None]  # [1, H]
        depth = min(k, len(self.heads))
        features = torch.cat([h + torch.nn.functional.silu(head(h))
                              for head in self.heads[:depth]])  # [depth, H]
        width = 1 + max(max(path) for path in CHOICES)
        ranked = to_token_ids(self.draft_vocab, self.lm_head(features).topk(width).indices)
        budget = min(self.nodes, self.max_length - context.shape[0])
        paths = [p for p in CHOICES if len(p) <= depth][:budget]
        if not paths:
            return EMPTY_DRAFT
        index = {path: i for i, path in enumerate(paths)}  # every prefix of a path precedes it
        tokens = [int(ranked[len(p) - 1, p[-1]]) for p in paths]
        parents = [ROOT if len(p) == 1 else index[p[:-1]] for p in paths]
        return Draft(torch.tensor(tokens), None, forwards=1,
                     parents=torch.tensor(parents, dtype=torch.long))

    def describe(self) -> str:
        return f"medusa ({self.label}, {len(self.heads)} heads, {self.nodes} nodes)"
