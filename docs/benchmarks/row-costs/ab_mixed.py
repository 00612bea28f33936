"""A/B in one process: the kernel library built from an older copy of csrc/ (argument 1) against
the working tree's, on target forwards whose sequences bring different numbers of rows (a draft
beside other sequences' single rows, prompt chunks beside decoding rows), 384 cached tokens
each (argument 2, optional), logits included; interleaved, median of 15, outputs compared.
Argument 3 (optional): other cases, rows per sequence, e.g. "1;2;3;4,1,1,1"."""
import statistics, subprocess, sys, time
from pathlib import Path

import torch

from specdecode.kernels import build
from specdecode.models import load_model

m = load_model("smollm2-135m", dtype="auto")
t, k = m.target, m.target.kernels
flags = [*build.LIBRARY_FLAGS, *build.FLAGS[k.name], "-fopenmp"]
subprocess.run([build.compiler(), *flags, *map(str, sorted(Path(sys.argv[1]).glob("*.c"))), "-o",
                "/tmp/ab_mixed_base.so", "-lm"], check=True)
libs = {"base": build.load(Path("/tmp/ab_mixed_base.so")), "new": k._library}
toks = torch.randint(100, 20000, (2048,))
ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 384
caches = []
for _ in range(16):
    c = t.new_cache()
    for s in range(0, ctx, 64):
        t.hidden_batch([(c, toks[s:s + 64], None)])
    caches.append(c)
cases = [[1] * 4, [4, 1, 1, 1], [1] * 8, [4] + [1] * 7, [4, 4] + [1] * 6, [1] * 16, [4] + [1] * 15,
         [11], [64], [64] + [1] * 8]
if len(sys.argv) > 3:
    cases = [[int(r) for r in case.split(",")] for case in sys.argv[3].split(";")]
for case in cases:
    times, outs = {n: [] for n in libs}, {}
    for _ in range(15):
        for n, lib in libs.items():
            k._library = lib
            for c in caches:
                c.length = ctx
            steps = [(caches[i], toks[ctx:ctx + r], None) for i, r in enumerate(case)]
            a = time.perf_counter()
            out = t.logits(torch.cat(t.hidden_batch(steps)))
            times[n].append(time.perf_counter() - a)
            outs[n] = out
    assert torch.equal(outs["base"], outs["new"]), case
    b, n = (statistics.median(v) * 1e3 for v in times.values())
    label = "+".join(f"{r}" for r in case) if len(case) < 9 else f"{case[0]}+{case[1]}x{len(case) - 1}"
    print(f"rows per sequence {label:>14s}: base {b:6.2f} ms  new {n:6.2f} ms  x{b / n:.2f}", flush=True)
