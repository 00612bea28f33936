"""`specdecode bench --floor`: where a decoding step stands between its two floors.

A step must read every weight once, so weight bytes / bandwidth is the fastest it can be (the
bandwidth floor); and it must do every multiplication, so multiply-adds / the kernels' own peak
rate is another (the arithmetic floor). The peak is measured, not taken from a data sheet: the
same kernel, the same format and the same number of rows, on a matrix small enough to stay in the
cache, where no memory traffic slows it. Above both sits the instruction peak: the block formats'
dot-product instruction alone in registers on every thread (`Kernels.instruction_peak`); a step's
multiply-adds per second as a fraction of it is how far the kernels are from the physical limit.
A step over n tokens costs n times the arithmetic of a
one-token step and the same weight bytes: speculation pays while the bandwidth floor is the larger.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from ...core.engine import PREFILL_CHUNK
from ...errors import SpecDecodeError
from ...kernels import Kernels
from ...models import LoadedModel
from ...models.timing import step_seconds
from ...quant import QuantTensor, panel_bytes, random_blocks


def _median_seconds(fn, repeats: int, statistic=statistics.median) -> float:
    fn()  # warm-up: first-touch page faults and kernel selection are not part of a step
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistic(times)


def measure_bandwidth(kernels: Kernels, megabytes: int = 512,
                      repeats: int = 7) -> tuple[float, str]:
    """Bytes per second of a streaming read of `megabytes`, far beyond the caches, and what read
    them: the faster of torch's sum and the kernels' own loads (`Kernels.read_bandwidth`), each
    the median of `repeats` passes, in turns. The faster one, since the floor is meant to be
    strict: no kernel reads weights faster than memory delivers them (torch's sum read slower
    than the kernels' loop on one host, and slower than the 1.5B's largest matrix call:
    docs/benchmarks/kernel-paths)."""
    data = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    nbytes = data.numel() * data.element_size()
    data.sum()  # first touch of the pages
    summed, loaded = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        data.sum()
        summed.append(nbytes / (time.perf_counter() - started))
        rate = kernels.read_bandwidth(data)
        if rate is not None:
            loaded.append(rate)
    torch_rate = statistics.median(summed)
    kernel_rate = statistics.median(loaded) if loaded else 0.0
    if kernel_rate > torch_rate:
        return kernel_rate, f"{kernels.name} kernels' loads"
    return torch_rate, "torch's sum"


def resident_mb() -> float:
    """This process's resident memory now (Linux: VmRSS; elsewhere its peak so far), in MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6


def tokenizer_alone(name: str) -> object:
    """The model's tokenizer and config, loaded as `load_model` loads them (to tell their
    memory from the weights')."""
    from ...models import loader

    source, _ = loader.resolve_source(name)
    return loader._load_tokenizer_and_config(source, name)


def gguf_tensor_mb(model: LoadedModel) -> float | None:
    """MB of tensor data in the model's GGUF file (None for other models)."""
    from ...models.loader import gguf_file

    path = gguf_file(model.name)
    if path is None:
        return None
    from ...models.gguf_check import read_header

    return sum(t.nbytes for t in read_header(path).tensors.values()) / 1e6


