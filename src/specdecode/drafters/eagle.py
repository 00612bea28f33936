"""`eagle`: EAGLE-2 drafting (Li et al. 2024) — a feature-level head with a dynamic token tree.

The head (`models.heads.EagleHead`) maps the pair (target feature h_t, embedding of x_{t+1}) to
the next feature ĥ_{t+1}; the target's LM head (or its draft-vocabulary rows) turns ĥ into the
draft distribution q of x_{t+2}. The head's one decoder layer runs as the target runs its own
(`FeatureTarget.head_layer`), with a KV cache per sequence: entry j holds pair j = (h_j, x_{j+1})
at rotary position j, so between steps it only processes the pairs the last step confirmed (their
true target features arrive by `observe_features`).

Dynamic tree (EAGLE-2): the root's top-`topk` tokens form level 1; for `depth - 1` rounds the
`topk` nodes of the newest level with the highest cumulative log q are expanded (one head forward
over them, each attending to the head's cache and its own ancestors), each into its `topk` best
children; of all candidates the `nodes` best by cumulative log q become the draft tree (depth and
nodes: the step's caps, `core.budget.DraftBudget`).

The tree is a deterministic function of the context, so the verifier treats its tokens as drafts
without a q (one-hot): lossless under sampling too (`verify.verify_sampling`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft
from ..core.target import FeatureTarget, KVCache
from ..core.tree import ROOT
from ..models.heads import EagleHead
from ..models.linear import Linear
from .learned import (
    DEFAULT_NODES,
    HeadOptions,
    LearnedDrafter,
    draft_lm_head,
    positive,
    select_nodes,
    to_token_ids,
)
from .registry import option, register

DEFAULT_DEPTH = 2  # tree levels by default, with DEFAULT_NODES nodes (see `learned.py`)


@dataclass
class _State:
    cache: KVCache  # the head layer's cache: entry j holds pair j
    features: torch.Tensor  # [capacity, H]: target features of the sequence's cached positions
    num_features: int = 0  # target features seen: one per position in the target's cache
    pairs: int = 0  # pairs the head's cache holds (its later entries are last step's draft)
    last: torch.Tensor | None = None  # [1, H]: ĥ of the newest pair, the tree's root


@register("eagle")
class Eagle(LearnedDrafter):
    @dataclass(frozen=True)
    class Options(HeadOptions):
        tree_topk: int = option(2, "children per expanded tree node")

        def __post_init__(self) -> None:
            positive("tree_topk", self.tree_topk)

    def __init__(self, target: FeatureTarget, head: EagleHead, topk: int = 2,
                 label: str = "eagle head") -> None:
        self.target = target  # read-only: its embedding; features come by observe_features
        self.fc = Linear(head.fc.weight.detach().to(target.dtype))  # 2H -> H
        weights = {("post_attention_layernorm.weight" if name == "post_attention_layernorm"
                    else name): tensor for name, tensor in head.layers[0].state_dict().items()}
        self.layer = target.head_layer(weights, draft_lm_head(target, head.draft_vocab))
        self.draft_vocab = head.draft_vocab
        self.max_length = target.max_length
        self.topk, self.label = topk, label

    @classmethod
    def create(cls, model, options: Options) -> "Eagle":
        return cls(model.target, cls.load_head(model, options), options.tree_topk,
                   options.draft_model or "shipped head")

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(DEFAULT_NODES, DEFAULT_DEPTH)

    def start(self, seq) -> None:
        seq.drafter_state = _State(self.layer.new_cache(),
                                   torch.empty(1024, self.target.hidden_size))

    def observe_features(self, seq, hidden: torch.Tensor) -> None:
        state = seq.drafter_state
        end = state.num_features + hidden.shape[0]
        if end > state.features.shape[0]:  # grow by doubling: appends stay amortised O(1)
            grown = state.features.new_empty(max(end, 2 * state.features.shape[0]),
                                             hidden.shape[1])
            grown[: state.num_features] = state.features[: state.num_features]
            state.features = grown
        state.features[state.num_features : end] = hidden
        state.num_features = end

    def _head(self, cache: KVCache, features: torch.Tensor, tokens: torch.Tensor, positions=None,
              mask=None) -> torch.Tensor:
        """ĥ = Layer(W_fc [e(tokens); features]) for rows of pairs: [T, H], [T] -> [T, H],
        appended to the head's cache."""
        fused = self.fc(torch.cat([self.target.embedding(tokens), features], dim=-1))
        return self.layer.run(cache, fused, positions, mask)

    def _children(self, features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k draft tokens and their log q after each feature row: [T, H] -> ([T, k], [T, k])."""
        logq = torch.log_softmax(self.layer.logits(features), dim=-1)
        values, indices = logq.topk(k, dim=-1)
        return to_token_ids(self.draft_vocab, indices), values

    @torch.inference_mode()
    def propose(self, seq, budget: DraftBudget) -> Draft:
        state, context = seq.drafter_state, seq.context
        n = context.shape[0]
        committed = n - 1  # pairs 0..n-2 are known: features of the target's cached positions
        if committed < 1 or state.num_features < committed:
            return EMPTY_DRAFT
        cache = state.cache
        cache.rollback(state.pairs)  # drop last step's draft entries
        if state.pairs < committed:  # feed the pairs confirmed since: ĥ_{n-1} is the last output
            state.last = self._head(cache, state.features[state.pairs : committed],
                                    context[state.pairs + 1 : n])[-1:]
            state.pairs = committed
        last = state.last
        nodes = min(budget.nodes, self.max_length - n)  # the target must fit the whole tree
        depth = min(budget.depth, 1 + (self.max_length - committed) // self.topk)  # the head too
        if nodes < 1:
            return EMPTY_DRAFT
        tokens, scores = self._children(last, self.topk)
        # candidates: token, parent (ROOT or candidate index), cumulative log q, depth
        cand_tokens, cand_parents = tokens[0].tolist(), [ROOT] * self.topk
        cand_scores, cand_depth = scores[0].tolist(), [1] * self.topk
        feature_of = {ROOT: last[0]}  # ĥ that predicted each expanded candidate's children
        slot = {}  # expanded candidate -> its entry in the head's cache
        level = list(range(self.topk))
        for level_depth in range(2, depth + 1):
            frontier = sorted(level, key=lambda c: -cand_scores[c])[: self.topk]
            start = cache.length
            mask = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)
            mask[:, :committed] = True
            for row, c in enumerate(frontier):
                a = c
                while a != ROOT:  # the candidate and its ancestors: all expanded before
                    mask[row, slot.get(a, start + row)] = True
                    a = cand_parents[a]
            positions = torch.tensor([committed + cand_depth[c] - 1 for c in frontier])
            parents_features = torch.stack([feature_of[cand_parents[c]] for c in frontier])
            out = self._head(cache, parents_features,
                             torch.tensor([cand_tokens[c] for c in frontier]), positions, mask)
            tokens, scores = self._children(out, self.topk)
            level = []
            for row, c in enumerate(frontier):
                slot[c], feature_of[c] = start + row, out[row]
                for token, score in zip(tokens[row].tolist(), scores[row].tolist()):
                    level.append(len(cand_tokens))
                    cand_tokens.append(token)
                    cand_parents.append(c)
                    cand_scores.append(cand_scores[c] + score)
                    cand_depth.append(level_depth)
        kept, parents = select_nodes(cand_parents, cand_scores, nodes)
        return Draft(torch.tensor([cand_tokens[c] for c in kept]), None,
                     forwards=max(depth - 1, 0) + 1,
                     parents=torch.tensor(parents, dtype=torch.long))

    def describe(self) -> str:
        return f"eagle ({self.label}, tree top-{self.topk})"
