"""Validation τ: the trained head drafting for the real engine, greedy, on held-out prompts.

τ = Σ confirmed tokens / Σ target forwards over the prompts (`metrics.RunStats`), the number that
decides the speed-up; the held-out loss and accuracy only predict it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...core.engine import generate
from ...core.sequence import DraftLimit, GenerationConfig
from ...drafters import create_drafter, make_options


def measure_tau(model, method: str, head_dir: Path, prompts: Sequence[list[int]],
                max_new_tokens: int, progress: bool = True) -> dict:
    """Run the `method` drafter with the head in `head_dir` over `prompts` (token ids) at the
    drafter's default caps, every drafted node scored; -> {"tau", "tokens_per_second",
    "nodes", "depth", "prompts"}."""
    from tqdm import tqdm

    drafter = create_drafter(method, model, make_options(method, {"draft_model": str(head_dir)}))
    config = GenerationConfig(max_new_tokens, seed=0)
    budget = drafter.default_budget
    confirmed = forwards = tokens = 0
    seconds = 0.0
    for ids in tqdm(prompts, desc=f"validation τ ({method})", unit="prompt", disable=not progress):
        stats = generate(model.target, drafter, ids, config, DraftLimit(budget.nodes, budget.depth),
                         model.eos_token_ids).stats
        confirmed, forwards = confirmed + stats.confirmed_tokens, forwards + stats.target_forwards
        tokens, seconds = tokens + stats.new_tokens, seconds + stats.wall_seconds
    return {"tau": round(confirmed / max(forwards, 1), 4),
            "tokens_per_second": round(tokens / seconds, 1) if seconds else 0.0,
            "nodes": budget.nodes, "depth": budget.depth, "prompts": len(prompts)}
