"""The kernels of a decoder step, one algorithm on several instruction sets.

Paths, best first: `avx512amx` (`avx512vnni` with AMX's matrix tiles for block-format calls of 32
rows or more: Sapphire Rapids and later Xeons, where the OS grants the tiles' state; bitwise what
`avx512vnni` gives), `avx512vnni` (x86 with AVX-512 F, BW and VNNI), `avx512` (AVX-512 F and BW),
`avx2vnni` (`avx2` with AVX-VNNI's dot products: Intel cores since Alder Lake, without AVX-512),
`avx2` (x86 with AVX2 and FMA), `neondot` (`neon` with the Armv8.2 dot products: Apple M1 and
later, Graviton 2 and later), `neon` (64-bit ARM), `generic` (portable C, any CPU with a C
compiler), and `torch` (no C compiler: torch operations). The C paths are one set of
width-generic sources (`csrc/linear.c`, `qlinear.c`, `attention.c`, `pointwise.c`, `layers.c`) over
`csrc/simd.h`, which has one small implementation per instruction set in
`csrc/isa/`; `csrc/kernels.h` declares what they export. Each is compiled on first use with the
system C compiler (`build.py`) and cached.

Operations (the `Kernels` interface):
- `linear`: y = x @ w.T for any number of rows, packed once by `pack` into panels of one
  vector's width of output rows, so each weight is read once per step for a tile of rows, with no
  horizontal sums: weights fp32, bf16 or fp16 widened to fp32 in registers (`linear.c`), or in
  one of GGUF's block formats in integer dot products with x rounded to 8 bits per block of 32
  (`qlinear.c`);
- `attention`: rotary embedding, KV-cache write and softmax attention of one layer, causal or
  under a tree mask;
- `rms_norm`, `head_norm` (each q and k head by its own norm), `silu_mul`, `gelu_mul` (SwiGLU,
  GeGLU): the element-wise parts of a layer;
- `decoder_layers` (C paths): a model's decoder layers in one call (`csrc/layers.c`), the same
  operations in the same order as `models/decoder.py`'s loop over them, so the same bits; a step
  then crosses from Python into the kernels once instead of ~8 times a layer (`stack` describes
  the model's weights for it once, at load, as `layer.DecoderLayer`s).

The contract every path keeps: a row's result is bitwise the same whatever other rows share the
call (for calls of up to `ROW_INVARIANT_ROWS` rows: every decoding and verification step), so a
token's logits are the same in plain decoding and in a verification step, and speculative greedy
output equals plain greedy output on every CPU. Paths differ from each other in the last bits
(the vector width orders the sums); each is exact with itself.

`SPECDECODE_ISA=avx512amx|avx512vnni|avx512|avx2vnni|avx2|neondot|neon|generic|torch` forces a
path; otherwise the best one the machine runs is used (asking the compiler, see `build.py`), and
torch when nothing compiles.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Protocol, Sequence

import torch

from ..errors import SpecDecodeError
from . import build
from .layer import DecoderLayer, StackShape
from .native import CKernels
from .torch_path import ROW_INVARIANT_ROWS, CacheRows, TorchKernels

PATHS = (*build.C_PATHS, "torch")
ISA_VARIABLE = "SPECDECODE_ISA"
_log = logging.getLogger("specdecode")

__all__ = ["PATHS", "ROW_INVARIANT_ROWS", "CacheRows", "DecoderLayer", "Kernels",
           "KernelUnavailable", "StackShape", "active", "describe", "load", "runnable"]


class KernelUnavailable(SpecDecodeError):
    """A kernel path that cannot run on this machine was asked for."""


class Kernels(Protocol):
    name: str  # the path: avx512amx, avx512vnni, avx512, avx2vnni, avx2, neondot, neon, generic
    # or torch
    threading: str  # how rows are spread over threads: OpenMP, pthreads or torch
    # the most rows a linear, norm or SwiGLU call may hold and still compute each row as alone
    # (None: any number); attention is row-invariant up to ROW_INVARIANT_ROWS rows on every path
    invariant_rows: int | None

    def fits(self, head_dim: int, widths: tuple[int, ...]) -> bool:
        """True when a model with this head size and these row widths runs on this path."""
        ...

    def pack(self, w: torch.Tensor) -> torch.Tensor:
        """A weight [O, I] (fp32 or bf16) in the layout `linear` reads."""
        ...

    def linear(self, x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
        """x: [T, I] fp32 -> x @ w.T: [T, O] fp32."""
        ...

    def stack(self, shape: StackShape, layers: Sequence[DecoderLayer]) -> object | None:
        """A model's decoder layers as `decoder_layers` runs them in one call; None where this
        path runs a layer one operation at a time (`models/decoder.py` then does)."""
        ...

    def decoder_layers(self, stack: object, x: torch.Tensor, caches: object,
                       layers: Sequence[int], tables: Sequence[tuple[torch.Tensor, torch.Tensor]],
                       positions: torch.Tensor, eps: float) -> torch.Tensor:
        """Where `stack` gave one: x [T, hidden] through `layers` of it (every sequence of the
        step with at most ROW_INVARIANT_ROWS rows), bitwise what the layers give one operation
        at a time; tables: (cos, sin) for each `DecoderLayer.rope` index."""
        ...

    def attention_inputs(self, caches: Sequence[CacheRows]) -> object:
        """A step's caches (`CacheRows` per sequence: its cache [layers, G, capacity, d] fp32, the
        new rows' start and count, a tree mask or causal) as `attention` reads them; made once
        per step, used by every layer."""
        ...

    def attention(self, qkv: torch.Tensor, caches: object, layer: int, cos: torch.Tensor,
                  sin: torch.Tensor, positions: torch.Tensor, num_heads: int, window: int,
                  scale: float) -> torch.Tensor:
        """One layer's attention for the new rows of one or more sequences, each against its
        own cache (`attention_inputs`), the new rows' k and v written at start..start+rows-1.

        qkv: [T, (H + 2 G) d] fp32, the sequences' rows one after the other, q and k rotated in
        place; cos, sin: [>= max position + 1, d]; positions: [T] int64; window: a row sees only
        keys less than `window` positions behind it (0: every key) -> softmax(q kᵀ · scale) v:
        [T, H d]."""
        ...

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x: [T, H], weight: [H] fp32 -> x / sqrt(mean(x²) + eps) · weight per row."""
        ...

    def head_norm(self, qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  num_heads: int, num_kv_heads: int, eps: float) -> torch.Tensor:
        """qkv: [T, (H + 2 G) d] -> the same with each q head normed by q_weight [d] and each k
        head by k_weight [d] as `rms_norm` norms a row, the v heads unchanged."""
        ...

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: [T, 2 I] = [gate; up] per row -> silu(gate) · up: [T, I]."""
        ...

    def gelu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gate_up: [T, 2 I] = [gate; up] per row -> gelu(gate) · up (tanh form): [T, I]."""
        ...

    def instruction_peak(self, seconds: float = 0.2) -> float | None:
        """Multiply-adds per second of the block formats' dot-product instruction alone, in
        registers, on every thread (about `seconds` of work); None where the path has none."""
        ...

    def read_bandwidth(self, data: torch.Tensor) -> float | None:
        """Bytes a second of this path's own loads streaming `data` (contiguous, a multiple of 4
        bytes) on every thread, one timed pass; None where the path has no loop of its own."""
        ...


