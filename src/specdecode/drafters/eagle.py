"""`eagle`: EAGLE-2 drafting (Li et al. 2024) — a feature-level head with a dynamic token tree.

The head (`models.heads.EagleHead`) maps the pair (target feature h_t, embedding of x_{t+1}) to
the next feature ĥ_{t+1}; the target's LM head (or its draft-vocabulary rows) turns ĥ into the
draft distribution q of x_{t+2}. The head's one decoder layer runs natively with its own KV cache:
entry j holds pair j = (h_j, x_{j+1}) at rotary position j, so between steps it only processes
the pairs the last step confirmed (their true target features arrive by `observe_features`).

Dynamic tree (EAGLE-2): the root's top-`topk` tokens form level 1; for `depth - 1` rounds the
`topk` nodes of the newest level with the highest cumulative log q are expanded (one head forward
over them, each attending to the head's cache and its own ancestors), each into its `topk` best
children; of all candidates the `nodes` best by cumulative log q become the draft tree.

The tree is a deterministic function of the context, so the verifier treats its tokens as drafts
without a q (one-hot): lossless under sampling too (`verify.verify_sampling`).
"""

from __future__ import annotations

import copy

import torch

from ..models.heads import EagleHead
from ..models.linear import Linear
from ..models.llama import NativeLlama
from ..sampling import SamplingParams
from ..tree import ROOT
from .base import EMPTY_DRAFT, Draft, Drafter, DrafterOptions, register
from .learned import draft_lm_head, resolve_head, select_nodes, to_token_ids


# Small trees: with the shipped SmolLM2 head (43% top-1) the fastest of 7 measured shapes was top-2
# children, depth 2, 3 nodes (τ 1.60, 1.12x plain on held-out training prompts; top-4, depth 5,
# 12 nodes reached τ 1.86 at 0.39x). Re-measured with the packed-panel kernels (verifying 2..8
# rows costs 1.04-1.24 one-token steps; every tree level costs one head forward) on the last 2
# Spec-Bench prompts of each group: depth 2 / 3 nodes 1.09x plain (τ 1.50), depth 4 / 7 nodes
# 0.95x and depth 6 / 7 nodes 1.03x (τ 1.61): the head's deeper guesses are right too rarely to
# pay for the levels that draft them.
DEFAULT_DEPTH, DEFAULT_NODES = 2, 3


def native_head_layer(head: EagleHead, target: NativeLlama) -> NativeLlama:
    """The head's decoder layer (no input norm, no final norm) as a 1-layer `NativeLlama` with its
    own KV cache; its `logits` are the draft-vocabulary LM head."""
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = 1
    weights = {"model.embed_tokens.weight": target.embed,  # unused: the head feeds vectors
               "lm_head.weight": draft_lm_head(target.lm_head, head.draft_vocab)}
    for name, tensor in head.layers[0].state_dict().items():
        if name == "post_attention_layernorm":
            name += ".weight"
        weights[f"model.layers.0.{name}"] = tensor
    return NativeLlama(config, weights, target.dtype)


