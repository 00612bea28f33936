"""A/B in one process: sampling a token by torch.multinomial against the inverse cumulative
distribution (`core.sampling.sample`), for plain decoding at temperature 0.7: tok/s of whole
generations, interleaved, median over prompts."""
import statistics

import torch

import specdecode.core.verify as verify
from specdecode import SpecDecoder

new = verify.sample


def multinomial(probs, generator):
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).squeeze(-1).reshape(probs.shape[:-1])


sd = SpecDecoder.load(method="ar", dtype="auto")
prompts = ["Write a short story about a robot.", "Explain how a bicycle works.",
           "Translate to French: the weather is nice today.", "List five uses of a brick."]
speed = {"multinomial": [], "inverse cdf": []}
for prompt in prompts * 2:
    for name, sampler in (("multinomial", multinomial), ("inverse cdf", new)):
        verify.sample = sampler
        r = sd.generate(prompt, max_new_tokens=128, temperature=0.7, seed=1)
        speed[name].append(r.stats.new_tokens / r.stats.wall_seconds)
verify.sample = new
old, cur = (statistics.median(v) for v in speed.values())
print(f"plain decoding at T=0.7: multinomial {old:.1f} tok/s, inverse cdf {cur:.1f} tok/s, x{cur / old:.2f}")
