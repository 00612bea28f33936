"""A/B two kernel source trees in one process: same matrices, bitwise equal results, interleaved timing."""
import sys, time, statistics, torch, numpy as np
from pathlib import Path
from specdecode.kernels import build as B
from specdecode.kernels.native import CKernels
from specdecode.models.gguf import read_tensors
from transformers import AutoConfig
import glob
torch.set_num_threads(2)
path = sys.argv[1] if len(sys.argv) > 1 else "avx2"
libs = {}
for name, src in (("A", Path(__import__("os").environ.get("ADIR", str(B.SOURCES)))), ("B", Path(__import__("os").environ.get("BDIR", "/tmp/w/csrcB")))):
    B.SOURCES = src
    libs[name] = CKernels(B.load(B.build(path, B.compiler())))
f = "/root/.cache/specdecode/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
cfg = AutoConfig.from_pretrained(glob.glob("/root/.cache/specdecode/gguf/qwen2.5-coder-1.5b*")[0])
t = read_tensors(Path(f), cfg)
mats = {"Q4_K up": t["model.layers.0.mlp.up_proj.weight"], "Q6_K down": t["model.layers.0.mlp.down_proj.weight"],
        "Q4_K q": t["model.layers.0.self_attn.q_proj.weight"]}
for k, w in mats.items():
    print(k, w.qtype, w.shape)
rows = [int(r) for r in (sys.argv[2].split(",") if len(sys.argv) > 2 else "1,2,4,8,16,64".split(","))]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 11
for k, w in mats.items():
    packed = {n: l.pack(w) for n, l in libs.items()}
    for T in rows:
        x = torch.randn(T, w.in_features)
        ya = libs["A"].linear(x, packed["A"], w.out_features)
        yb = libs["B"].linear(x, packed["B"], w.out_features)
        assert torch.equal(ya, yb), (k, T, (ya - yb).abs().max())
        times = {"A": [], "B": []}
        for r in range(rounds):
            for n in ("A", "B") if r % 2 == 0 else ("B", "A"):
                l = libs[n]; p = packed[n]
                for _ in range(2): l.linear(x, p, w.out_features)
                s = time.perf_counter()
                for _ in range(5): l.linear(x, p, w.out_features)
                times[n].append((time.perf_counter() - s) / 5)
        a, b = statistics.median(times["A"]), statistics.median(times["B"])
        macs = T * w.in_features * w.out_features / 1e9
        print(f"{k:10s} rows {T:3d}: A {a*1e3:7.3f} ms ({macs/a:5.1f} GMAC/s)  B {b*1e3:7.3f} ms ({macs/b:5.1f})  B/A {b/a:.3f}", flush=True)