@register("eagle")
class Eagle(Drafter):
    uses_features = True

    def __init__(self, target: NativeLlama, head: EagleHead, topk: int = 2, nodes: int = 3,
                 label: str = "eagle head") -> None:
        self.target = target  # read-only: its embedding and LM head; features come by observe
        self.fc = Linear(head.fc.weight.detach().to(target.dtype))  # 2H -> H
        self.layer = native_head_layer(head, target)
        self.draft_vocab = head.draft_vocab
        self.max_length = target.max_length
        self.topk, self.nodes, self.label = topk, nodes, label
        self.features = torch.empty(1024, target.embed.shape[1])  # [capacity, H]
        self.num_features = 0  # target features seen: one per position in the target's cache
        self.pairs = 0  # pairs the head's cache holds (its later entries are last step's draft)
        self.last: torch.Tensor | None = None  # [1, H]: ĥ of the newest pair, the tree's root

    @classmethod
    def create(cls, model, options: DrafterOptions) -> "Eagle":
        head = resolve_head(model, options.draft_model, "eagle")
        return cls(model.target, head, options.tree_topk, options.tree_nodes or DEFAULT_NODES,
                   options.draft_model or "shipped head")

    @property
    def default_k(self) -> int:
        return DEFAULT_DEPTH

    def reset(self) -> None:
        self.layer.reset()
        self.num_features = self.pairs = 0
        self.last = None

    def observe_features(self, hidden: torch.Tensor) -> None:
        end = self.num_features + hidden.shape[0]
        if end > self.features.shape[0]:  # grow by doubling: appends stay amortised O(1)
            grown = self.features.new_empty(max(end, 2 * self.features.shape[0]), hidden.shape[1])
            grown[: self.num_features] = self.features[: self.num_features]
            self.features = grown
        self.features[self.num_features : end] = hidden
        self.num_features = end

    def _head(self, features: torch.Tensor, tokens: torch.Tensor, positions=None, mask=None):
        """ĥ = Layer(W_fc [e(tokens); features]) for rows of pairs: [T, H], [T] -> [T, H],
        appended to the head's cache."""
        fused = self.fc(torch.cat([self.target.embedding(tokens), features], dim=-1))
        return self.layer.run_layers(fused, positions, mask)

    def _children(self, features: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k draft tokens and their log q after each feature row: [T, H] -> ([T, k], [T, k])."""
        logq = torch.log_softmax(self.layer.logits(features), dim=-1)
        values, indices = logq.topk(k, dim=-1)
        return to_token_ids(self.draft_vocab, indices), values

    @torch.inference_mode()
    def propose(self, context: torch.Tensor, k: int, params: SamplingParams, generator) -> Draft:
        n = context.shape[0]
        committed = n - 1  # pairs 0..n-2 are known: features of the target's cached positions
        if committed < 1 or self.num_features < committed:
            return EMPTY_DRAFT
        self.layer.rollback(self.pairs)  # drop last step's draft entries
        if self.pairs < committed:  # feed the pairs confirmed since: ĥ_{n-1} is the last output
            self.last = self._head(self.features[self.pairs : committed],
                                   context[self.pairs + 1 : n])[-1:]
            self.pairs = committed
        last = self.last
        budget = min(self.nodes, self.max_length - n)  # the target must fit the whole tree
        k = min(k, 1 + (self.max_length - committed) // self.topk)  # and the head its expansions
        if budget < 1:
            return EMPTY_DRAFT
        tokens, scores = self._children(last, self.topk)
        # candidates: token, parent (ROOT or candidate index), cumulative log q, depth
        cand_tokens, cand_parents = tokens[0].tolist(), [ROOT] * self.topk
        cand_scores, cand_depth = scores[0].tolist(), [1] * self.topk
        feature_of = {ROOT: last[0]}  # ĥ that predicted each expanded candidate's children
        slot = {}  # expanded candidate -> its entry in the head's cache
        level = list(range(self.topk))
        for depth in range(2, k + 1):
            frontier = sorted(level, key=lambda c: -cand_scores[c])[: self.topk]
            start = self.layer.length
            mask = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)
            mask[:, :committed] = True
            for row, c in enumerate(frontier):
                a = c
                while a != ROOT:  # the candidate and its ancestors: all expanded before
                    mask[row, slot.get(a, start + row)] = True
                    a = cand_parents[a]
            positions = torch.tensor([committed + cand_depth[c] - 1 for c in frontier])
            parents_features = torch.stack([feature_of[cand_parents[c]] for c in frontier])
            out = self._head(parents_features, torch.tensor([cand_tokens[c] for c in frontier]),
                             positions, mask)
            tokens, scores = self._children(out, self.topk)
            level = []
            for row, c in enumerate(frontier):
                slot[c], feature_of[c] = start + row, out[row]
                for token, score in zip(tokens[row].tolist(), scores[row].tolist()):
                    level.append(len(cand_tokens))
                    cand_tokens.append(token)
                    cand_parents.append(c)
                    cand_scores.append(cand_scores[c] + score)
                    cand_depth.append(depth)
        kept, parents = select_nodes(cand_parents, cand_scores, budget)
        return Draft(torch.tensor([cand_tokens[c] for c in kept]), None,
                     forwards=max(k - 1, 0) + 1, parents=torch.tensor(parents, dtype=torch.long))

    def describe(self) -> str:
        return f"eagle ({self.label}, tree top-{self.topk}, {self.nodes} nodes)"
