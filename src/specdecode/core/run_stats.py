"""Per-run statistics: what every user asks of a speculative run.

τ (tau) = confirmed tokens / target forwards, bonus tokens and a final EOS included (plain
decoding has τ = 1 exactly; `new_tokens` excludes the EOS, as the text does);
acceptance rate = accepted draft tokens / drafted tokens. The CLI table, `--json` and the benchmark
are all sinks that read this one dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunStats:
    new_tokens: int = 0  # tokens returned to the user (EOS excluded)
    confirmed_tokens: int = 0  # tokens the verifier confirmed and the run kept, a final EOS included
    target_forwards: int = 0  # decoding steps; the prompt's prefill is counted in prefill_seconds
    draft_forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)  # [i]: drafts that had a token at position i
    accepted_at: list[int] = field(default_factory=list)  # [i]: drafts whose token i was accepted
    accepted_histogram: list[int] = field(default_factory=list)  # [a]: steps that accepted a tokens
    # draft tokens a grammar forced, as proposed (the step's budget may score fewer): spans the
    # engine added and spans a drafter took whole instead of choosing
    forced: int = 0
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0  # target forward + verification
    constraint_seconds: float = 0.0  # a grammar's masks and matcher (within draft and verify)
    wall_seconds: float = 0.0  # prefill + decoding, no model loading
    first_token_seconds: float = 0.0  # from joining to the first step's tokens (prefill included)
    cached_prompt_tokens: int = 0  # prompt tokens copied from a kept prompt's cache, not prefilled
    # a continuation's tokens that an earlier run generated and this one read again
    # (`core.engine.admit`); the other counts are this run's own
    resumed_tokens: int = 0

    @classmethod
    def combined(cls, runs: list["RunStats"]) -> "RunStats":
        """Runs that went side by side (the choices of one request): counts and seconds summed,
        so τ is tokens per forward of one sequence; the wall time is the longest's, the first
        token the earliest's."""
        out = cls()
        for run in runs:
            for name in ("new_tokens", "confirmed_tokens", "target_forwards", "draft_forwards",
                         "drafted", "accepted", "forced", "prefill_seconds", "draft_seconds",
                         "verify_seconds", "constraint_seconds", "cached_prompt_tokens",
                         "resumed_tokens"):
                setattr(out, name, getattr(out, name) + getattr(run, name))
            out.wall_seconds = max(out.wall_seconds, run.wall_seconds)
        out.first_token_seconds = min((r.first_token_seconds for r in runs), default=0.0)
        return out

    def observe(
        self, drafted: int, accepted: int, new_tokens: int, confirmed: int, draft_forwards: int,
        draft_seconds: float, verify_seconds: float, depth: int | None = None,
    ) -> None:
        """Record one engine step (one target forward): `accepted` of `drafted` draft tokens kept,
        `confirmed` = accepted + 1 unless cut by EOS or the token limit, `new_tokens` of them
        returned to the user. Per-position counts go by depth: a tree of `drafted` nodes and
        `depth` levels (a chain: depth = drafted) had a token at positions 0..depth-1."""
        depth = drafted if depth is None else depth
        self.target_forwards += 1
        self.new_tokens += new_tokens
        self.confirmed_tokens += confirmed
        self.draft_forwards += draft_forwards
        self.drafted += drafted
        self.accepted += accepted
        _grow(self.drafted_at, depth)
        _grow(self.accepted_at, depth)
        _grow(self.accepted_histogram, accepted + 1)
        for i in range(depth):
            self.drafted_at[i] += 1
        for i in range(accepted):
            self.accepted_at[i] += 1
        self.accepted_histogram[accepted] += 1
        self.draft_seconds += draft_seconds
        self.verify_seconds += verify_seconds

    @property
    def tau(self) -> float:
        return self.confirmed_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d for a, d in zip(self.accepted_at, self.drafted_at) if d]

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def other_seconds(self) -> float:
        busy = self.prefill_seconds + self.draft_seconds + self.verify_seconds
        return max(0.0, self.wall_seconds - busy)

    @property
    def output_tokens(self) -> int:
        """The answer's tokens (EOS excluded), a continuation's earlier ones included."""
        return self.new_tokens + self.resumed_tokens

    def to_dict(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "resumed_tokens": self.resumed_tokens,
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "tau": round(self.tau, 4),
            "acceptance_rate": None if self.acceptance_rate is None else round(self.acceptance_rate, 4),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "wall_seconds": round(self.wall_seconds, 4),
            "first_token_seconds": round(self.first_token_seconds, 4),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_by_position": [round(r, 4) for r in self.acceptance_by_position],
            "accepted_histogram": self.accepted_histogram,
            "forced": self.forced,
            "seconds": {
                "prefill": round(self.prefill_seconds, 4),
                "drafting": round(self.draft_seconds, 4),
                "verifying": round(self.verify_seconds, 4),
                "other": round(self.other_seconds, 4),
                "constraint": round(self.constraint_seconds, 4),  # within drafting and verifying
            },
        }


def _grow(counts: list[int], size: int) -> None:
    counts.extend([0] * (size - len(counts)))
