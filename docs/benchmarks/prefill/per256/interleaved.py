"""Interleaved timing of the 1.5B's matrix calls on `avx512vnni` under the three builds of
pilot.patch (applied to 5fbf587): base, EXP_INT (the K formats' sub-block scales applied to
integer sums by vpmulld, fp32 once per super-block) and EXP_INT + EXP_FP (x per 256: each block's
sums times its fp32 D, x's scale once per super-block). Timing only: the experiment's numbers are
not the format's. Run from the patched tree: PYTHONPATH=src python interleaved.py"""
import os, time, statistics, numpy as np, torch
from gguf import GGUFReader
from specdecode.quant import QuantTensor
from specdecode.kernels import build
from specdecode.kernels.native import CKernels
cc = build.compiler()
variants = {}
for name, flags in (("base", ""), ("int", "-DEXP_INT"), ("fp", "-DEXP_INT -DEXP_FP")):
    os.environ["SPECDECODE_CFLAGS"] = flags
    variants[name] = CKernels(build.load(build.build("avx512vnni", cc)))
r = GGUFReader('/root/.cache/specdecode/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf')
want = {"blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight"}
mats = {}
for t in r.tensors:
    if t.name in want:
        O = int(t.shape[1]); I = int(t.shape[0])
        mats[t.name] = (QuantTensor(t.tensor_type.name, np.asarray(t.data).reshape(O, -1), I), O, I)
packed = {v: {n: k.pack(q) for n, (q, O, I) in mats.items()} for v, k in variants.items()}
torch.manual_seed(0)
for T in (64, 512):
    times = {(v, n): [] for v in variants for n in mats}
    xs = {n: torch.randn(T, I) for n, (q, O, I) in mats.items()}
    for rep in range(9):
        for n, (q, O, I) in mats.items():
            for v, k in variants.items():
                a = time.perf_counter(); k.linear(xs[n], packed[v][n], O); times[v, n].append(time.perf_counter() - a)
    for n, (q, O, I) in sorted(mats.items()):
        base = statistics.median(times["base", n][1:])
        print(f"T={T} {n} {q.qtype} {O}x{I}: base {base*1e3:.2f} ms; " + ", ".join(
            f"{v} {base/statistics.median(times[v, n][1:]):.3f}x" for v in variants if v != "base"), flush=True)
