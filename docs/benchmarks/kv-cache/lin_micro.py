import time, statistics, torch
from specdecode import SpecDecoder
sd = SpecDecoder.load(method="ar", dtype="auto")
t = sd.model.target
lin = t.layers[3].gate_up
print(lin.parts() if hasattr(lin,'parts') else lin)
I = 576
for T in (1, 2, 3, 4, 8, 16, 64):
    x = torch.randn(T, I)
    ts = []
    for _ in range(30):
        a = time.perf_counter(); lin(x); ts.append(time.perf_counter() - a)
    m = statistics.median(ts)
    print(f"T={T:3d}: {m*1e6:8.1f} us, {m*1e6/T:7.1f} us/row, {T*I*3072/m/1e9:6.1f} GMAC/s", flush=True)
