"""Acceptance of `draft` on the 1.5B under sampling: unseeded (recursive rejection) vs seeded
(keyed draws, the draft model inverting q at the same uniform)."""
import statistics, sys, time
from specdecode import SpecDecoder
from specdecode.models import load_model
model = load_model("qwen2.5-coder-1.5b")
sd = SpecDecoder(model, "draft")
prompts = ["Write a Python function that checks whether a string is a palindrome, with a docstring.",
           "Explain in three sentences what a hash map is.",
           "Write a bash one-liner that counts the lines of every .py file under src/ and sorts them."]
sd.generate(prompts[0], max_new_tokens=8, chat=True)
for temp in (0.7,):
    for seeded in (False, True):
        acc = dr = steps = toks = 0; secs = 0.0
        for rep in range(2):
            for i, p in enumerate(prompts):
                r = sd.generate(p, max_new_tokens=128, chat=True, temperature=temp,
                                seed=(100 + rep * 10 + i) if seeded else None)
                s = r.stats
                acc += s.accepted; dr += s.drafted; steps += s.target_forwards; toks += s.new_tokens
                secs += s.wall_seconds
        print(f"T={temp} seeded={seeded}: acceptance {acc/dr:.3f} tau {toks/steps:.2f} tok/s {toks/secs:.1f}", flush=True)
