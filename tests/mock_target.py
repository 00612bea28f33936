"""A mock target: a small causal model in plain torch (no kernels, no transformers), with every
capability of `models.hf_target`, so that every drafter and the engine run without a native model.

Each layer mixes a row's vector with the mean of the keys it sees (the cached positions and, in a
tree, its ancestors), taken one row at a time in position order: a token's logits are bitwise the
same scored alone, in a chain or in a tree, as the contract of the real kernels requires.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from specdecode.core.target import hidden_each
from specdecode.core.tree import TokenTree
from specdecode.rope import tables


class MockCache:
    def __init__(self, layers: int, capacity: int, hidden: int) -> None:
        self.keys = torch.zeros(layers, capacity, hidden, dtype=torch.float64)
        self.length = 0

    def rollback(self, length: int) -> None:
        assert 0 <= length <= self.length, (length, self.length)
        self.length = length

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes

    def copy(self) -> "MockCache":
        out = MockCache(1, 1, 1)
        out.keys, out.length = self.keys.clone(), self.length
        return out

    def compact(self, base: int, positions: Sequence[int]) -> None:
        assert all(base <= p < self.length for p in positions), (base, positions, self.length)
        kept = base + len(positions)
        self.keys[:, base:kept] = self.keys[:, list(positions)].clone()
        self.length = kept


def _run(cache: MockCache, x: torch.Tensor, mixes: list[torch.Tensor], positions: torch.Tensor,
         mask: torch.Tensor | None, position_table: torch.Tensor) -> torch.Tensor:
    """x: [T, H] float64 through one layer per matrix in `mixes` (cache layer i for mixes[i])."""
    T, start = x.shape[0], cache.length
    assert start + T <= cache.keys.shape[1], "mock cache overflow"
    x = x + position_table[positions]
    for layer, mix in enumerate(mixes):
        cache.keys[layer, start : start + T] = x
        rows = []
        for t in range(T):
            seen = torch.arange(start + t + 1) if mask is None else mask[t].nonzero()[:, 0]
            context = cache.keys[layer, seen].mean(0)
            rows.append(torch.tanh(x[t] @ mix + context))
        x = torch.stack(rows)
    cache.length = start + T
    return x


class MockHeadLayer:
    """`HeadLayer`: one mock layer mixing with the head's o_proj, logits over `lm_head`."""

    def __init__(self, target: "MockTarget", weights: Mapping[str, torch.Tensor],
                 lm_head: torch.Tensor) -> None:
        self.target = target
        self.mix = weights["self_attn.o_proj.weight"].double().T
        self.lm_head = lm_head.double()

    def new_cache(self) -> MockCache:
        return MockCache(1, self.target.max_length, self.target.hidden_size)

    def run(self, cache: MockCache, x: torch.Tensor, positions: torch.Tensor | None = None,
            mask: torch.Tensor | None = None) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(cache.length, cache.length + x.shape[0])
        return _run(cache, x.double(), [self.mix], positions, mask,
                    self.target.position_table).float()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden.double() @ self.lm_head.T).float()


class MockTarget:
    """Target + FeatureTarget + LayerSkipTarget in plain torch (float64 inside)."""

    device = torch.device("cpu")
    dtype = torch.float32
    weights = "float64"
    scores_trees = True
    row_invariant = False  # torch's matmuls, whose blocking follows the rows

    def __init__(self, vocab: int = 24, hidden: int = 16, layers: int = 3,
                 max_length: int = 160, seed: int = 0, sharpness: float = 4.0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.vocab_size, self.hidden_size, self.num_layers = vocab, hidden, layers
        self.max_length = max_length
        self.embed = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64)
        self.lm_head = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64) * sharpness
        self.mixes = [torch.randn(hidden, hidden, generator=gen, dtype=torch.float64)
                      / hidden ** 0.5 for _ in range(layers)]
        self.position_table = torch.randn(max_length, hidden, generator=gen,
                                          dtype=torch.float64) * 0.3

    def describe(self) -> str:
        return "mock target (torch)"

    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in [self.lm_head, *self.mixes])

    def new_cache(self) -> MockCache:
        return MockCache(self.num_layers, self.max_length, self.hidden_size)

    def _forward(self, cache, tokens, tree: TokenTree | None = None, layers=None) -> torch.Tensor:
        positions, mask = None, None
        if tree is not None and not tree.is_chain:
            positions, mask = tree.attention(cache.length)
        if positions is None:
            positions = torch.arange(cache.length, cache.length + tokens.shape[0])
        mixes = self.mixes if layers is None else [self.mixes[i] for i in layers]
        return _run(cache, self.embed[tokens], mixes, positions, mask, self.position_table)

    def hidden(self, cache: MockCache, tokens: torch.Tensor,
               tree: TokenTree | None = None) -> torch.Tensor:
        return self._forward(cache, tokens, tree).float()

    def hidden_batch(self, steps) -> list[torch.Tensor]:
        return hidden_each(self, steps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden.double() @ self.lm_head.T).float()

    def prefill(self, cache: MockCache, tokens: torch.Tensor) -> torch.Tensor:
        return self.hidden(cache, tokens)

    def forward_layers(self, cache: MockCache, tokens: torch.Tensor,
                       layers: Sequence[int]) -> torch.Tensor:
        return self.logits(self._forward(cache, tokens, layers=layers).float())

    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed[tokens].float()

    def lm_head_rows(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        return (self.lm_head if ids is None else self.lm_head[ids]).float()

    def layer_shape(self) -> dict:
        return {"hidden_size": self.hidden_size, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": self.hidden_size // 2,
                "intermediate_size": 2 * self.hidden_size, "rms_norm_eps": 1e-6}

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.hidden_size // 2
        return tables(1.0 / (10000 ** (torch.arange(0, d, 2).float() / d)), 1.0, length)

    def head_layer(self, weights: Mapping[str, torch.Tensor],
                   lm_head: torch.Tensor) -> MockHeadLayer:
        return MockHeadLayer(self, weights, lm_head)


class MockModel:
    """What drafters' `create` reads of a loaded model: the target, a key and a name (a
    `LoadedModel` without a tokenizer)."""

    def __init__(self, target: MockTarget, key: str = "mock") -> None:
        self.target, self.key, self.name = target, key, key
        self.backend = self.kernels = "mock"
        self.weights = "float32"
        self.eos_token_ids: frozenset[int] = frozenset()
