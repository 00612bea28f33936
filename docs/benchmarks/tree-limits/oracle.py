"""Usage: .venv/bin/python docs/benchmarks/tree-limits/oracle.py docs/benchmarks/tree-limit3/records.jsonl

Upper bounds for copy-based drafting on recorded greedy outputs: at each step, the longest
prefix of the remaining output that occurs anywhere in the context so far (oracle copy), and the
longest continuation found by suffix matching (n-gram >= 1, any earlier occurrence: best of all)."""
import json, sys
from specdecode.models import load_model
from specdecode.app.bench.specbench import load_questions, select, turns_of, group_of

records = [json.loads(l) for l in open(sys.argv[1])]
ar = {(r["question_id"], r["turn"]): r["token_ids"] for r in records if r["method"] == "ar" and r["repeat"] == 0}
model = load_model("smollm2-135m")
qs = {q["question_id"]: q for q in load_questions(None)}
def tau_oracle(ctx, out, mode):
    steps = 0; t = 0
    while t < len(out):
        c = ctx + out[:t]
        s = " ".join(map(str, c)) + " "
        L = 0
        if mode == "any":
            while t + L < len(out) and (" " + " ".join(map(str, out[t:t+L+1])) + " ") in (" " + s):
                L += 1
        else:  # suffix match: the continuation of some earlier occurrence of the last n tokens, best over n and occurrences
            best = 0
            for n in range(1, 6):
                if n > len(c): break
                suf = c[-n:]
                for i in range(len(c) - n):
                    if c[i:i+n] == suf:
                        k = 0
                        while t + k < len(out) and i + n + k < len(c) and c[i+n+k] == out[t+k]:
                            k += 1
                        best = max(best, k)
            L = best
        t += L + 1; steps += 1
    return len(out) / steps
by = {}
for (qid, turn), out in ar.items():
    if turn != 1: continue
    q = qs[qid]
    ctx = model.encode_prompt(turns_of(q)[0])
    g = group_of(q)
    by.setdefault(g, []).append((tau_oracle(ctx, out, "any"), tau_oracle(ctx, out, "suffix"), len(out)))
for g, v in by.items():
    n = sum(x[2] for x in v)
    print(g, "oracle-any τ %.2f" % (n / sum(x[2]/x[0] for x in v)), "oracle-suffix τ %.2f" % (n / sum(x[2]/x[1] for x in v)))

# oracle tree: the next token is reachable when it is among the candidates after the path so far:
# context continuations of the path's suffixes (any n, any occurrence), and the target's top-3 after
# the path's last token, recycled from the latest earlier position holding that token
import torch
from specdecode.core.target import forward
target = model.target
def topk_all(ids):
    cache = target.new_cache()
    logits = forward(target, cache, torch.tensor(ids))
    return logits.topk(3, dim=-1).indices.tolist()
res = {}
for (qid, turn), out in ar.items():
    if turn != 1: continue
    q = qs[qid]
    ctx = model.encode_prompt(turns_of(q)[0])
    full = ctx + out
    top = topk_all(full)  # top[i]: target's top-3 after full[:i+1]
    steps = t = 0
    P = len(ctx)
    while t < len(out):
        known = P + t  # tokens before position known; verified positions: P-1 .. known-1
        recycled = {}
        for i in range(P - 1, known):
            recycled[full[i]] = top[i]
        path = []
        L = 0
        while t + L < len(out):
            c = full[:known] + out[t:t+L]
            nxt = out[t + L]
            cands = set(recycled.get(c[-1], []))
            for n in range(1, 6):
                suf = c[-n:]
                for i in range(len(c) - n):
                    if c[i:i+n] == suf:
                        cands.add(c[i+n])
            if nxt in cands: L += 1
            else: break
        t += L + 1; steps += 1
    res.setdefault(group_of(q), []).append((len(out), steps))
tot_n = tot_s = 0
for g, v in res.items():
    n, s = sum(a for a, _ in v), sum(b for _, b in v)
    tot_n += n; tot_s += s
    print(g, "oracle tree (context + recycled top-3) τ %.2f" % (n / s))
print("overall oracle tree τ %.2f" % (tot_n / tot_s))
