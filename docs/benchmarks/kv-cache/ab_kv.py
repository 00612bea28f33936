"""A/B in one process: fp32 vs fp16 KV cache; B sequences x 1 row at context ctx; interleaved."""
import time, statistics, torch, sys
from specdecode import SpecDecoder
sd = SpecDecoder.load(method="ar", dtype="auto")
t = sd.model.target
toks = torch.randint(100, 20000, (2048,))
def caches(dtype, B, ctx):
    t.kv_dtype = dtype
    out = []
    for b in range(B):
        c = t.new_cache()
        for s in range(0, ctx, 64):
            t.hidden_batch([(c, toks[s:min(ctx, s+64)], None)])
        out.append(c)
    return out
for ctx in (128, 384, 768):
    sets = {d: caches(d, 16, ctx) for d in (torch.float32, torch.float16)}
    for B in (1, 4, 8, 16):
        res = {torch.float32: [], torch.float16: []}
        for _ in range(12):
            for d, cs in sets.items():
                for c in cs[:B]: c.length = ctx
                a = time.perf_counter()
                t.hidden_batch([(c, toks[ctx:ctx+1], None) for c in cs[:B]])
                res[d].append(time.perf_counter() - a)
        f32, f16 = (statistics.median(res[d]) * 1000 for d in (torch.float32, torch.float16))
        print(f"ctx {ctx:4d} B={B:2d}: fp32 {f32:6.2f} ms  fp16 {f16:6.2f} ms  ratio {f32/f16:.2f}", flush=True)
    # prefill chunk of 64 rows at ctx
    res = {torch.float32: [], torch.float16: []}
    for _ in range(6):
        for d, cs in sets.items():
            cs[0].length = ctx
            a = time.perf_counter(); t.hidden_batch([(cs[0], toks[ctx:ctx+64], None)]); res[d].append(time.perf_counter()-a)
    f32, f16 = (statistics.median(res[d]) * 1000 for d in (torch.float32, torch.float16))
    print(f"ctx {ctx:4d} 64-row chunk: fp32 {f32:6.2f} ms  fp16 {f16:6.2f} ms  ratio {f32/f16:.2f}", flush=True)
