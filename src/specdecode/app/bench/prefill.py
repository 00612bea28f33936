"""`specdecode bench --prefill`: where a prompt's prefill spends its time, at 512, 2,048 and 8,192
tokens (those the context holds), against the path's matrix peak, beside llama.cpp's `llama-bench
-p` on the same file.

The prefill is the engine's: chunks of `PREFILL_CHUNK` rows into an empty cache. Its matrix calls
are measured alone: every matrix of the model called on a chunk of random activations, by format
(a chunk's matrix work does not depend on where in the prompt it sits, so the prompt's is the
chunks' sum); their multiply-adds per second against `floor.peak_macs` (the same kernel and rows
on a matrix held in the caches) is how near the kernel's peak they run. The rest of the prefill
is attention, whose cost per token grows with the prompt, and what costs the same per token
(norms, rotary, activations, the embedding): the rest per token, at each length, shows which.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...core.engine import PREFILL_CHUNK
from ...errors import InvalidParameterError, SpecDecodeError
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


@dataclass
class PrefillTimes:
    sizes: list[int]
    matrices: dict[str, tuple[float, float]]  # `matrix_seconds`
    peaks: dict[str, float]  # multiply-adds per second of each format's kernel, in the caches
    totals: dict[int, float]  # prompt tokens -> seconds of its whole prefill


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
    return PrefillTimes(sizes, matrices, peaks, totals)


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
             "| prompt | tok/s | matrix calls | the rest (attention, norms, ...) | the rest per "
             "token | llama-bench pp tok/s | ours / llama.cpp |", "|---|---|---|---|---|---|---|"]
    for n in t.sizes:
        total, theirs = t.totals[n], (peer or {}).get(n)
        matrix = chunk * n / PREFILL_CHUNK
        lines.append(f"| {n} | {n / total:.0f} | {matrix / total:.0%} | "
                     f"{(total - matrix) / total:.0%} | {(total - matrix) / n * 1e3:.2f} ms | "
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
