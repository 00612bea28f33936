"""Usage: .venv/bin/python docs/benchmarks/tree-limits/tau_free.py 3   (prompts per group)

τ of drafters when rows are free (no cost trimming), on turn-1 prompts of the first N questions per group."""
import sys, time
from specdecode.models import load_model
from specdecode.app.bench.specbench import load_questions, select, turns_of, group_of
from specdecode.core.engine import generate
from specdecode.core.sequence import DraftLimit, GenerationConfig
from specdecode.core.cost import step_cost
from specdecode.drafters.suffix import SuffixTree
from specdecode.drafters.lookup import PromptLookup
from specdecode.drafters.plain import NoDrafter

model = load_model("smollm2-135m")
qs = select(load_questions(None), int(sys.argv[1]))
cost = step_cost(model)
configs = {
  "lookup 10 free": (PromptLookup(), DraftLimit(10, 10), None),
  "suffix 16/8 free": (SuffixTree(SuffixTree.Options(memory_tokens=0)), DraftLimit(16, 8), None),
  "suffix 64/8 b3 free": (SuffixTree(SuffixTree.Options(memory_tokens=0)), DraftLimit(64, 8), None),
  "suffix 64/8 b6 free": (SuffixTree(SuffixTree.Options(memory_tokens=0, branches=6)), DraftLimit(64, 8), None),
  "suffix 16/8 cost": (SuffixTree(SuffixTree.Options(memory_tokens=0)), DraftLimit(16, 8), cost),
}
tot = {k: [0, 0, 0, 0.0] for k in configs}
for q in qs:
    ids = model.encode_prompt(turns_of(q)[0])
    for name, (d, lim, c) in configs.items():
        r = generate(model.target, d, ids, GenerationConfig(128), lim and DraftLimit(lim.nodes, lim.depth), model.eos_token_ids, cost=c)
        s = r.stats
        t = tot[name]; t[0] += s.confirmed_tokens; t[1] += s.target_forwards; t[2] += s.drafted; t[3] += s.wall_seconds
for name, (c, f, dr, w) in tot.items():
    print(f"{name:24s} τ {c/f:.2f}  drafted/step {dr/f:.1f}  wall {w:.1f}s")
