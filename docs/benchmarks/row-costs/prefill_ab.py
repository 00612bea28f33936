"""A/B in one process: prompt prefills (one call of N rows) with the kernel library built from an
older copy of csrc/ (/tmp/ab/csrc_base) against the working tree's."""
import sys, time, statistics, subprocess, torch
from pathlib import Path
from specdecode.models import load_model
from specdecode.kernels import build
m = load_model("smollm2-135m", dtype="auto"); t = m.target; k = t.kernels
cc = build.compiler(); flags = [*build.LIBRARY_FLAGS, *build.FLAGS[k.name], "-fopenmp"]
subprocess.run([cc, *flags, *map(str, sorted(Path("/tmp/ab/csrc_base").glob("*.c"))), "-o", "/tmp/ab/base2.so", "-lm"], check=True)
libs = {"base": build.load(Path("/tmp/ab/base2.so")), "new": k._library}
toks = torch.randint(100, 20000, (2048,))
for N in (128, 512, 1024):
    res = {n: [] for n in libs}
    for _ in range(5):
        for n, lib in libs.items():
            k._library = lib; c = t.new_cache()
            a = time.perf_counter(); t.prefill(c, toks[:N]); res[n].append(time.perf_counter() - a)
    b, nw = (statistics.median(v) * 1e3 for v in res.values())
    print(f"prefill of a {N}-token prompt: base {b:7.1f} ms  new {nw:7.1f} ms  x{b/nw:.2f}", flush=True)
