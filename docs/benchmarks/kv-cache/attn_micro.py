import time, statistics, torch, sys
from specdecode.kernels import active, CacheRows
from specdecode.rope import tables
k = active()
H, G, D, L = 9, 3, 64, 30
cap = 1024
inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D)); cos, sin = tables(inv, 1.0, cap)
def bench(T, ctx, S, dtype, threads):
    torch.set_num_threads(threads)
    caches = [CacheRows(torch.randn(L, G, cap, D).to(dtype), torch.randn(L, G, cap, D).to(dtype), ctx, T) for _ in range(S)]
    qkv = torch.randn(S*T, (H+2*G)*D)
    pos = torch.cat([torch.arange(ctx, ctx+T)]*S)
    inp = k.attention_inputs(caches)
    ts=[]
    for rep in range(5):
        a=time.perf_counter()
        for layer in range(L):
            k.attention(qkv.clone(), inp, layer, cos, sin, pos, H)
        ts.append(time.perf_counter()-a)
    t = statistics.median(ts)
    kh = S*T*H*(ctx+ (T+1)/2)*L
    return t*1000, t/kh*1e9
for threads in (1, 2):
  for (T, ctx, S) in [(1, 0, 1), (1, 768, 1), (1, 768, 8), (8, 768, 1), (64, 768, 1)]:
    for dt in (torch.float32, torch.float16):
        ms, ns = bench(T, ctx, S, dt, threads)
        print(f"threads {threads} T={T:2d} ctx={ctx} S={S} {str(dt)[6:]}: {ms:6.2f} ms per 30 layers, {ns:5.2f} ns per key-head", flush=True)
