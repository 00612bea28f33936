"""What the penalty stage costs a step on Qwen2.5's 151,936-token vocabulary: `PenaltyState.apply`
on a chain of 0, 8 and 32 draft nodes (1, 9, 33 rows) after a 500-token prompt and 200 generated
tokens, presence, frequency, repetition and one bias set; mean of 50 calls after 3, 2 threads.

    .venv/bin/python docs/benchmarks/penalties/cost.py > docs/benchmarks/penalties/cost.txt
"""

import time

import torch

from specdecode.core.penalties import Penalties, PenaltyState
from specdecode.core.tree import TokenTree
from specdecode.timing import cpu_name

V = 151_936
torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
state = PenaltyState(Penalties(0.5, 0.5, 1.1, ((5, 1.0),)),
                     torch.randint(0, V, (500,), generator=g).tolist(), V)
state.accept(torch.randint(0, V, (200,), generator=g).tolist())
print(f"{cpu_name()}, torch {torch.__version__}, 2 threads")
for nodes in (0, 8, 32):
    tree = TokenTree.chain(torch.randint(0, V, (nodes,), generator=g))
    logits = torch.randn(nodes + 1, V, generator=g)
    for _ in range(3):
        state.apply(logits, tree)
    t0 = time.perf_counter()
    for _ in range(50):
        state.apply(logits, tree)
    print(f"{nodes + 1} rows: {(time.perf_counter() - t0) / 50 * 1e3:.2f} ms")
