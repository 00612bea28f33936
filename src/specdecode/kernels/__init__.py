"""C kernels for a decoder step on AVX-512 CPUs, all fp32 arithmetic:

- `linear`: y = x @ w.T for any number of rows of x, weights in fp32 or bf16 (widened to fp32 in
  registers: bf16 halves the bytes a step reads), packed once into panels of 16 output rows
  (`pack`) — `linear.c`;
- `attention`: rotary embedding, KV-cache write and softmax attention of one layer — `attention.c`;
- `rms_norm`, `silu_mul`: the element-wise parts of a layer — `pointwise.c`.

Why not torch's: on this project's machine (2 AVX-512 cores) MKL's fp32 GEMM reads the weights at
the bandwidth floor only for 1-2 rows; with 3-16 rows it takes a compute-bound path (SmolLM2's
matrix products for an 8-token step: 33-40 ms against 14-18 ms for one token), and its result for
a row depends on how many rows share the call. `linear.c` reads each weight once per step for up
to 8 rows with no horizontal sums (8 rows: 18 ms), is faster than MKL on prefill too (256 rows:
320 vs 530 ms), and computes each output the same way whatever the row count, so a token's
logits are bitwise the same in plain decoding, a verification step and a prefill. The attention
and element-wise kernels replace ~45 small torch operations per layer (~5 ms of dispatch a step
for SmolLM2) and keep that property: a row's result never depends on the other rows in the call.

The sources are compiled on first use with the system C compiler (`-march=native`, OpenMP) into the
cache directory, keyed by the source, compiler and CPU flags. Without a compiler, an AVX-512 CPU
or CPU tensors of the dtypes it has, callers fall back to torch (`enabled` says when);
`SPECDECODE_KERNELS=0` forces the fallback.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch

PANEL = 16  # output rows per packed panel (one AVX-512 vector)
_SOURCES = sorted(Path(__file__).parent.glob("*.c"))
_HEADERS = sorted(Path(__file__).parent.glob("*.h"))
_log = logging.getLogger("specdecode")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


_WEIGHT_TYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The kernels, built and loaded on first use; None where they cannot run."""
    if os.environ.get("SPECDECODE_KERNELS", "1") == "0":
        return None
    flags = _cpu_flags()
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if " avx512f" not in flags or compiler is None:
        _log.warning("specdecode: no AVX-512 CPU or C compiler; decoding steps use torch's matmul")
        return None
    from ..models.loader import cache_dir

    key = hashlib.sha256(b"".join(s.read_bytes() for s in _SOURCES + _HEADERS) + compiler.encode()
                         + flags.encode()).hexdigest()[:16]
    path = cache_dir() / "kernels" / f"kernels-{key}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")  # renamed into place: no half-built file
        build = [compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                 *map(str, _SOURCES), "-o", str(partial), "-lm"]
        try:
            result = subprocess.run(build, capture_output=True, text=True)
            failure = None if result.returncode == 0 else (
                result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        except OSError as exc:  # CC names no program
            failure = str(exc)
        if failure:
            _log.warning("specdecode: compiling the decoding kernels failed (%s); using torch",
                         failure)
            return None
        os.replace(partial, path)
    library = ctypes.CDLL(str(path))
    for name in _WEIGHT_TYPES.values():
        function = getattr(library, f"linear_{name}")
        function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        function.restype = ctypes.c_int
    library.attention.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int64] * 6 + [ctypes.c_int]
    library.attention.restype = ctypes.c_int
    library.rms_norm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_float]
    library.silu_mul.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2
    return library


@functools.cache
def _linear_function(dtype: torch.dtype):
    """The C function for weights of `dtype` (looked up once, not per call)."""
    return getattr(_library(), f"linear_{_WEIGHT_TYPES[dtype]}")


def enabled(dtype: torch.dtype = torch.float32) -> bool:
    """True when the kernel for weights of `dtype` (fp32, bf16) is built and loaded (on this CPU,
    with this compiler)."""
    return _library() is not None and dtype in _WEIGHT_TYPES


