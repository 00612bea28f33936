"""A/B in one process: two kernel paths of the same vector width (argument 1 the model is loaded
on, argument 2 swapped in), on target forwards of B sequences x rows at 384 cached tokens (logits
included), prompt prefills, and whole generations (6 Spec-Bench first turns, greedy, 128 tokens);
interleaved, medians; outputs compared."""
import os, statistics, sys, time, json
from pathlib import Path

os.environ["SPECDECODE_ISA"] = sys.argv[1]
import torch

from specdecode import SpecDecoder, kernels
from specdecode.models import load_model

m = load_model("smollm2-135m", dtype="auto")
t, k = m.target, m.target.kernels
libs = {sys.argv[1]: k._library, sys.argv[2]: kernels.load(sys.argv[2])._library}
assert kernels.load(sys.argv[2]).lanes == k.lanes
toks = torch.randint(100, 20000, (2048,))
ctx = 384
caches = []
for _ in range(8):
    c = t.new_cache()
    t.prefill(c, toks[:ctx])
    caches.append(c)
for B, rows in ((1, 1), (1, 4), (1, 11), (8, 1), (1, 64)):
    times = {n: [] for n in libs}
    for _ in range(11):
        for n, lib in libs.items():
            k._library = lib
            for c in caches:
                c.length = ctx
            a = time.perf_counter()
            t.logits(torch.cat(t.hidden_batch([(c, toks[ctx:ctx + rows], None) for c in caches[:B]])))
            times[n].append(time.perf_counter() - a)
    a, b = (statistics.median(v) * 1e3 for v in times.values())
    print(f"forward {B} x {rows:2d} rows: {sys.argv[1]} {a:6.2f} ms  {sys.argv[2]} {b:6.2f} ms  x{a / b:.2f}", flush=True)
for N in (128, 512):
    times = {n: [] for n in libs}
    for _ in range(5):
        for n, lib in libs.items():
            k._library = lib
            c = t.new_cache()
            a = time.perf_counter()
            t.prefill(c, toks[:N])
            times[n].append(time.perf_counter() - a)
    a, b = (statistics.median(v) * 1e3 for v in times.values())
    print(f"prefill {N:4d} tokens: {sys.argv[1]} {a:6.1f} ms  {sys.argv[2]} {b:6.1f} ms  x{a / b:.2f}", flush=True)
questions = [json.loads(line) for line in
             Path("src/specdecode/data/specbench_question.jsonl").read_text().splitlines()]
by_group = {}
for q in questions:
    by_group.setdefault(q["category"], []).append(q["turns"][0])
prompts = [ps[0] for ps in by_group.values()]
for method in ("ar", "lookup"):
    decoders = {}
    for n, lib in libs.items():
        k._library = lib
        decoders[n] = SpecDecoder(m, method)  # step costs measured on its own path
    total = {n: [0, 0.0] for n in libs}
    for prompt in prompts:
        for n, lib in libs.items():
            k._library = lib
            r = decoders[n].generate(prompt, max_new_tokens=128)
            total[n][0] += r.stats.new_tokens
            total[n][1] += r.stats.wall_seconds
    a, b = (v[0] / v[1] for v in total.values())
    print(f"generate {method:6s}: {sys.argv[1]} {a:6.1f} tok/s  {sys.argv[2]} {b:6.1f} tok/s  x{b / a:.2f}", flush=True)
