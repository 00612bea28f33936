"""The attention kernel of two commits side by side: one decoder layer's attention for a chunk of
prompt rows behind a cache of N tokens, each commit's kernels built from `git archive`, timed
alternately in one process (median of 9), outputs compared bit for bit.

    .venv/bin/python docs/benchmarks/prefill/attention_ab.py OLD NEW [--path avx512amx]
        [--heads 12,2,128] [--starts 0,448,1984,8128] [--rows 64]

--heads: query heads, KV heads, head size (default Qwen2.5-Coder-1.5B's); the cache is fp16 as
the engine keeps it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from specdecode.kernels import build
from specdecode.kernels.native import CKernels
from specdecode.kernels.torch_path import CacheRows

CSRC = "src/specdecode/kernels/csrc"


def kernels_of(commit: str, path: str, into: Path) -> CKernels:
    """The `path` kernels built from `commit`'s sources."""
    archive = into / f"{commit}.tar"
    subprocess.run(["git", "archive", "-o", str(archive), commit, CSRC], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / commit, filter="data")
    sources = into / commit / CSRC
    library = into / f"{commit}.so"
    subprocess.run([build.compiler(), *build.LIBRARY_FLAGS, *build.FLAGS[path], "-fopenmp",
                    *map(str, sorted(sources.glob("*.c"))), "-o", str(library), "-lm"], check=True)
    return CKernels(build.load(library))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--path", default="avx512amx")
    parser.add_argument("--heads", default="12,2,128")
    parser.add_argument("--starts", default="0,448,1984,8128")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    H, G, d = (int(v) for v in args.heads.split(","))
    starts = [int(v) for v in args.starts.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        libs = {c: kernels_of(c, args.path, Path(tmp)) for c in (args.old, args.new)}
        cap = max(starts) + args.rows
        gen = torch.Generator().manual_seed(0)
        keys = torch.randn(1, G, cap, d, generator=gen).half()
        values = torch.randn(1, G, cap, d, generator=gen).half()
        cos, sin = torch.randn(cap, d, generator=gen), torch.randn(cap, d, generator=gen)
        print(f"{args.path}, {args.threads} threads; {H} heads, {G} KV heads of {d}, "
              f"{args.rows} rows; ms, median of 9")
        print(f"| cached tokens | {args.old} | {args.new} | speed-up | bitwise equal |")
        print("|---|---|---|---|---|")
        for start in starts:
            rows = CacheRows(keys, values, start, args.rows)
            positions = torch.arange(start, start + args.rows)
            qkv = torch.randn(args.rows, (H + 2 * G) * d, generator=gen)
            times: dict[str, list[float]] = {c: [] for c in libs}
            outs = {}
            for _ in range(9):
                for c, k in libs.items():
                    inputs, x = k.attention_inputs([rows]), qkv.clone()
                    begin = time.perf_counter()
                    outs[c] = k.attention(x, inputs, 0, cos, sin, positions, H, 0, d ** -0.5)
                    times[c].append(time.perf_counter() - begin)
            old, new = (statistics.median(times[c]) for c in (args.old, args.new))
            print(f"| {start} | {old * 1e3:.2f} | {new * 1e3:.2f} | {old / new:.2f}x | "
                  f"{torch.equal(outs[args.old], outs[args.new])} |")


if __name__ == "__main__":
    main()
