import sys, time, torch
from specdecode import SpecDecoder
dec = SpecDecoder.load('qwen2.5-coder-1.5b', 'ar')
t = dec.model.target
tokens = torch.randint(100, 20000, (512,), generator=torch.Generator().manual_seed(0))
chunk = int(sys.argv[1]) if len(sys.argv) > 1 else 64
for run in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4):
    cache = t.new_cache()
    s = time.perf_counter()
    for i in range(0, 512, chunk): t.hidden(cache, tokens[i:i + chunk])
    print(f"chunk {chunk}: {512 / (time.perf_counter() - s):.1f} tok/s", flush=True)