def peak_macs(kernels, dtype, rows: int, repeats: int = 9) -> float:
    """Multiply-adds per second of `kernels.linear` for weights of `dtype` (a torch dtype or a
    GGUF format) and `rows` rows of x: the best of matrices of 0.5, 1 and 2 MB (in the caches,
    large enough that a call's fixed cost hardly counts) and of several calls each."""
    I, best = 2048, 0.0
    for nbytes in (1 << 19, 1 << 20, 1 << 21):
        if isinstance(dtype, str):
            O = max(64, nbytes // panel_bytes(dtype, I, 1) // 64 * 64)
            weight = QuantTensor(dtype, random_blocks(dtype, O, I, np.random.default_rng(0)), I)
        else:
            O = max(64, nbytes // (I * torch.finfo(dtype).bits // 8) // 64 * 64)
            weight = torch.randn(O, I).to(dtype)
        panels, x = kernels.pack(weight), torch.randn(rows, I)
        seconds = _median_seconds(lambda: kernels.linear(x, panels, O), repeats, min)
        best = max(best, O * I * rows / seconds)
    return best


def matrix_parts(model: LoadedModel) -> list[tuple[object, int]]:
    """(format, weights) of every part of the target's matrices: a one-token step's
    multiply-adds, by format."""
    return [(kind, out * linear.in_features) for linear in model.target.linears()
            for kind, out in linear.parts()]


def arithmetic_seconds(model: LoadedModel, rows: int) -> tuple[float, dict[str, float]]:
    """The arithmetic floor of a step over `rows` tokens, and the peak rate of each format."""
    parts = matrix_parts(model)
    rates = {str(kind): peak_macs(model.target.kernels, kind, rows) for kind, _ in parts}
    seconds = sum(weights * rows / rates[str(kind)] for kind, weights in parts)
    return seconds, rates


def prefill_seconds(model: LoadedModel, tokens: int = 512, repeats: int = 3) -> float:
    """Median time to prefill a `tokens`-token prompt into an empty cache, in the engine's chunks
    of PREFILL_CHUNK rows (what llama-bench's pp512 measures for llama.cpp)."""
    target = model.target
    ids = torch.randint(0, target.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0))

    def prefill() -> None:
        cache = target.new_cache()
        for start in range(0, tokens, PREFILL_CHUNK):
            target.prefill(cache, ids[start:start + PREFILL_CHUNK])

    return _median_seconds(prefill, repeats)


def peer_lines(model: LoadedModel, one_step: float, prefill_rate: float) -> list[str]:
    """llama.cpp's `llama-bench` (tg128, pp512) on the model's GGUF file beside our one-token
    step (seconds) and 512-token prefill (tokens/s); a line saying why not where it cannot
    run."""
    from ...models.loader import gguf_file
    from . import llamacpp_programs

    path = gguf_file(model.name)
    why = "the model has no GGUF file" if path is None else llamacpp_programs.missing_reason()
    if why:
        return [f"llama.cpp: not compared ({why})"]
    threads = torch.get_num_threads()
    try:
        rates = llamacpp_programs.llama_bench(path, threads)
    except SpecDecodeError as exc:  # the peer's failure must not lose the measurement above
        return [f"llama.cpp: not compared ({exc})"]
    return [f"llama.cpp llama-bench on {path.name}, {threads} threads: tg128 "
            f"{rates['tg128']:.1f} tok/s, pp512 {rates['pp512']:.0f} tok/s; ours: one-token step "
            f"{1 / one_step:.1f} tok/s = {1 / one_step / rates['tg128']:.2f}x tg128, 512-token "
            f"prefill {prefill_rate:.0f} tok/s = {prefill_rate / rates['pp512']:.2f}x pp512"]


def floor_report(model: LoadedModel, sizes=(1, 4, 8, 16)) -> str:
    """The step's weight bytes, its bandwidth and arithmetic floors, and measured steps between
    them."""
    kernels = model.target.kernels
    bandwidth, reader = measure_bandwidth(kernels)
    nbytes = model.target.weight_bytes()
    floor = nbytes / bandwidth
    peak = kernels.instruction_peak()
    macs = sum(weights for _, weights in matrix_parts(model))  # of a one-token step
    seconds = step_seconds(model.target, sizes)
    one = seconds[sizes[0]]
    lines = [f"bandwidth floor: {bandwidth / 1e9:.1f} GB/s (streaming read: {reader}), "
             f"{model.weights} weights {nbytes / 1e6:.0f} MB -> {floor * 1e3:.2f} ms/step"]
    if peak:
        lines.append(f"instruction peak ({kernels.name}, {torch.get_num_threads()} threads): "
                     f"{peak / 1e9:.0f} GMAC/s; a one-token step has {macs / 1e9:.2f} G "
                     "multiply-adds")
    for n, s in seconds.items():
        arithmetic, rates = arithmetic_seconds(model, n)
        peaks = ", ".join(f"{name.removeprefix('torch.')} {rate / 1e9:.0f}"
                          for name, rate in sorted(rates.items()))
        larger = max(floor, arithmetic)
        lines.append(f"  step over {n:>2} new tokens: {s * 1e3:6.2f} ms = {s / one:.2f}x a "
                     f"{sizes[0]}-token step; arithmetic floor {arithmetic * 1e3:.2f} ms "
                     f"(peak GMAC/s: {peaks}); {s / larger:.2f}x the larger floor "
                     f"({'bandwidth' if floor >= arithmetic else 'arithmetic'})"
                     + (f"; {n * macs / s / 1e9:.0f} GMAC/s = {n * macs / s / peak:.0%} of the "
                        "instruction peak" if peak else ""))
    prompt = min(512, model.target.max_length)
    prefill = prefill_seconds(model, prompt)
    lines.append(f"prefill of a {prompt}-token prompt ({PREFILL_CHUNK}-row chunks): "
                 f"{prefill * 1e3:.0f} ms = {prompt / prefill:.0f} tok/s")
    return "\n".join(lines + peer_lines(model, one, prompt / prefill))
