"""A/B in one process: lookup with the step-cost curve measured at two contexts (new) against
the same measurement reduced to the old model (one curve after 64 tokens plus a per-cached-token
rate from 1- and 8-row steps), on Spec-Bench first turns; interleaved, median of 2; outputs compared."""
import json, statistics, sys, time
from specdecode import SpecDecoder
from specdecode.core.cost import StepCost, measure
from specdecode.models import load_model

m = load_model("smollm2-135m", dtype="auto")
new = measure(m.target)
d = new.long_context - new.context
long1, long8 = new.long_seconds[0], new.long_seconds[-1]
old = StepCost(new.rows, new.seconds, new.context,
               max((long8 - new.seconds[3]) - (long1 - new.seconds[0]), 0) / (7 * d))
print(m.target.kernels.name, "short", [round(s * 1e3, 2) for s in new.seconds], "long",
      [round(s * 1e3, 2) for s in new.long_seconds], f"per_cached new {new.per_cached*1e9:.0f} old {old.per_cached*1e9:.0f} ns")
for c in (256, 512, 1024):
    print(f"ctx {c}: 1-row new {new.step(1, c)*1e3:.2f} old {old.step(1, c)*1e3:.2f}; 2-row new {new.step(2, 2*c)*1e3:.2f} old {old.step(2, 2*c)*1e3:.2f} ms")
qs = [json.loads(l) for l in open("src/specdecode/data/specbench_question.jsonl")]
per = {"summarization": 6, "rag": 6, "translation": 3, "qa": 3, "math_reasoning": 3, "writing": 3}
prompts = []
for cat, n in per.items():
    prompts += [(cat, q["turns"][0]) for q in qs if q["category"] == cat][:n]
ar = SpecDecoder(m, "ar")
a, b = SpecDecoder(m, "lookup"), SpecDecoder(m, "lookup")
a.cost, b.cost = old, new
variants = {"ar": ar, "old": a, "new": b}
t = {(n, c): [0.0, 0.0] for n in variants for c in per}
toks = {}
for rep in range(2):
    for cat, p in prompts:
        for n, sd in variants.items():
            s = time.perf_counter()
            r = sd.generate(p, max_new_tokens=128)
            t[(n, cat)][rep] += time.perf_counter() - s
            toks.setdefault((n, p), r.token_ids)
            assert r.token_ids == toks[("ar", p)], n
for cat in per:
    ar_t = statistics.median(t[("ar", cat)])
    print(f"{cat:15s} old x{ar_t / statistics.median(t[('old', cat)]):.3f}  new x{ar_t / statistics.median(t[('new', cat)]):.3f}")
tot = {n: statistics.median([sum(t[(n, c)][r] for c in per) for r in range(2)]) for n in variants}
print(f"{'all':15s} old x{tot['ar'] / tot['old']:.3f}  new x{tot['ar'] / tot['new']:.3f}")
