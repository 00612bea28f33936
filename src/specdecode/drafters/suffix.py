"""`suffix`: a training-free token tree from what has already been seen.

Candidates for the token after any path in the tree come from three sources:
- the context (prompt and output so far): the tokens that followed the path's longest suffix
  seen before, most frequent first (SuffixDecoding, Oliaro et al. 2024; prompt lookup is its
  one-branch case);
- earlier outputs of this process on the same model (`Memory`: bounded, off with memory-tokens 0);
- the target's own top tokens after the path's last token, recorded whenever that token was
  verified (Token Recycling, Luo et al. 2024): free, the logits exist anyway.
Each candidate belongs to a *class* (source, n-gram length, rank among its siblings) whose
acceptance rate this sequence measures as it goes, starting from a weak prior. The tree grows
best-first up to the step's caps: a node's chance of lying on the accepted path is its parent's
chance times its class's rate, and the step scores the nodes whose chances pay for their rows
(`core.budget`), i.e. that raise the expected tokens per second of the step; with none, the step
decodes plainly. Everything is a deterministic function of what was seen, so verification treats
the tree as a draft without q: lossless, greedy and sampling.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from dataclasses import dataclass, field

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..core.tree import ROOT
from ..errors import InvalidParameterError
from .ngrams import AcceptanceRecord, Key, NgramIndex
from .registry import option, register

Class = tuple[str, int, int]  # (source, n-gram length or 0, rank among the source's candidates)

# First-token acceptance of a lookup match by its length, measured over Spec-Bench outputs of the
# default model (docs/benchmarks/methods); a rank below the first is
# divided by (1 + 2 rank). Priors only: each sequence's own verdicts outweigh them within steps.
CONTEXT_PRIOR = (0.27, 0.42, 0.56, 0.70, 0.82)
MEMORY_DISCOUNT = 0.7  # an earlier request's continuation is less likely than this one's own
RECYCLED_PRIOR = 0.25
MAX_RANK = 3  # ranks from here on share one class


class Memory:
    """Earlier outputs of one model in this process: their n-gram continuations and the target's
    recycled top tokens, for drafting later requests. Bounded: past `capacity` tokens the oldest
    output is forgotten. Thread-safe (a server's requests share it)."""

    def __init__(self, n_max: int, capacity: int) -> None:
        self.table = NgramIndex(n_max)
        self.recycled: dict[int, list[int]] = {}
        self.capacity = capacity
        self.outputs: deque[list[int]] = deque()
        self.size = 0
        self.lock = threading.Lock()

    def add(self, output: list[int], recycled: dict[int, list[int]]) -> None:
        with self.lock:
            self.table.count(output)
            self.outputs.append(output)
            self.size += len(output)
            while self.size > self.capacity and self.outputs:
                old = self.outputs.popleft()
                self.table.count(old, sign=-1)
                self.size -= len(old)
            self.recycled.update(recycled)

    def continuations(self, suffix: Key) -> tuple[int, list[int]]:
        with self.lock:
            return self.table.continuations(suffix)

    def recycled_after(self, token: int) -> list[int]:
        with self.lock:
            return self.recycled.get(token, [])


# never shared between models: by (model key, n_max, capacity)
_MEMORIES: dict[tuple[str, int, int], Memory] = {}
_MEMORIES_LOCK = threading.Lock()


def shared_memory(model_key: str, n_max: int, capacity: int) -> Memory:
    with _MEMORIES_LOCK:
        return _MEMORIES.setdefault((model_key, n_max, capacity), Memory(n_max, capacity))


@dataclass
class Proposal:
    """The tree awaiting its verdict: where it hangs and each node's token, parent and class."""

    length: int  # the context's length when proposed: the accepted tokens follow it
    tokens: list[int]
    parents: list[int]
    classes: list[Class]


@dataclass
class SuffixState:
    """One sequence's index and record."""

    table: NgramIndex  # of the context
    recycled: dict[int, list[int]] = field(default_factory=dict)  # token -> target's top tokens
    verdicts: AcceptanceRecord = field(default_factory=AcceptanceRecord)  # siblings, by class
    pending: Proposal | None = None


@register("suffix")
class SuffixTree(Drafter):
    proposes_trees = True
    uses_logits = True

    @dataclass(frozen=True)
    class Options:
        ngram_max: int = option(5, "longest n-gram matched; longer matches count as this long")
        branches: int = option(3, "most candidates tried after any one path")
        memory_tokens: int = option(
            65536, "tokens of earlier outputs kept across requests in this process (0: none; "
            "bench keeps none unless --cross-request-memory)")

        def __post_init__(self) -> None:
            if self.ngram_max < 1 or self.branches < 1:
                raise InvalidParameterError(
                    f"need ngram-max and branches >= 1, got {self.ngram_max}, {self.branches}")
            if self.memory_tokens < 0:
                raise InvalidParameterError(f"need memory-tokens >= 0, got {self.memory_tokens}")

    def __init__(self, options: Options = Options(), memory: Memory | None = None) -> None:
        self.options = options
        self.memory = memory

    @classmethod
    def create(cls, model, options: Options) -> "SuffixTree":
        memory = (shared_memory(model.key, options.ngram_max, options.memory_tokens)
                  if options.memory_tokens else None)
        return cls(options, memory)

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        return [{"max_draft_nodes": n, "branches": b} for b in (1, 3) for n in (8, 16)]

    @property
    def default_budget(self) -> DraftBudget:
        return DraftBudget(16, 8)  # the most a tree has; the step's cost keeps what pays

    def describe(self) -> str:
        o = self.options
        memory = f"memory {o.memory_tokens} tokens" if self.memory else "no memory"
        return f"suffix tree (n-gram {o.ngram_max}, {o.branches} branches, {memory})"

    def start(self, seq) -> None:
        seq.drafter_state = SuffixState(NgramIndex(self.options.ngram_max, seq.config.reference))

    def observe_logits(self, seq, tokens: list[int], logits: torch.Tensor) -> None:
        """tokens [a + 1]: the pending token and the accepted path; logits [a + 1, V]: the
        target's rows for them, each predicting the token after its own."""
        top = logits.topk(self.options.branches, dim=-1).indices.tolist()
        seq.drafter_state.recycled.update(zip(tokens, top))

    def finish(self, seq) -> None:
        if self.memory is not None:
            self.memory.add(seq.generated, seq.drafter_state.recycled)

    def propose(self, seq, budget: DraftBudget) -> Draft:
        if seq.drafter_state is None:
            self.start(seq)
        state: SuffixState = seq.drafter_state
        self._settle(state, seq.tokens, seq.length)
        n_max = self.options.ngram_max
        tail = tuple(seq.tokens[max(0, seq.length - n_max) : seq.length].tolist())
        tokens: list[int] = []
        parents: list[int] = []
        classes: list[Class] = []
        chances: list[float] = []
        depths: list[int] = []
        frontier: list[tuple[float, int, int, int, Class, Key]] = []  # max-heap by chance
        order = itertools.count()  # breaks ties between equal chances in the order found
        self._push(frontier, order, state, tail, 1.0, ROOT)
        while frontier and len(tokens) < budget.nodes:  # best first: chances never increase
            neg_chance, _, parent, token, cls, suffix = heapq.heappop(frontier)
            if -neg_chance < budget.min_chance:
                break  # this and every later node is below what the step would score
            node = len(tokens)
            tokens.append(token)
            parents.append(parent)
            classes.append(cls)
            chances.append(-neg_chance)
            depths.append(1 if parent == ROOT else depths[parent] + 1)
            if depths[node] < budget.depth:
                self._push(frontier, order, state, (suffix + (token,))[-n_max:], -neg_chance,
                           node)
        if not tokens:
            state.pending = None
            return EMPTY_DRAFT
        state.pending = Proposal(seq.length, tokens, parents, classes)
        return Draft(torch.tensor(tokens, dtype=torch.long), None,
                     parents=torch.tensor(parents, dtype=torch.long),
                     chances=torch.tensor(chances))

    def observe(self, seq, scored: int, accepted: int) -> None:
        """Only the scored nodes (the first `scored`) were tried: the rest were not rejected."""
        p = seq.drafter_state.pending
        if p is not None:
            seq.drafter_state.pending = (Proposal(p.length, p.tokens[:scored], p.parents[:scored],
                                                  p.classes[:scored]) if scored else None)

    def _push(self, frontier: list, order: itertools.count, state: SuffixState, suffix: Key,
              chance: float, parent: int) -> None:
        """Push the candidates after `suffix` (the path ending at node `parent`) onto the
        frontier, each with its chance of being on the accepted path."""
        for token, cls in self._candidates(state, suffix):
            child = chance * self._rate(state, cls)
            heapq.heappush(frontier, (-child, next(order), parent, token, cls, suffix))

    def _candidates(self, state: SuffixState, suffix: Key) -> list[tuple[int, Class]]:
        """Up to `branches` distinct tokens after `suffix`: the context's continuations, then
        memory's, then the target's recycled top tokens."""
        found: dict[int, Class] = {}
        sources = [("context", state.table.continuations(suffix))]
        if self.memory is not None:
            sources.append(("memory", self.memory.continuations(suffix)))
        recycled = state.recycled.get(suffix[-1]) if suffix else None
        if recycled is None and self.memory is not None and suffix:
            recycled = self.memory.recycled_after(suffix[-1])
        sources.append(("recycled", (0, recycled or [])))
        for source, (n, candidates) in sources:
            for rank, token in enumerate(candidates):
                if len(found) == self.options.branches:
                    return list(found.items())
                found.setdefault(token, (source, n, min(rank, MAX_RANK)))
        return list(found.items())

    def _rate(self, state: SuffixState, cls: Class) -> float:
        """This sequence's acceptance rate of a class, from its prior (`ngrams.AcceptanceRecord`)."""
        source, n, rank = cls
        if source == "recycled":
            prior = RECYCLED_PRIOR
        else:
            prior = CONTEXT_PRIOR[min(n, len(CONTEXT_PRIOR)) - 1]
            prior *= MEMORY_DISCOUNT if source == "memory" else 1.0
        return state.verdicts.rate(cls, prior / (1 + 2 * rank))

    def _settle(self, state: SuffixState, context: torch.Tensor, length: int) -> None:
        """Count the context tokens not yet counted, and record the last tree's verdict: walk it
        along the tokens that followed it (the accepted path, then a token that matches no child
        of where the path ended, or the path ended at a leaf)."""
        state.table.extend(context[:length])
        proposal, state.pending = state.pending, None
        if proposal is None:
            return
        children: dict[int, list[int]] = {}
        for node, parent in enumerate(proposal.parents):
            children.setdefault(parent, []).append(node)
        row = ROOT
        for token in context[proposal.length : length].tolist():
            match = None
            for node in children.get(row, []):
                state.verdicts.add(proposal.classes[node], proposal.tokens[node] == token)
                if proposal.tokens[node] == token:
                    match = node
            if match is None:
                return
            row = match

