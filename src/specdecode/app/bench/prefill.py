"""`specdecode bench --prefill`: where a prompt's prefill spends its time, at 512, 2,048 and 8,192
tokens (those the context holds), against the path's matrix peak, beside llama.cpp's `llama-bench
-p` on the same file.

The prefill is the engine's: chunks of `PREFILL_CHUNK` rows into an empty cache. Its matrix calls
are measured alone: every matrix of the model called on a chunk of random activations, by format
(a chunk's matrix work does not depend on where in the prompt it sits, so the prompt's is the
chunks' sum); their multiply-adds per second against `floor.peak_macs` (the same kernel and rows
on a matrix held in the caches) is how near the kernel's peak they run. Attention is timed alone
too, on the target's own kernel for a chunk behind three depths of each prompt (its cost grows
with the keys behind a chunk: linear in between), for native targets. What the two leave of the
whole prefill is norms, rotary, activations and the embedding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...core.engine import PREFILL_CHUNK
from ...errors import InvalidParameterError, SpecDecodeError
from ...kernels import CacheRows
from ...models import LoadedModel
from .floor import _median_seconds, peak_macs, prefill_seconds

SIZES = (512, 2048, 8192)


def matrix_seconds(model: LoadedModel) -> dict[str, tuple[float, float]]:
    """Per format: (seconds of one chunk's matrix calls, their multiply-adds)."""
    kernels = model.target.kernels
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for linear in model.target.linears():
        x = torch.randn(PREFILL_CHUNK, linear.in_features)
        for (packed, rows), (kind, _) in zip(linear.packed_parts(), linear.parts()):
            seconds = _median_seconds(lambda: kernels.linear(x, packed, rows), 3, min)
            out[str(kind)][0] += seconds
            out[str(kind)][1] += PREFILL_CHUNK * rows * linear.in_features
    return {kind: (s, macs) for kind, (s, macs) in out.items()}


def attention_seconds(model: LoadedModel, tokens: int, repeats: int = 5) -> float | None:
    """Seconds of every attention call of a `tokens`-token prefill (each layer, each chunk): a
    chunk timed behind the prompt's first, middle and last chunk's keys, linear in between, per
    distinct sliding window of the layers; None where the target has no native layers."""
    target = model.target
    if not hasattr(target, "layers") or not hasattr(target, "kv_dtype"):
        return None
    kernels, H, G, d = target.kernels, target.num_heads, target.num_kv_heads, target.head_dim
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(1, G, tokens, d, generator=gen).to(target.kv_dtype)
    values = torch.randn(1, G, tokens, d, generator=gen).to(target.kv_dtype)
    cos, sin = target.rope_tables(tokens)
    starts = list(range(0, tokens, PREFILL_CHUNK))
    samples = sorted({starts[0], starts[len(starts) // 2], starts[-1]})
    total = 0.0
    for window in {layer.window for layer in target.layers}:
        layers = sum(layer.window == window for layer in target.layers)
        measured = []
        for start in samples:
            rows = min(PREFILL_CHUNK, tokens - start)
            qkv = torch.randn(rows, (H + 2 * G) * d, generator=gen)
            cache = kernels.attention_inputs([CacheRows(keys, values, start, rows)])
            positions = torch.arange(start, start + rows)
            measured.append(_median_seconds(
                lambda: kernels.attention(qkv, cache, 0, cos, sin, positions, H, window,
                                          target.shape.scale), repeats))
        total += layers * sum(float(np.interp(start, samples, measured)) for start in starts)
    return total


@dataclass
class PrefillTimes:
    sizes: list[int]
    matrices: dict[str, tuple[float, float]]  # `matrix_seconds`
    peaks: dict[str, float]  # multiply-adds per second of each format's kernel, in the caches
    totals: dict[int, float]  # prompt tokens -> seconds of its whole prefill
    attention: dict[int, float | None]  # prompt tokens -> `attention_seconds`


def measure_prefill(model: LoadedModel, sizes: Sequence[int] = SIZES) -> PrefillTimes:
    """The prefill of each of `sizes` tokens the context holds (at least two)."""
    sizes = [n for n in sizes if n < model.target.max_length]
    if len(sizes) < 2:
        raise InvalidParameterError(f"{model.name}'s context of {model.target.max_length} tokens "
                                    f"holds fewer than two of the prompt lengths {SIZES}")
    matrices = matrix_seconds(model)
    kinds = {str(kind): kind for linear in model.target.linears() for kind, _ in linear.parts()}
    peaks = {name: peak_macs(model.target.kernels, kind, PREFILL_CHUNK)
             for name, kind in kinds.items()}
    totals = {n: prefill_seconds(model, n, repeats=3 if n <= 2048 else 1) for n in sizes}
    return PrefillTimes(sizes, matrices, peaks, totals, {n: attention_seconds(model, n)
                                                         for n in sizes})


def prefill_report(model: LoadedModel, t: PrefillTimes, peer: dict[int, float] | None,
                   why: str | None = None) -> str:
    """The report's lines; `peer`: llama-bench's tokens/s by prompt length (None: not run,
    because `why`)."""
    chunk = sum(s for s, _ in t.matrices.values())
    lines = [f"prefill of {model.name} ({model.weights}, {model.kernels}, "
             f"{torch.get_num_threads()} threads; {PREFILL_CHUNK}-row chunks into an empty cache)",
             "matrix calls of a chunk, by format (measured alone): " + "; ".join(
                 f"{kind.removeprefix('torch.')} {s * 1e3:.1f} ms, {macs / s / 1e9:.0f} GMAC/s "
                 f"= {macs / s / t.peaks[kind]:.0%} of its peak {t.peaks[kind] / 1e9:.0f}"
                 for kind, (s, macs) in sorted(t.matrices.items())),
             "parts timed alone, as shares of the whole prefill (alone, a part pays its own calls "
             "and colder caches: the shares may add up past 100%; what they leave is norms, "
             "rotary, activations, the embedding)",
             "| prompt | tok/s | matrix calls | attention | attention per token | "
             "llama-bench pp tok/s | ours / llama.cpp |", "|---|---|---|---|---|---|---|"]
    for n in t.sizes:
        total, theirs, attention = t.totals[n], (peer or {}).get(n), t.attention[n]
        lines.append(f"| {n} | {n / total:.0f} | {chunk * n / PREFILL_CHUNK / total:.0%} | "
                     + (f"{attention / total:.0%} | {attention / n * 1e3:.2f} ms | "
                        if attention is not None else "- | - | ")
                     + (f"{theirs:.0f} | {n / total / theirs:.2f}x |" if theirs else "- | - |"))
    if peer is None:
        lines.append(f"llama.cpp: not compared ({why})")
    return "\n".join(lines)


def peer_rates(model: LoadedModel, sizes: Sequence[int]) -> tuple[dict[int, float] | None,
                                                                  str | None]:
    """llama-bench's prefill tokens/s at each size on the model's GGUF file, or why not."""
    from ...models.loader import gguf_file
    from . import llamacpp_programs

    path = gguf_file(model.name)
    why = "the model has no GGUF file" if path is None else llamacpp_programs.missing_reason()
    if why:
        return None, why
    try:
        rates = llamacpp_programs.llama_bench(path, torch.get_num_threads(), prompts=sizes,
                                              generate=0, repetitions=1)
    except SpecDecodeError as exc:
        return None, str(exc)
    return {n: rates[f"pp{n}"] for n in sizes}, None