def pack(w: torch.Tensor) -> torch.Tensor:
    """w: [O, I] -> panels [ceil(O / 16), I, 16] (panel p, column k holds w[16p .. 16p + 15, k]),
    the rows past O zero: the layout `linear` reads."""
    O, I = w.shape
    padded = w.new_zeros(-(-O // PANEL) * PANEL, I)
    padded[:O] = w
    return padded.view(-1, PANEL, I).transpose(1, 2).contiguous()


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int) -> torch.Tensor:
    """x: [T, I] fp32, panels: `pack(w)` of w [O = out_features, I] in fp32 or bf16, on the CPU,
    where `enabled(panels.dtype)` -> x @ w.T [T, O] fp32."""
    T, I = x.shape
    assert x.dtype == torch.float32 and panels.shape[1:] == (I, PANEL), (x.shape, panels.shape)
    x = x.contiguous()
    y = torch.empty(T, out_features, dtype=torch.float32)
    if T:
        status = _linear_function(panels.dtype)(x.data_ptr(), panels.data_ptr(), y.data_ptr(), T,
                                                I, out_features, torch.get_num_threads())
        assert status == 0, status
    return y


def attention_runs(head_dim: int) -> bool:
    """True when `attention` runs here for heads of this size (a multiple of 16)."""
    return _library() is not None and head_dim % 16 == 0


def attention(qkv: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, start: int,
              num_heads: int) -> torch.Tensor:
    """One layer's attention for T new rows, where `attention_runs(d)`:

    qkv: [T, (H + 2 G) d] fp32, rotated in place; keys, values: the layer's cache [G, capacity, d]
    fp32, the new rows' k and v written at start..start+T-1; cos, sin: [>= max position + 1, d];
    positions: [T] int64; mask: [T, start + T] bool, True where a row may attend, or None for
    causal -> softmax(q kᵀ / √d) v: [T, H d]."""
    T, G, capacity, d = qkv.shape[0], keys.shape[0], keys.shape[1], keys.shape[2]
    assert qkv.is_contiguous() and keys.is_contiguous() and values.is_contiguous()
    assert qkv.shape[1] == (num_heads + 2 * G) * d, (qkv.shape, num_heads, G, d)
    out = torch.empty(T, num_heads * d, dtype=torch.float32)
    mask = None if mask is None else mask.contiguous()  # held: the kernel reads its memory
    status = _library().attention(
        qkv.data_ptr(), keys.data_ptr(), values.data_ptr(), cos.data_ptr(), sin.data_ptr(),
        positions.data_ptr(), None if mask is None else mask.data_ptr(),
        out.data_ptr(), T, start, num_heads, G, d, capacity, torch.get_num_threads())
    assert status == 0, status
    return out


def pointwise_runs(x: torch.Tensor) -> bool:
    """True when `rms_norm` and `silu_mul` run here for rows like x ([T, width] fp32 on the CPU,
    the width a multiple of 16)."""
    return (_library() is not None and x.dtype == torch.float32 and x.device.type == "cpu"
            and x.dim() == 2 and x.shape[1] % 16 == 0)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [T, H], weight: [H] fp32 -> x / sqrt(mean(x²) + eps) · weight per row, [T, H]."""
    x, weight = x.contiguous(), weight.contiguous()
    out = torch.empty_like(x)
    status = _library().rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.shape[0],
                                 x.shape[1], eps)
    assert status == 0, status
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up: [T, 2 I] = [gate; up] per row -> silu(gate) · up, [T, I]."""
    gate_up = gate_up.contiguous()
    T, width = gate_up.shape
    out = torch.empty(T, width // 2, dtype=torch.float32)
    status = _library().silu_mul(gate_up.data_ptr(), out.data_ptr(), T, width // 2)
    assert status == 0, status
    return out
