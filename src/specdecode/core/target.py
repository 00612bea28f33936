"""The Target protocol and its capabilities: what the engine, the verifier and the drafters may
ask of a model (the models implement it: `models.decoder`, `models.hf_target.HFTarget`).

A target is the model whose output is the truth. It holds weights only: each request has its own
KV cache (`new_cache()`), which the target's scoring functions append to, so several requests
can be in flight on one model. Drafters and the verifier never reach inside a target; what a
drafter needs beyond scoring is a named capability it declares (`Drafter.requires`):

- `FeatureTarget`: the target's features, embedding and LM head, and a decoder layer built like
  its own, for learned heads (EAGLE, Medusa) and their training;
- `LayerSkipTarget`: scoring with a subset of the decoder layers (self-speculation);
- `MaskedTarget`: rows appended at any positions under any attention mask over the cache (a draft
  model growing a token tree a depth at a time).

Hidden states are the final-normed features the LM head reads.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence, runtime_checkable

import torch

from .tree import TokenTree


class KVCache(Protocol):
    """One sequence's keys and values: `length` positions, appended to by the target."""

    length: int

    def rollback(self, length: int) -> None:
        """Drop every cached position >= length."""
        ...

    def compact(self, base: int, positions: Sequence[int]) -> None:
        """Keep the entries at `positions` (ascending, >= base), packed to base, base + 1, ..;
        drop everything else from base on: a tree's accepted path behind the prefix."""
        ...

    def copy(self) -> "KVCache":
        """An independent cache holding the same entries (a prompt's, shared by the choices of
        one request)."""
        ...


class SavableCache(KVCache, Protocol):
    """The caches of a row-invariant target (`Target.row_invariant`), which the prefix cache
    keeps (`core.prefix_cache`): sized, saved and restored."""

    nbytes: int  # the memory its tensors hold

    def state(self) -> dict[str, torch.Tensor]:
        """Its entries as named tensors (for a file)."""
        ...

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        """Hold the entries of `state` (another cache's, of the same target) instead."""
        ...


@runtime_checkable
class Target(Protocol):
    vocab_size: int
    max_length: int  # context window in tokens
    device: torch.device
    weights: str  # the formats its matrices are held in, as reports name them ("Q4_1+Q8_0")
    scores_trees: bool  # False: `hidden` takes chains only (a tree with branches raises)
    # True: a row's hidden state is the same however rows are split into calls (prefill chunks,
    # batches), so a prompt's kept cache may stand in for a prefill (`core.prefix_cache`)
    row_invariant: bool

    def new_cache(self) -> KVCache:
        """An empty cache for a new sequence."""
        ...

    def hidden(self, cache: KVCache, tokens: torch.Tensor,
               tree: TokenTree | None = None) -> torch.Tensor:
        """Append tokens ([T] int64) at positions cache.length.. and return their hidden states
        [T, H]. With a tree the tokens are its rows [root, nodes], each attending only to the
        cache and its ancestors."""
        ...

    def hidden_batch(self, steps: Sequence[tuple[KVCache, torch.Tensor, TokenTree | None]]
                     ) -> list[torch.Tensor]:
        """`hidden` for several sequences at once, (cache, tokens, tree) each; a sequence's hidden
        states are the same as alone (a target that cannot batch runs them one by one:
        `hidden_each`)."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head: hidden [T, H] -> logits [T, V] (float32)."""
        ...

    def prefill(self, cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
        """Append tokens ([T] int64) without computing logits (a prompt: only its KV is needed);
        returns their hidden states [T, H]."""
        ...

    def describe(self) -> str:
        """What computes the steps, as every report names it ('avx2 kernels (OpenMP, 2 threads)')."""
        ...

    def weight_bytes(self) -> int:
        """Bytes of weights one step reads: every matrix, the embedding table only when the LM
        head is it (a step gathers a few of its rows otherwise)."""
        ...


def hidden_each(target: Target, steps: Sequence[tuple[KVCache, torch.Tensor, TokenTree | None]]
                ) -> list[torch.Tensor]:
    """`Target.hidden_batch` one sequence at a time."""
    return [target.hidden(cache, tokens, tree) for cache, tokens, tree in steps]


def forward(target: Target, cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
    """tokens [T] -> logits [T, V], appended to the cache."""
    return target.logits(target.hidden(cache, tokens))


def forward_last(target: Target, cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
    """tokens [T] -> logits [1, V] of the last of them, all appended to the cache: a drafter
    catching up on the context needs only the next token's distribution, and the output layer's
    rows for the others would cost it as much again (a 256-token first reading: 256 rows of it)."""
    return target.logits(target.hidden(cache, tokens)[-1:])


class HeadLayer(Protocol):
    """One decoder layer with the target's shapes, kernels and rotary embedding, run on input
    vectors (not token ids) with its own KV cache: an EAGLE head's layer."""

    def new_cache(self) -> KVCache:
        ...

    def run(self, cache: KVCache, x: torch.Tensor, positions: torch.Tensor | None = None,
            mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: [T, H] appended at cache.length; positions: [T] (default the next ones); mask:
        [T, cache.length + T] bool, True where a row may attend (default causal) -> [T, H]."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[T, H] -> [T, V'] over the LM-head rows the layer was built with."""
        ...


@runtime_checkable
class FeatureTarget(Target, Protocol):
    """A target whose features learned heads draft from and train on."""

    hidden_size: int
    dtype: torch.dtype  # of its weight matrices

    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [T] int64 -> the input vectors [T, H] (fp32)."""
        ...

    def lm_head_rows(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The LM head's rows [len(ids), H] for these token ids (all [V, H] for None)."""
        ...

    def layer_shape(self) -> dict:
        """Sizes of one decoder layer: hidden_size, num_attention_heads, num_key_value_heads,
        head_dim, intermediate_size, rms_norm_eps."""
        ...

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [length, head_dim] of positions 0..length-1, as the target's layers use."""
        ...

    def head_layer(self, weights: Mapping[str, torch.Tensor], lm_head: torch.Tensor) -> HeadLayer:
        """A `HeadLayer` from one layer's weights by their transformers names within a layer
        (`self_attn.q_proj.weight`, ..., `post_attention_layernorm.weight`; no input norm), with
        `lm_head` [V', H] as its logits."""
        ...


@runtime_checkable
class LayerSkipTarget(Target, Protocol):
    num_layers: int

    def forward_layers(self, cache: KVCache, tokens: torch.Tensor,
                       layers: Sequence[int]) -> torch.Tensor:
        """Like `forward` with only these decoder layers: tokens [T] -> logits [T, V]; the entries
        it appends are a draft's, overwritten once the cache is rolled back and scored fully."""
        ...


@runtime_checkable
class MaskedTarget(Target, Protocol):
    def hidden_masked(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
        """Append tokens [T] at cache.length.. with rotary positions [T], row r attending to the
        cache entries and new rows where mask [T, cache.length + T] (bool) is True; returns their
        hidden states [T, H]. A tree's depths fed one call each: a row sees the prefix and the
        entries of its own ancestors, wherever earlier calls put them."""
        ...
