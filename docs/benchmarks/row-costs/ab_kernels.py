"""A/B in one process: the kernel library built from an older copy of csrc/ (argument 1, e.g.
`git archive OLD src/specdecode/kernels/csrc | tar -x -C /tmp/old`) against the working tree's,
swapped under the same model; one target forward of B sequences x rows at context ctx, and a
64-row prefill chunk; interleaved, median of 9 (5 for the chunk)."""
import sys, time, statistics, subprocess, torch
from pathlib import Path
from specdecode import SpecDecoder
from specdecode.kernels import build
sd = SpecDecoder.load(method="ar", dtype="auto")
t = sd.model.target
k = t.kernels
new_lib = k._library
cc = build.compiler()
flags = [*build.LIBRARY_FLAGS, *build.FLAGS[k.name], "-fopenmp"]
base_src = Path(sys.argv[1])
out = Path("/tmp/ab_kernels_base.so")
subprocess.run([cc, *flags, *map(str, sorted(base_src.glob("*.c"))), "-o", str(out), "-lm"], check=True)
base_lib = build.load(out)
libs = {"base": base_lib, "new": new_lib}
toks = torch.randint(100, 20000, (2048,))
def caches(B, ctx):
    cs = []
    for b in range(B):
        c = t.new_cache()
        for s in range(0, ctx, 64):
            t.hidden_batch([(c, toks[s:min(ctx, s + 64)], None)])
        cs.append(c)
    return cs
for ctx in (128, 384, 768):
    cs = caches(16, ctx)
    cases = [(f"B={B:2d} x 1 row", B, 1) for B in (1, 4, 8, 16)] + [("B= 1 x 11 rows", 1, 11), ("64-row chunk", 1, 64)]
    for label, B, rows in cases:
        res = {n: [] for n in libs}
        for _ in range(9 if rows < 64 else 5):
            for n, lib in libs.items():
                k._library = lib
                for c in cs[:B]: c.length = ctx
                a = time.perf_counter()
                t.hidden_batch([(c, toks[ctx:ctx + rows], None) for c in cs[:B]])
                res[n].append(time.perf_counter() - a)
        b, m = (statistics.median(res[n]) * 1e3 for n in libs)
        print(f"ctx {ctx:4d} {label}: base {b:6.2f} ms  new {m:6.2f} ms  x{b/m:.2f}", flush=True)
