"""A C kernel for the linear layers of a decoder: y = x @ w.T for any number of rows of x (fp32),
weights in fp32 or bf16 (widened to fp32 in registers: bf16 halves the bytes a step reads, and
the arithmetic stays fp32), packed once into panels of 16 output rows (`pack`).

Why not torch's: on this project's machine (2 AVX-512 cores) MKL's fp32 GEMM reads the weights at
the bandwidth floor only for 1-2 rows; with 3-16 rows it takes a compute-bound path (SmolLM2's
matrix products for an 8-token step: 33-40 ms against 14-18 ms for one token), and its result for
a row depends on how many rows share the call. `linear.c` reads each weight once per step for up
to 8 rows with no horizontal sums (8 rows: 18 ms), is faster than MKL on prefill too (256 rows:
320 vs 530 ms), and computes each output the same way whatever the row count, so a token's
logits are bitwise the same in plain decoding, a verification step and a prefill.

The source is compiled on first use with the system C compiler (`-march=native`, OpenMP) into the
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
_SOURCE = Path(__file__).with_name("linear.c")
_log = logging.getLogger("specdecode")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


@functools.cache
def _kernels() -> dict[torch.dtype, ctypes._CFuncPtr]:
    """The kernel per weight dtype, built and loaded on first use; {} where it cannot run."""
    if os.environ.get("SPECDECODE_KERNELS", "1") == "0":
        return {}
    flags = _cpu_flags()
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if " avx512f" not in flags or compiler is None:
        _log.warning("specdecode: no AVX-512 CPU or C compiler; decoding steps use torch's matmul")
        return {}
    from ..models.loader import cache_dir

    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + compiler.encode() + flags.encode()).hexdigest()[:16]
    path = cache_dir() / "kernels" / f"linear-{key}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")  # renamed into place: no half-built file
        build = [compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                 str(_SOURCE), "-o", str(partial)]
        try:
            result = subprocess.run(build, capture_output=True, text=True)
            failure = None if result.returncode == 0 else (
                result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        except OSError as exc:  # CC names no program
            failure = str(exc)
        if failure:
            _log.warning("specdecode: compiling the decoding kernel failed (%s); using torch",
                         failure)
            return {}
        os.replace(partial, path)
    library = ctypes.CDLL(str(path))
    for function in (library.linear_f32, library.linear_bf16):
        function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        function.restype = ctypes.c_int
    return {torch.float32: library.linear_f32, torch.bfloat16: library.linear_bf16}


def enabled(dtype: torch.dtype = torch.float32) -> bool:
    """True when the kernel for weights of `dtype` (fp32, bf16) is built and loaded (on this CPU,
    with this compiler)."""
    return dtype in _kernels()


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
        status = _kernels()[panels.dtype](x.data_ptr(), panels.data_ptr(), y.data_ptr(), T, I,
                                          out_features, torch.get_num_threads())
        assert status == 0, status
    return y
