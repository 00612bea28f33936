"""The native forward of every family in `families` (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE,
Gemma 3): one decoder, whose layers differ only in what the family declares (which norms, the
activation, q/k head norms, sliding windows, per-layer rotary tables, a mixture of experts).

Built from the weights of a loaded transformers model (no download, no extra conversion): q/k/v and
gate/up projections are fused into one matrix each, so a decoder layer is four matrix products.
The KV cache is static (`cache.StaticKVCache`): rollback moves a length, nothing is freed.
One code path scores 1..K+1 new tokens with a causal mask over the cached prefix; every operation
of a step runs on one kernel path (`kernels`), which computes a token the same way whatever the
number of tokens in the step. On the C paths the loop over the layers runs inside the kernels
(`decoder_layers`: the same operations in the same order, one call a step).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch

from .. import kernels as kernel_paths
from ..core.tree import TokenTree
from ..kernels import ROW_INVARIANT_ROWS, CacheRows, DecoderLayer, Kernels, StackShape
from ..quant import FORMATS, QuantTensor, decode
from ..rope import frequencies, head_dim, tables
from . import families
from .cache import StaticKVCache
from .gguf import ROPE_FACTORS
from .linear import Linear


def supports(config) -> bool:
    """True when `NativeDecoder` reproduces this architecture exactly (`families.unsupported`
    says why not)."""
    return families.unsupported(config) is None


class NativeDecoder:
    """A `Target` (with the `FeatureTarget` and `LayerSkipTarget` capabilities) for the families
    in `families`, on the CPU, with static KV caches (`cache.StaticKVCache`, one per sequence).

    Built from a transformers config and the checkpoint's tensors by their transformers names
    (`model.layers.0.self_attn.q_proj.weight`, ...), so the loader need not build the transformers
    model at all (its imports and initialisation dominate a load); `from_hf` takes a
    transformers model instead."""

    device = torch.device("cpu")
    scores_trees = True
    row_invariant = True  # every kernel path, within `engine.PREFILL_CHUNK` rows a call

    def __init__(self, config, weights: Mapping[str, torch.Tensor | QuantTensor],
                 dtype: torch.dtype | None = torch.float32, kernels: Kernels | None = None,
                 kv_dtype: torch.dtype | None = None) -> None:
        assert supports(config), families.unsupported(config)
        self.config = config
        self.family = families.by_model_type(config.model_type)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = head_dim(config)
        self.hidden_size = config.hidden_size
        self.kernels = kernels or kernel_paths.active()
        if not self.kernels.fits(self.head_dim, (config.hidden_size, config.intermediate_size)):
            logging.getLogger("specdecode").warning(
                "specdecode: the %s kernels need head and row widths in multiples of 16; this "
                "model runs on the torch path", self.kernels.name)
            self.kernels = kernel_paths.load("torch")
        self.eps = config.rms_norm_eps
        self.max_length = config.max_position_embeddings
        self.num_layers = config.num_hidden_layers
        self.shape = StackShape(self.hidden_size, self.num_heads, self.num_kv_heads,
                                self.head_dim, config.intermediate_size,
                                families.activation(config), families.attention_scale(config))

        # matrices in `dtype` (None: as given, GGUF block formats included); norm weights,
        # biases, activations and all arithmetic in fp32: a bf16 or 4-bit step saves its time in
        # reading weights, and fp32 activations keep a token's arithmetic free of the roundings a
        # narrower type would add between a 1-token and a K-token step
        self.dtype = dtype or torch.float32  # what drafting heads built on this target use
        # the KV cache (`kv_dtype`, None: by the weights): fp16 beside block-format matrices, as
        # llama.cpp keeps it (a step of several sequences reads each one's cache: at half the
        # bytes it reads less cache than weights for longer), else fp32. k and v are rounded once,
        # when written, so every step reads the same numbers whatever it holds.
        quantized = dtype is None and any(isinstance(w, QuantTensor) for w in weights.values())
        self.kv_dtype = kv_dtype or (torch.float16 if quantized else torch.float32)

        def get(name: str, dtype: torch.dtype | None = dtype) -> torch.Tensor | QuantTensor:
            w = weights[name]
            if isinstance(w, QuantTensor):
                return w if dtype is None else w.dequantize(dtype)
            return w.detach() if dtype is None else w.detach().to(dtype)

        def optional(name: str, dtype: torch.dtype | None = dtype):
            return get(name, dtype) if name in weights else None

        self.embed = get("model.embed_tokens.weight")  # [V, H]
        # Gemma's embeddings are scaled by sqrt(hidden), rounded to fp32 as transformers does
        self._embed_scale = (torch.tensor(self.hidden_size ** 0.5, dtype=torch.float32)
                             if self.family.scales_embedding else None)
        self.norm = self._norm(optional("model.norm.weight", torch.float32))  # None: no final
        # norm (an EAGLE head's layer); tied embeddings are saved once, under the input's name
        lm_head = optional("lm_head.weight")
        self.lm_head = self.embed if lm_head is None else lm_head  # [V, H]
        self._whole_head = self.lm_head  # what `with_vocabulary` copies keep for `output_rows`
        self.vocab_size = self.lm_head.shape[0]
        self._lm_head = self._linear(self.lm_head)
        # one (cos, sin) table per distinct rotary parameters (Gemma: local and global layers)
        self._rope_factors = weights.get(ROPE_FACTORS)  # [d / 2] or None (`gguf.ROPE_FACTORS`)
        self._rope_types: list[str | None] = []
        for i in range(self.num_layers):
            kind = families.layer_type(config, i)
            if kind not in self._rope_types:
                self._rope_types.append(kind)
        self._frequencies = [frequencies(config, self._rope_factors, kind)
                             for kind in self._rope_types]
        self.layers = [self._layer(i, get, optional) for i in range(self.num_layers)]
        # the layers in one kernel call where the path has one (bitwise what the loop gives)
        self._stack = self.kernels.stack(self.shape, self.layers)
        self._rope_cache(1024)
        formats = {str(kind).removeprefix("torch.") for linear in self.linears()
                   for kind, _ in linear.parts()}
        self.weights = "+".join(sorted(formats))

    def _norm(self, weight: torch.Tensor | None) -> torch.Tensor | None:
        """A norm's multiplier: its weight, plus the family's shift (Gemma's 1 + w, in fp32 as
        transformers adds it)."""
        if weight is None or not self.family.norm_shift:
            return weight
        return self.family.norm_shift + weight.float()

    def _layer(self, i: int, get, optional) -> DecoderLayer:
        """Layer i with q/k/v and gate/up fused: four products."""
        f32 = torch.float32
        prefix = f"model.layers.{i}."
        attn, mlp = f"{prefix}self_attn.", f"{prefix}mlp."
        qkv = [f"{attn}{p}_proj" for p in "qkv"]
        bias = None
        if optional(f"{qkv[0]}.bias", f32) is not None:  # Qwen2
            bias = torch.cat([get(f"{p}.bias", f32) for p in qkv])
        norms = {role: self._norm(optional(f"{prefix}{name}.weight", f32))
                 for role, name in self.family.norms.items()}
        layer = DecoderLayer(
            qkv=self._linear(fuse([get(f"{p}.weight") for p in qkv]), bias),
            out=self._linear(get(f"{attn}o_proj.weight"), optional(f"{attn}o_proj.bias", f32)),
            gate_up=None, down=None, **norms, window=families.window(self.config, i),
            rope=self._rope_types.index(families.layer_type(self.config, i)))
        rule = self.family.experts_at(self.config, i)
        if rule is None:
            layer.gate_up = self._linear(fuse([get(f"{mlp}gate_proj.weight"),
                                               get(f"{mlp}up_proj.weight")]))
            layer.down = self._linear(get(f"{mlp}down_proj.weight"))
            return layer
        layer.router = self._linear(get(f"{mlp}gate.weight"))
        layer.top_k, layer.normalize = rule.top_k, rule.normalize
        experts = f"{mlp}experts."
        fused = optional(f"{experts}gate_up_proj")  # transformers: [E, 2 I, H]
        gate_up = [fused[e] if fused is not None else
                   fuse([expert_rows(get(f"{experts}gate_proj.weight"), e, rule.inner),
                         expert_rows(get(f"{experts}up_proj.weight"), e, rule.inner)])
                   for e in range(rule.count)]
        down = optional(f"{experts}down_proj")  # transformers' name; GGUF's has ".weight"
        down = down if down is not None else get(f"{experts}down_proj.weight")
        layer.experts = [(self._linear(gate_up[e]),
                          self._linear(expert_rows(down, e, self.hidden_size)))
                         for e in range(rule.count)]
        return layer

    def _linear(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Linear:
        return Linear(weight, bias, self.kernels)

    @classmethod
    def from_hf(cls, hf_model: torch.nn.Module, dtype: torch.dtype = torch.float32,
                kernels: Kernels | None = None, kv_dtype: torch.dtype | None = None
                ) -> "NativeDecoder":
        weights = dict(hf_model.state_dict())
        weights["lm_head.weight"] = hf_model.get_output_embeddings().weight  # tied or not
        return cls(hf_model.config, weights, dtype, kernels, kv_dtype)

    def describe(self) -> str:
        cache = "fp16" if self.kv_dtype == torch.float16 else "fp32"
        return f"{kernel_paths.describe(self.kernels)}, {cache} KV cache"

    def linears(self) -> list[Linear]:
        """Every matrix a step multiplies with: the layers' four and the output head."""
        return [linear for layer in self.layers
                for linear in (layer.qkv, layer.out, layer.gate_up, layer.down, layer.router,
                               *(m for expert in layer.experts for m in expert))
                if linear is not None] + [self._lm_head]

    def weight_bytes(self) -> int:
        return sum(linear.nbytes for linear in self.linears())

    def new_cache(self) -> StaticKVCache:
        return StaticKVCache(self.num_layers, self.num_kv_heads, self.head_dim, 1024,
                             self.max_length, self.kv_dtype)

    def _rope_cache(self, capacity: int) -> None:
        """(cos, sin) [capacity, d] per rotary table."""
        self._tables = [tables(inv_freq, scale, capacity) for inv_freq, scale in self._frequencies]

    def hidden(self, cache: StaticKVCache, tokens: torch.Tensor,
               tree: TokenTree | None = None) -> torch.Tensor:
        """tokens: [T] int64 -> final-normed hidden states [T, H]; appends T positions to the cache.

        With a tree, tokens are its rows [root, nodes] (T = N + 1) and each row attends to the
        cache and its own ancestors only, at position start + depth (`tree.TokenTree`)."""
        if tree is None or tree.is_chain:
            return self.run_layers(cache, self.embedding(tokens))
        assert tokens.shape[0] == len(tree) + 1, (tokens.shape, len(tree))
        positions, mask = tree.attention(cache.length)
        return self.run_layers(cache, self.embedding(tokens), positions, mask)

    def hidden_masked(self, cache: StaticKVCache, tokens: torch.Tensor, positions: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
        """`MaskedTarget.hidden_masked`: tokens [T] at rotary positions [T] under mask
        [T, cache.length + T] -> hidden states [T, H]."""
        return self.run_layers(cache, self.embedding(tokens), positions, mask)

    def prefill(self, cache: StaticKVCache, tokens: torch.Tensor) -> torch.Tensor:
        """Append tokens without the LM head (a fifth of a long prompt's prefill on SmolLM2); returns
        their hidden states [T, H]."""
        return self.run_layers(cache, self.embedding(tokens))

    def forward_layers(self, cache: StaticKVCache, tokens: torch.Tensor,
                       layers: Sequence[int]) -> torch.Tensor:
        """tokens: [T] -> logits [T, V] through only these decoder layers (layer skipping)."""
        return self.logits(self.run_layers(cache, self.embedding(tokens), layers=layers))

    def embedding(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: [T] int64 -> their input vectors [T, H] (fp32)."""
        if isinstance(self.embed, QuantTensor):
            rows = self.embed.take(tokens.numpy())
            # gguf's numbers: read in a few array operations where the format is ours
            x = (torch.from_numpy(decode(rows).values()) if rows.qtype in FORMATS
                 else rows.dequantize())
        else:
            x = self.embed[tokens].float()
        return x if self._embed_scale is None else x * self._embed_scale

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [T, H] -> logits [T, V] (float32)."""
        return self._lm_head(hidden)

    def lm_head_rows(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The LM head's rows for `ids` ([len(ids), H], a contiguous copy) or all of it [V, H], in
        `dtype`."""
        return _rows(self.lm_head, ids, self.dtype)

    def output_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The output layer's rows for token ids `ids` ([E] int64) -> [E, H] float32, read from
        the whole layer on a copy `with_vocabulary` cut too (a drafter adds rows back from it)."""
        return _rows(self._whole_head, ids, torch.float32).float()

    def with_vocabulary(self, ids: torch.Tensor) -> "NativeDecoder":
        """This model with its output layer cut to the rows `ids` ([V'] int64; every other weight
        shared): logits column j scores token ids[j]. A drafter's cheaper output layer."""
        model = copy.copy(self)
        model.lm_head = (self.lm_head.take(ids.numpy()) if isinstance(self.lm_head, QuantTensor)
                         else self.lm_head[ids].contiguous())
        model.vocab_size = len(ids)
        model._lm_head = model._linear(model.lm_head)
        return model

    def layer_shape(self) -> dict:
        return layer_shape(self.config)

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first layer's rotary tables [length, d] (what a drafting head's layer uses)."""
        return tables(*self._frequencies[self.layers[0].rope], length)

    def head_layer(self, weights: Mapping[str, torch.Tensor], lm_head: torch.Tensor) -> "NativeDecoder":
        """One decoder layer of this model's shape, kernels and rotary embedding with these
        weights (names within a layer; no input norm, no final norm) and `lm_head` [V', H] as its
        logits: a 1-layer `NativeDecoder` run on input vectors by `run`."""
        config = copy.deepcopy(self.config)
        config.num_hidden_layers = 1
        named = {f"model.layers.0.{name}": tensor for name, tensor in weights.items()}
        named.update({"model.embed_tokens.weight": torch.empty(0, self.hidden_size),  # unused:
                      "lm_head.weight": lm_head})  # the layer runs on vectors
        if self._rope_factors is not None:
            named[ROPE_FACTORS] = self._rope_factors
        return NativeDecoder(config, named, self.dtype, self.kernels)

    def run(self, cache: StaticKVCache, x: torch.Tensor, positions: torch.Tensor | None = None,
            mask: torch.Tensor | None = None) -> torch.Tensor:
        """`HeadLayer.run`: the layers on input vectors x [T, H]."""
        return self.run_layers(cache, x, positions, mask)

    def hidden_batch(self, steps: Sequence[tuple[StaticKVCache, torch.Tensor, TokenTree | None]]
                     ) -> list[torch.Tensor]:
        """`hidden` for several sequences in one pass over the weights: (cache, tokens [T_i],
        tree or None) each -> [T_i, H] each. The rows of all of them go through every matrix
        together (the kernels compute a row the same way whatever else is in the call: on a path
        that does so only up to `invariant_rows` rows, in as few calls as keep within it); each
        sequence's rows attend to its own cache only."""
        segments = []
        for cache, tokens, tree in steps:
            positions, mask = (None, None) if tree is None or tree.is_chain \
                else tree.attention(cache.length)
            segments.append(Segment(cache, tokens.shape[0], positions, mask))
        out: list[torch.Tensor] = []
        limit = self.kernels.invariant_rows
        group: list[int] = []
        for i in range(len(steps) + 1):  # consecutive groups; a segment past the limit alone
            if group and (i == len(steps) or limit is not None and
                          sum(segments[j].rows for j in group) + segments[i].rows > limit):
                x = self.embedding(torch.cat([steps[j][1] for j in group]))
                out += self.run_segments([segments[j] for j in group], x).split(
                    [segments[j].rows for j in group])
                group = []
            if i < len(steps):
                group.append(i)
        return out

    def run_layers(self, cache: StaticKVCache, x: torch.Tensor,
                   positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                   layers: Sequence[int] | None = None) -> torch.Tensor:
        """The decoder stack on input vectors x: [T, H] (token embeddings, or an EAGLE head's fused
        features), appended to the cache at start = cache.length; returns [T, H] after the final
        norm (if there is one).

        positions: [T] rotary positions (default start..start+T-1); mask: [T, start + T] bool, True
        where a row may attend (default causal over the cache and the new rows)."""
        return self.run_segments([Segment(cache, x.shape[0], positions, mask)], x, layers)

    @torch.inference_mode()
    def run_segments(self, segments: Sequence["Segment"], x: torch.Tensor,
                     layers: Sequence[int] | None = None) -> torch.Tensor:
        """`run_layers` for consecutive row segments of x [sum of rows, H], each its own
        sequence's: the matrices and pointwise steps see all rows at once, attention each
        segment against its own cache."""
        starts = []
        for seg in segments:
            starts.append(seg.cache.length)
            seg.cache.reserve(seg.rows)
            if self._tables[0][0].shape[0] < seg.cache.capacity:
                self._rope_cache(seg.cache.capacity)
        positions = torch.cat([torch.arange(start, start + seg.rows) if seg.positions is None
                               else seg.positions for seg, start in zip(segments, starts)])
        k = self.kernels
        caches = k.attention_inputs([CacheRows(seg.cache.keys, seg.cache.values, start,
                                               seg.rows, seg.mask)
                                     for seg, start in zip(segments, starts)])
        order = range(self.num_layers) if layers is None else layers
        if self._stack is not None and all(seg.rows <= ROW_INVARIANT_ROWS for seg in segments):
            x = k.decoder_layers(self._stack, x, caches, order, self._tables, positions, self.eps)
        else:
            for i in order:
                x = self._run_layer(i, x, caches, positions)
        for seg, start in zip(segments, starts):
            seg.cache.length = start + seg.rows
        return x if self.norm is None else k.rms_norm(x, self.norm, self.eps)


    def _run_layer(self, i: int, x: torch.Tensor, caches, positions: torch.Tensor) -> torch.Tensor:
        """Layer i on the residual stream x [T, H], one kernel call at a time: the operations
        and order of csrc/layers.c (a norm the layer lacks is left out)."""
        k, w, eps = self.kernels, self.layers[i], self.eps
        h = x if w.input_norm is None else k.rms_norm(x, w.input_norm, eps)
        qkv = w.qkv(h)
        if w.q_norm is not None:
            qkv = k.head_norm(qkv, w.q_norm, w.k_norm, self.num_heads, self.num_kv_heads, eps)
        cos, sin = self._tables[w.rope]
        o = k.attention(qkv, caches, i, cos, sin, positions, self.num_heads, w.window,
                        self.shape.scale)  # [rows, heads d]
        y = w.out(o)
        x = x + (y if w.attention_out_norm is None else k.rms_norm(y, w.attention_out_norm, eps))
        h = k.rms_norm(x, w.ffn_norm, eps)
        y = self._mixture(w, h) if w.experts else self._mlp(w.gate_up, w.down, h)
        return x + (y if w.ffn_out_norm is None else k.rms_norm(y, w.ffn_out_norm, eps))

    def _mlp(self, gate_up: Linear, down: Linear, h: torch.Tensor) -> torch.Tensor:
        """h: [T, H] -> down(act(gate) · up): [T, H]."""
        k, both = self.kernels, gate_up(h)
        return down(k.gelu_mul(both) if self.shape.activation == "gelu_tanh"
                    else k.silu_mul(both))

    def _mixture(self, w: DecoderLayer, h: torch.Tensor) -> torch.Tensor:
        """A mixture-of-experts MLP on h [T, H]: each row's top_k experts by router probability,
        summed with those weights in the order of the experts' numbers (as transformers sums
        them). Row-invariant: the router and each expert are the kernels' products, which
        compute a row alike whatever rows share the call, the softmax and top-k run on one row
        at a time, and a row's sum adds its experts in an order no other row changes."""
        logits = w.router(h)  # [T, E]
        chosen, weights = [], []
        for row in logits:
            top = torch.topk(torch.softmax(row, dim=-1), w.top_k)
            values = top.values / top.values.sum() if w.normalize else top.values
            chosen.append(top.indices)
            weights.append(values)
        chosen, weights = torch.stack(chosen), torch.stack(weights)  # [T, top_k]
        out = torch.zeros_like(h)
        for e in chosen.unique().tolist():  # ascending
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            y = self._mlp(*w.experts[e], h[rows]) * weights[rows, slot, None]
            out.index_add_(0, rows, y)
        return out


def expert_rows(t: torch.Tensor | QuantTensor, expert: int, rows: int
                ) -> torch.Tensor | QuantTensor:
    """Expert `expert`'s matrix [rows, in] of all experts' in one tensor: [E, rows, in] (torch)
    or [E rows, in] (a GGUF block format, rows one after the other)."""
    if isinstance(t, QuantTensor):
        return t.take(np.arange(expert * rows, (expert + 1) * rows))
    return t[expert]


@dataclass(frozen=True)
class Segment:
    """One sequence's rows in a batched pass: its cache, how many rows, and for a tree their
    rotary positions [rows] and attention mask [rows, cache.length + rows] (None: causal)."""

    cache: StaticKVCache
    rows: int
    positions: torch.Tensor | None = None
    mask: torch.Tensor | None = None


def layer_shape(config) -> dict:
    """The sizes of one decoder layer of a transformers config (`FeatureTarget.layer_shape`)."""
    return {
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": head_dim(config),
        "intermediate_size": config.intermediate_size,
        "rms_norm_eps": config.rms_norm_eps,
    }


def fuse(parts: list) -> torch.Tensor | QuantTensor | list:
    """Matrices of one input width stacked by rows (q, k, v; gate, up): one matrix when they
    share a type, else the list, each part computed in its own format (`Linear`)."""
    if all(isinstance(p, torch.Tensor) for p in parts) and len({p.dtype for p in parts}) == 1:
        return torch.cat(parts)
    if all(isinstance(p, QuantTensor) for p in parts) and len({p.qtype for p in parts}) == 1:
        return QuantTensor.concat(parts)
    return parts


def _rows(matrix: QuantTensor | torch.Tensor, ids: torch.Tensor | None,
          dtype: torch.dtype) -> torch.Tensor:
    """A weight matrix's rows `ids` ([len(ids), I], a contiguous copy) or all of it: a block
    format's dequantized to `dtype`, a tensor's as they are."""
    if isinstance(matrix, QuantTensor):
        return (matrix if ids is None else matrix.take(ids.numpy())).dequantize(dtype)
    return matrix if ids is None else matrix[ids].contiguous()
