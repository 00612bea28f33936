"""A C kernel for the matrix products of a decoding step: y = x @ w.T with 1..16 rows of x (fp32),
weights in fp32 or bf16 (widened to fp32 in registers: bf16 halves the bytes a step reads, and
the arithmetic stays fp32).

Why not torch's: on this project's machine (2 AVX-512 cores) MKL's fp32 GEMM reads the weights at
the bandwidth floor only for 1-2 rows; with 3-16 rows it takes a compute-bound path (one SmolLM2
step over 8 tokens cost 2.2x a 1-token step in its linear layers, 1.8x with this kernel), and its
result for a row depends on how many rows share the call. `skinny_linear.c` streams every weight
row once for all rows of x and computes each output the same way whatever the row count, so a
token's logits are bitwise the same in plain decoding and in a verification step.

The source is compiled on first use with the system C compiler (`-march=native`, OpenMP) into the
cache directory, keyed by the source, compiler and CPU flags. Without a compiler, an AVX-512 CPU
or CPU tensors of the dtypes it has, callers fall back to torch (`available` says which);
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

MAX_ROWS = 16
_SOURCE = Path(__file__).with_name("skinny_linear.c")
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
    path = cache_dir() / "kernels" / f"skinny_linear-{key}.so"
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
    for function in (library.skinny_linear_f32, library.skinny_linear_bf16):
        function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        function.restype = ctypes.c_int
    return {torch.float32: library.skinny_linear_f32, torch.bfloat16: library.skinny_linear_bf16}


def enabled(dtype: torch.dtype = torch.float32) -> bool:
    """True when the kernel for weights of `dtype` (fp32, bf16) is built and loaded (on this CPU,
    with this compiler)."""
    return dtype in _kernels()


def available(x: torch.Tensor, w: torch.Tensor) -> bool:
    """True when `skinny_linear(x, w)` runs the kernel: contiguous CPU tensors, x fp32 with 1..16
    rows, w fp32 or bf16."""
    return (
        1 <= x.shape[0] <= MAX_ROWS
        and x.dtype == torch.float32
        and x.device.type == w.device.type == "cpu"
        and x.is_contiguous() and w.is_contiguous()
        and w.dtype in _kernels()
    )


def skinny_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x: [T, I] fp32, w: [O, I] fp32 or bf16 -> x @ w.T [T, O] fp32; call only where
    `available(x, w)`."""
    T, I = x.shape
    O = w.shape[0]
    assert w.shape[1] == I, (x.shape, w.shape)
    y = torch.empty(T, O, dtype=torch.float32)
    status = _kernels()[w.dtype](x.data_ptr(), w.data_ptr(), y.data_ptr(), T, I, O,
                                   torch.get_num_threads())
    assert status == 0, status
    return y
