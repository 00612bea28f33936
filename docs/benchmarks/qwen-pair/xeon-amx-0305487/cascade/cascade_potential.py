# How many of the draft model's forwards could an n-gram guess have saved? For every drafting
# step that ran the draft model while a context match existed: the common prefix of the match's
# continuation and the tokens the draft model drafted.
import json, sys
from collections import Counter
from specdecode import SpecDecoder
from specdecode.drafters import draft_model as dm

stats = Counter()
original = dm.DraftModel.propose
def propose(self, seq, budget):
    draft = original(self, seq, budget)
    state = seq.drafter_state
    if draft.forwards:
        stats["steps with forwards"] += 1
        stats["forwards"] += draft.forwards
        stats["drafted"] += len(draft.tokens)
        if state.match:
            guess = state.match[1]
            got = draft.tokens.tolist()
            agree = next((i for i in range(min(len(guess), len(got))) if guess[i] != got[i]), min(len(guess), len(got)))
            stats["...with a match"] += 1
            stats["match tokens agreeing with the drafted prefix"] += agree
            stats["steps where the match's first token agrees"] += agree > 0
    elif len(draft.tokens):
        stats["steps drafted from the match alone"] += 1
    return draft
dm.DraftModel.propose = propose
dec = SpecDecoder.load("qwen2.5-coder-1.5b", "draft")
qs = [json.loads(l) for l in open(sys.argv[1])]
for q in qs:
    if sys.argv[2] not in q["category"]: continue
    ids = dec.prompt_ids(q["turns"][0])
    dec.generate(ids, max_new_tokens=128)
for k, v in stats.items(): print(f"{k}: {v}")