def runnable() -> list[str]:
    """The paths this machine can run, best first (torch always)."""
    cc = build.compiler()
    return [*(build.runnable_paths(cc) if cc else []), "torch"]


@functools.cache
def load(path: str, openmp: bool = True) -> Kernels:
    """The kernels of one path, built on first use; with OpenMP where the compiler has it unless
    openmp=False (then the library's own thread pool). Raises `KernelUnavailable` with a one-line
    reason when the path cannot run here."""
    if path == "torch":
        return TorchKernels()
    if path not in build.C_PATHS:
        raise KernelUnavailable(f"unknown kernel path {path!r} (choose {', '.join(PATHS)})")
    cc = build.compiler()
    here = runnable()
    if cc is None or path not in here:
        why = "no working C compiler (set CC)" if len(here) == 1 else "this CPU does not have it"
        raise KernelUnavailable(f"the {path} kernels cannot run here: {why}; this machine runs "
                                f"{', '.join(here)}")
    try:
        library = build.build(path, cc, openmp)
        return CKernels(build.load(library), build.build_id(library))
    except build.BuildError as exc:
        raise KernelUnavailable(f"compiling the {path} kernels failed: {exc}") from exc


@functools.cache
def active() -> Kernels:
    """The path this process uses: `SPECDECODE_ISA` if set, else the best one that builds."""
    forced = os.environ.get(ISA_VARIABLE, "").strip().lower()
    if forced:
        try:
            return load(forced)
        except KernelUnavailable as exc:
            raise KernelUnavailable(f"{ISA_VARIABLE}={forced}: {exc}") from None
    for path in runnable()[:-1]:  # the C paths, best first
        try:
            return load(path)
        except KernelUnavailable as exc:
            _log.warning("specdecode: %s; trying the next path", exc)
    _log.warning("specdecode: no C kernels for this machine (no working C compiler?); decoding "
                 "steps use the torch path, exact but slower")
    return load("torch")


def describe(kernels: Kernels) -> str:
    """'avx2 kernels (OpenMP, 2 threads)': the path, as every report names it."""
    if kernels.name == "torch":
        return f"torch kernels ({torch.get_num_threads()} threads)"
    return f"{kernels.name} kernels ({kernels.threading}, {torch.get_num_threads()} threads)"
