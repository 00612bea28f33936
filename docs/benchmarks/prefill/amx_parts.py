"""Where an AMX matrix call of a prefill chunk spends its time: the products in the tiles, or the
fp32 scaling of each block's integer sums that keeps the result bitwise the vector tile's.

Builds the `avx512amx` kernels six times from a copy of the sources: as they are, without the
scaling of the tiles' sums, without the products, without either, without the weights' unpacking,
and without all three (what is left: rounding x, storing y, the loops). Each library is timed on
one decoder layer's matrices of Qwen2.5-Coder-1.5B (Q4_K_M: q/k/v, o and gate/up in Q4_K, down in
Q6_K), random weights, at 64 rows (the prefill's chunk), the six interleaved round by round;
median of the rounds.

    .venv/bin/python docs/benchmarks/prefill/amx_parts.py [--rounds 15] [--threads 2]

A variant's outputs are not the product (its sums are skipped or never formed): it only times.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from specdecode.kernels import build, runnable
from specdecode.kernels.native import CKernels
from specdecode.quant import QuantTensor, random_blocks

SHAPES = {"Q4_K": [(1536, 2048), (1536, 1536), (1536, 17920)], "Q6_K": [(8960, 1536)]}
SCALING = "for (int first = 0; first < products; first += H) {"
PRODUCTS = "PRODUCT(0, 4, 6) PRODUCT(1, 5, 7) PRODUCT(2, 4, 6) PRODUCT(3, 5, 7)"
UNPACKING = "for (int64_t n = 0; n < panels; n++)\n            for (int64_t b = 0;"
VARIANTS = {"whole call": [], "without the scaling": [(SCALING, SCALING.replace("< products",
                                                                                   "< 0"))],
            "without the products": [(PRODUCTS, "")]}
VARIANTS["without either"] = VARIANTS["without the scaling"] + VARIANTS["without the products"]
VARIANTS["without the unpacking"] = [(UNPACKING, "if (0) " + UNPACKING)]
VARIANTS["without all three"] = VARIANTS["without either"] + VARIANTS["without the unpacking"]


def library(edits: list[tuple[str, str]], into: Path) -> Path:
    """The avx512amx library built from the sources with `edits` made to amx.c."""
    into.mkdir()
    for source in build.SOURCES.rglob("*"):
        target = into / source.relative_to(build.SOURCES)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_file():
            shutil.copy(source, target)
    amx = into / "amx.c"
    text = amx.read_text()
    for old, new in edits:
        if old not in text:
            raise SystemExit(f"amx.c no longer holds {old!r}: update this script")
        text = text.replace(old, new)
    amx.write_text(text)
    out = into / "kernels.so"
    subprocess.run([build.compiler(), *build.LIBRARY_FLAGS, *build.FLAGS["avx512amx"], "-fopenmp",
                    *map(str, sorted(into.glob("*.c"))), "-o", str(out), "-lm"], check=True)
    return out


def cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if "avx512amx" not in runnable():
        raise SystemExit("this machine does not run the avx512amx path")
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {name: CKernels(build.load(library(edits, Path(tmp) / str(i))))
                   for i, (name, edits) in enumerate(VARIANTS.items())}
        rng = np.random.default_rng(0)
        weights = {fmt: [(QuantTensor(fmt, random_blocks(fmt, O, I, rng), I), I, O)
                         for I, O in shapes] for fmt, shapes in SHAPES.items()}
        packed = {name: {fmt: [(k.pack(w), I, O) for w, I, O in ws] for fmt, ws in weights.items()}
                  for name, k in kernels.items()}
        print(f"{cpu()}, {args.threads} threads, avx512amx; "
              f"one layer of qwen2.5-coder-1.5b's matrices; median of {args.rounds} rounds, ms")
        print("| rows | format | G multiply-adds | " + " | ".join(VARIANTS) + " |")
        print("|---|---|---|" + "---|" * len(VARIANTS))
        for rows in (64,):
            for fmt, ws in weights.items():
                xs = [torch.randn(rows, I) for _, I, _ in ws]
                times: dict[str, list[float]] = {name: [] for name in kernels}
                for _ in range(args.rounds):
                    for name, k in kernels.items():
                        start = time.perf_counter()
                        for (p, _, O), x in zip(packed[name][fmt], xs):
                            k.linear(x, p, O)
                        times[name].append(time.perf_counter() - start)
                macs = sum(rows * I * O for _, I, O in ws)
                print(f"| {rows} | {fmt} | {macs / 1e9:.2f} | " + " | ".join(
                    f"{statistics.median(t) * 1e3:.2f}" for t in times.values()) + " |")


if __name__ == "__main__":
    main()
