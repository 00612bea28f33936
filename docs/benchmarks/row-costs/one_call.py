"""A/B in one process: the decoder layers in one kernel call (`decoder_layers`, layers.c) against
the Python loop over their operations (the same model with its stack set aside), for whole
generations and for single target forwards. Outputs are compared too (they must be identical).

    python docs/benchmarks/row-costs/one_call.py [--prompts N]
"""
import argparse, json, statistics, time
from contextlib import contextmanager
from pathlib import Path

import torch

from specdecode import SpecDecoder
from specdecode.models import load_model

parser = argparse.ArgumentParser()
parser.add_argument("--prompts", type=int, default=6)
args = parser.parse_args()
model = load_model("smollm2-135m", dtype="auto")
target = model.target
stack = target._stack


@contextmanager
def one_call(on: bool):
    target._stack = stack if on else None
    try:
        yield
    finally:
        target._stack = stack


print(target.describe())
# target forwards: B sequences x rows after ctx cached tokens, hidden states only
toks = torch.randint(100, 20000, (2048,))
for ctx in (128, 384):
    caches = []
    for _ in range(8):
        c = target.new_cache()
        for s in range(0, ctx, 64):
            target.hidden_batch([(c, toks[s:s + 64], None)])
        caches.append(c)
    for B, rows in ((1, 1), (1, 2), (1, 4), (1, 11), (8, 1), (1, 64)):
        times = {True: [], False: []}
        for _ in range(15):
            for on in (True, False):
                for c in caches[:B]:
                    c.length = ctx
                with one_call(on):
                    a = time.perf_counter()
                    target.hidden_batch([(c, toks[ctx:ctx + rows], None) for c in caches[:B]])
                    times[on].append(time.perf_counter() - a)
        new, old = (statistics.median(times[on]) * 1e3 for on in (True, False))
        print(f"forward, ctx {ctx:3d}, {B} x {rows:2d} rows: loop {old:6.2f} ms, one call "
              f"{new:6.2f} ms, x{old / new:.2f}", flush=True)

# whole generations, greedy, 128 new tokens, Spec-Bench first turns (one per group, in turn)
questions = [json.loads(line) for line in
             Path("src/specdecode/data/specbench_question.jsonl").read_text().splitlines()]
by_group = {}
for q in questions:
    by_group.setdefault(q["category"], []).append(q["turns"][0])
prompts = [p for i in range(3) for p in (ps[i] for ps in by_group.values())][: args.prompts]
decoders = {}
for method in ("ar", "lookup"):
    for on in (True, False):
        with one_call(on):  # each measures its step costs in its own mode
            decoders[method, on] = SpecDecoder(model, method)
for method in ("ar", "lookup"):
    speed = {True: [], False: []}
    for prompt in prompts:
        outputs = {}
        for on in (True, False):
            with one_call(on):
                result = decoders[method, on].generate(prompt, max_new_tokens=128)
            outputs[on] = result.token_ids
            speed[on].append(result.stats.new_tokens / result.stats.wall_seconds)
        assert outputs[True] == outputs[False], "outputs differ"
    new, old = (statistics.median(speed[on]) for on in (True, False))
    print(f"generate {method:6s} ({len(prompts)} prompts, median tok/s): loop {old:6.1f}, one "
          f"call {new:6.1f}, x{new / old:.2f}; identical outputs", flush=True)
