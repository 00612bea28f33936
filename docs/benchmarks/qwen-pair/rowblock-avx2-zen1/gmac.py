"""GMAC/s of one kernel tree at several row counts, beside the path's instruction peak."""
import sys, os, time, statistics, torch, glob
from pathlib import Path
from specdecode.kernels import build as B
from specdecode.kernels.native import CKernels
from specdecode.models.gguf import read_tensors
from transformers import AutoConfig
torch.set_num_threads(2)
trees = [Path(p) for p in os.environ.get("TREES", str(B.SOURCES)).split(":")]
libs = []
for src in trees:
    B.SOURCES = src
    libs.append(CKernels(B.load(B.build(os.environ.get("PATH_ISA", "avx2"), B.compiler()))))
f = "/root/.cache/specdecode/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
cfg = AutoConfig.from_pretrained(glob.glob("/root/.cache/specdecode/gguf/qwen2.5-coder-1.5b*")[0])
t = read_tensors(Path(f), cfg)
mats = {"Q4_K q": t["model.layers.0.self_attn.q_proj.weight"], "Q4_K up": t["model.layers.0.mlp.up_proj.weight"],
        "Q6_K down": t["model.layers.0.mlp.down_proj.weight"]}
rows = [int(r) for r in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 2, 4, 8, 16, 64]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
peak = statistics.median(libs[0].instruction_peak() for _ in range(3)) / 1e9
print(f"peak {peak:.1f} GMAC/s")
for k, w in mats.items():
    packed = [l.pack(w) for l in libs]
    for T in rows:
        x = torch.randn(T, w.in_features)
        ys = [l.linear(x, p, w.out_features) for l, p in zip(libs, packed)]
        if not os.environ.get("DIFFERENT"):
            for y in ys[1:]: assert torch.equal(ys[0], y), (k, T)
        times = [[] for _ in libs]
        n = max(2, int(64 / T))
        for r in range(rounds):
            order = list(range(len(libs))) if r % 2 == 0 else list(reversed(range(len(libs))))
            for i in order:
                l, p = libs[i], packed[i]
                l.linear(x, p, w.out_features)
                s = time.perf_counter()
                for _ in range(n): l.linear(x, p, w.out_features)
                times[i].append((time.perf_counter() - s) / n)
        macs = T * w.in_features * w.out_features / 1e9
        meds = [statistics.median(tt) for tt in times]
        cells = "  ".join(f"{m*1e3:7.3f} ms {macs/m:5.1f} GMAC/s {macs/m/peak*100:3.0f}%" for m in meds)
        rel = "  x%.3f" % (meds[-1] / meds[0]) if len(meds) > 1 else ""
        print(f"{k:10s} rows {T:3d}: {cells}{rel}", flush=True)
