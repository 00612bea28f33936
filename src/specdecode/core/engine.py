"""The decoding loop, shared by plain decoding (an empty draft) and every drafter, for one
sequence or a batch of them. Its lifecycle is written once, in `Batch`: a request joins, its prompt
is prefilled in chunks (riding along with other sequences' steps), its drafter prepares, it steps
until it finishes, and it leaves; one request alone is a batch of one (`stream`).

Cache invariant: between steps a sequence's KV cache holds context[:n-1]; the last context token
is *pending* (fed in the next forward). One step, for one sequence or a batch of them:
  1 propose  — each drafter proposes a token tree within its caps; the step's budget keeps the N
               nodes that pay for their rows (`budget.allocate`; N = 0 is plain decoding);
  2 score    — one target forward over [pending, nodes] (tree attention) gives N + 1 distributions;
  3 verify   — the verifier accepts a path of a nodes and adds one recovered-or-bonus token;
  4 commit   — compact the cache to the pending token + the accepted path (n + a entries), append
               the a + 1 new tokens to the context, tell the drafter, record the stats, stop if due.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Literal
from typing import Sequence as Tokens

import torch

from ..errors import InvalidParameterError, PromptTooLongError
from ..kernels import ROW_INVARIANT_ROWS
from .budget import DraftBudget, StepShape, allocate, min_chance, prompt_share, step_gain
from .constraint import allowed, renormalize
from .cost import MEASURED_ROWS, StepCost
from .detokenize import IncrementalText
from .drafter import EMPTY_DRAFT, Draft, Drafter
from .logprobs import TokenLogprob, sampled, token_logprobs
from .masking import constrain, masks
from .penalties import PenaltyState
from .prefix_cache import PrefixCache
from .run_stats import RunStats
from .sampling import probabilities
from .sequence import DraftLimit, GenerationConfig, SequenceState, new_generator
from .target import Target
from .verify import verify_greedy, verify_sampling, verify_seeded


@dataclass
class Chunk:
    token_ids: list[int]  # tokens confirmed by this step (EOS excluded)
    text: str = ""  # text delta that is safe to show
    finish_reason: str | None = None  # set on the last chunk: "stop" (EOS, stop string) or "length"
    stop_string: str | None = None  # set on the last chunk when a stop string ended it
    stats: RunStats | None = None  # set on the last chunk
    # token_ids' own (and a final EOS's), when the config asks
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None  # on the first chunk, when asked


# prompt rows per prefill call: the attention kernel computes a row alike in any call of up to
# this many rows (and every other kernel in any call), so a prompt's cache is the same however
# its prefill is split, alone or beside other sequences' steps
PREFILL_CHUNK = ROW_INVARIANT_ROWS


# adaptive: draft rows chosen for the whole batch (speculation shrinks as it fills); always: each
# sequence's as if it ran alone; off: no drafts
Speculation = Literal["adaptive", "always", "off"]
SPECULATION: tuple[str, ...] = ("adaptive", "always", "off")
# the most sequences a batch steps together: each brings at least one row, and the step-cost
# curve the draft budget reads is measured up to this many rows (`core.cost.MEASURED_ROWS`)
MAX_BATCH = MEASURED_ROWS[-1]


def admit(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
          limit: DraftLimit | None, decode: Callable[[list[int]], str] | None = None,
          generated: Tokens[Tokens[int]] = ()) -> SequenceState:
    """A new sequence for `prompt`, nothing prefilled yet (`SequenceState.to_prefill`).

    `generated` makes it a continuation: tokens an earlier run of the same request generated
    (and sent, in these chunks). They are read into the cache as the prompt is, and they are
    the output so far: they count against `max_new_tokens`, advance the grammar and the
    penalties, and start the text (stop strings included), so the tokens that follow are those
    the uninterrupted run gives (greedy: the same; sampled: drawn given them). They come back,
    once read, as the sequence's first chunks, as they were sent (`SequenceState.replay`), with
    their logprobs when asked (from the rows that read them, as the steps that chose them
    scored them)."""
    forced = [token for ids in generated for token in ids]
    context = [*prompt, *forced]
    if not prompt:
        raise InvalidParameterError("the prompt is empty")
    if forced and len(forced) >= config.max_new_tokens:
        raise InvalidParameterError(f"{len(forced)} tokens generated already reach "
                                    f"max_new_tokens {config.max_new_tokens}")
    if forced and config.sampled_logprobs and (config.grammar or config.penalties.active):
        raise InvalidParameterError("a continuation cannot report the sampled logprobs of "
                                    "tokens a grammar or penalties shaped")
    if len(context) >= target.max_length:
        raise PromptTooLongError(
            f"prompt has {len(context)} tokens; the context window is {target.max_length}"
        )
    tokens = torch.empty(target.max_length, dtype=torch.long)
    tokens[: len(context)] = torch.tensor(context, dtype=torch.long)
    seq = SequenceState(tokens, len(context), len(prompt), target.new_cache(), config,
                   new_generator(config.seed, target.device), limit,
                   IncrementalText(decode, config.stop) if decode else None,
                   constraint=config.grammar.matcher() if config.grammar else None,
                   penalties=(PenaltyState(config.penalties, list(prompt), target.vocab_size)
                              if config.penalties.active else None),
                   # a continuation's prompt was scored, if asked, by the run it continues
                   prompt_logprobs=(None if config.prompt_logprobs is None or forced
                                    else [None]))
    if forced:
        _force(seq, generated)
        seq.stats.resumed_tokens = len(forced)
    drafter.start(seq)
    return seq


def _force(seq: SequenceState, generated: Tokens[Tokens[int]]) -> None:
    """Advance a continuation's grammar, penalties and text over the tokens it generated
    before, keeping each chunk's text for its replay."""
    for ids in generated:
        ids = list(ids)
        if seq.constraint is not None and not all(map(seq.constraint.accept, ids)):
            raise InvalidParameterError("the grammar forbids the tokens generated already")
        if seq.penalties is not None and ids:
            seq.penalties.accept(ids)
        seq.replay.append(Chunk(ids, seq.text.push(ids) if seq.text else ""))
    if seq.text is not None and seq.text.stopped:
        raise InvalidParameterError("the tokens generated already end at a stop string")


@dataclass
class _Planned:
    """One sequence's part of a step between proposing and committing."""

    drafter: Drafter
    seq: SequenceState
    draft: Draft
    draft_seconds: float
    judged: bool  # the sequence's gate judges this step (not drafted while it paused the model)
    forced: int  # the draft's last nodes a grammar forced (the drafter proposed the others)

    @property
    def rows(self) -> torch.Tensor:
        """[N + 1] int64: the pending token, then the draft's nodes."""
        n = self.seq.length
        return torch.cat([self.seq.tokens[n - 1 : n], self.draft.tree.tokens])


def step(target: Target, drafter: Drafter, seq: SequenceState,
         eos_token_ids: frozenset[int] = frozenset(), cost: StepCost | None = None) -> Chunk:
    """One target forward for `seq`: propose, score, verify, commit. Returns the step's Chunk (the
    last one, with finish_reason and stats, once the sequence is done)."""
    return step_batch(target, [(drafter, seq)], eos_token_ids, cost)[0]


def step_batch(target: Target, work: list[tuple[Drafter, SequenceState]],
               eos_token_ids: frozenset[int] = frozenset(), cost: StepCost | None = None,
               prefill: list[tuple[Drafter, SequenceState, int]] = (),
               jointly: bool = True) -> list[Chunk]:
    """One target forward for several unfinished sequences, each with its own drafter: every
    sequence proposes, the step keeps the draft nodes that pay by `cost` (None: every proposed
    node; jointly: for the whole step, else for each sequence as if alone), the rows of all of
    them are scored together (each against its own cache), then each is verified and committed
    alone. `prefill`: (drafter, sequence, n) for sequences whose next n prompt tokens go into
    their caches in the same forward (at most PREFILL_CHUNK each). A sequence's tokens are the
    same as stepped alone: the target computes a row the same way whatever else the forward
    holds."""
    clock = time.perf_counter
    starts = [seq.cache.length for _, seq, _ in prefill]
    chunks = [(seq.cache, seq.tokens[start : start + n])
              for (_, seq, n), start in zip(prefill, starts)]
    prefill_rows = sum(len(tokens) for _, tokens in chunks)
    prefill_cached = sum(len(tokens) * cache.length for cache, tokens in chunks)
    rows, cached = len(work) + prefill_rows, prefill_cached + sum(s.length for _, s in work)
    # the prompt chunks' seconds are spent whatever is drafted: a token is worth the rest
    spent = 0.0 if cost is None else prompt_share(cost, rows, cached, prefill_rows,
                                                  prefill_cached)
    planned = []
    for drafter, seq in work:  # 1 propose, each draft within what the step could score
        t0 = clock()
        price = ((0.0, 0.0) if cost is None else
                 (min_chance(cost, rows, cached, len(work), seq.length, spent),
                  (cost.step(rows, cached) - spent) / len(work)) if jointly else
                 (min_chance(cost, 1, seq.length, 1, seq.length), cost.step(1, seq.length)))
        draft, judged, forced = _propose(target, drafter, seq, *price)
        planned.append(_Planned(drafter, seq, draft, clock() - t0, judged, forced))
    shared = None  # the step's shape, by which a jointly drafted sequence's gain is judged
    if cost is not None:
        drafts = [(p.draft.chances, len(p.draft), p.seq.length) for p in planned]
        counts = (allocate(cost, drafts, prefill_rows, prefill_cached) if jointly
                  else [n for draft in drafts for n in allocate(cost, [draft])])
        for p, n in zip(planned, counts):
            p.forced = max(p.forced - (len(p.draft) - n), 0)  # forced nodes are the last
            p.draft = p.draft.best(n)
        if jointly:
            shared = StepShape(rows + sum(counts), cached + sum(
                n * p.seq.length for p, n in zip(planned, counts)), len(planned),
                prefill_rows, prefill_cached)
    t1 = clock()  # 2 score every pending token and draft (and prompt chunk) in one forward
    hiddens = target.hidden_batch([(p.seq.cache, p.rows, p.draft.tree) for p in planned]
                                  + [(cache, tokens, None) for cache, tokens in chunks])
    for (drafter, seq, n), start, hidden in zip(prefill, starts, hiddens[len(planned):]):
        if drafter.uses_features:
            for s in (seq, *seq.forks):
                drafter.observe_features(s, hidden)
        if seq.prompt_logprobs is not None:  # the row of token j scores token j + 1
            seq.prompt_logprobs += token_logprobs(target.logits(hidden),
                                                  seq.tokens[start + 1 : start + n + 1].tolist(),
                                                  seq.config.prompt_logprobs)
        if seq.replay and seq.config.logprobs is not None:
            _score_replay(target, seq, hidden, start, n)
    if not planned:
        return []
    hiddens = hiddens[: len(planned)]
    logits = target.logits(torch.cat(hiddens)).split([h.shape[0] for h in hiddens])
    forward_seconds = clock() - t1
    return [_commit(p, h, lg, forward_seconds, target.max_length, eos_token_ids, cost, shared)
            for p, h, lg in zip(planned, hiddens, logits)]


def _score_replay(target: Target, seq: SequenceState, hidden: torch.Tensor, start: int,
                  n: int) -> None:
    """A continuation's earlier tokens' logprobs, from the prefill rows at positions
    start..start+n-1 that read them (hidden: [n, D]; the row of token j scores token j + 1),
    onto its replayed chunks in order."""
    first = max(start, seq.prompt_length - 1)
    if first >= start + n:
        return
    rows = target.logits(hidden[first - start :])
    if seq.config.sampled_logprobs:  # no grammar or penalties: `admit`
        rows = sampled(rows, seq.sampling)
    scored = token_logprobs(rows, seq.tokens[first + 1 : start + n + 1].tolist(),
                            seq.config.logprobs)
    for chunk in seq.replay:
        room = len(chunk.token_ids) - len(chunk.logprobs or ())
        if room and scored:
            chunk.logprobs = (chunk.logprobs or []) + scored[:room]
            scored = scored[room:]


def _propose(target: Target, drafter: Drafter, seq: SequenceState, price: float,
             token_seconds: float) -> tuple[Draft, bool, int]:
    """The sequence's draft for this step, whether its gate judges the step, and how many of its
    last nodes a grammar forced: while the gate pauses drafting, a drafter with drafts that cost
    no forward (`free_drafts`) still offers those, priced by the budget like any other, and the
    gate does not count them."""
    left = min(seq.config.max_new_tokens - seq.output_length, target.max_length - seq.length)
    # room for the bonus token
    budget = seq.limit.budget(left - 1, price, token_seconds) if seq.limit else None
    if not budget or budget.nodes == 0:
        return EMPTY_DRAFT, False, 0
    if seq.limit.gate.open():
        draft, judged = drafter.propose(seq, budget), True
    elif drafter.free_drafts:
        draft, judged = drafter.propose(seq, replace(budget, forwards=False)), False
    else:
        draft, judged = EMPTY_DRAFT, False
    if seq.constraint is None:
        return draft, judged, 0
    draft, forced = _constrained(seq, draft, budget)
    return draft, judged, forced


def _constrained(seq: SequenceState, draft: Draft, budget: DraftBudget) -> tuple[Draft, int]:
    """The draft under the sequence's grammar, within the step's caps: forbidden nodes cut, a
    deterministic chain extended by the span the grammar forces (`constraint.constrain`); and
    how many of its last nodes are forced."""
    t0 = time.perf_counter()
    draft, forced = constrain(seq.constraint, draft)
    if forced:
        keep = min(len(draft), budget.nodes, budget.depth)
        forced = max(forced - (len(draft) - keep), 0)
        draft = draft.best(keep)
    seq.stats.forced += forced + draft.forced
    seq.stats.constraint_seconds += time.perf_counter() - t0
    return draft, forced


def _commit(p: _Planned, hidden: torch.Tensor, logits: torch.Tensor, forward_seconds: float,
            max_length: int, eos_token_ids: frozenset[int], cost: StepCost | None,
            shared: StepShape | None) -> Chunk:
    """Verify one sequence's rows (hidden, logits: [N + 1, H], [N + 1, V]) and commit; tell the
    sequence's gate what a drafted step gained (by `cost`, in the `shared` step or alone)."""
    drafter, seq, draft, stats, n = p.drafter, p.seq, p.draft, p.seq.stats, p.seq.length
    t2 = time.perf_counter()
    tree = draft.tree
    # 3 verify every row as plain decoding would score it: penalized by the text before it, then
    # masked by the grammar's allowed set there
    masked, q = logits, draft.q
    if seq.penalties is not None:
        masked = seq.penalties.apply(logits, tree)
    if seq.constraint is not None:
        rows_allowed = allowed(masks(seq.constraint, tree, logits.shape[-1]), logits.shape[-1])
        masked = masked.masked_fill(~rows_allowed, float("-inf"))  # [N + 1, V]
        if q is not None:  # each node was drawn where its parent's row stands
            q = renormalize(q, rows_allowed[tree.parents + 1])
        stats.constraint_seconds += time.perf_counter() - t2
    if seq.sampling.greedy:
        verdict = verify_greedy(tree, masked)
    elif seq.config.seed is not None:  # the seed's draws, whatever was drafted
        verdict = verify_seeded(tree, probabilities(masked, seq.sampling), seq.uniform)
    else:
        verdict = verify_sampling(tree, q, probabilities(masked, seq.sampling), seq.generator)
    verify_seconds = forward_seconds + time.perf_counter() - t2
    # 4 commit: node i sits at cache position n + i, behind the pending token at n - 1
    seq.cache.compact(n, [n + i for i in verdict.path])
    own = len(tree) - p.forced  # the drafter's nodes: those it is told of
    drafter.observe(seq, own, min(verdict.accepted, own))
    rows = [0] + [i + 1 for i in verdict.path]  # the root's and the accepted nodes'
    if drafter.uses_features:
        drafter.observe_features(seq, hidden[rows])
    if drafter.uses_logits:
        drafter.observe_logits(seq, [int(seq.tokens[n - 1])] + tree.path_tokens(list(verdict.path)),
                               logits[rows])
    if seq.limit:
        seq.limit.update(tree.depth, verdict.accepted)  # all accepted: the deepest level
        if cost is not None and len(tree) and p.judged:
            seq.limit.gate.observe(step_gain(cost, verdict.accepted, len(tree), n,
                                             p.draft_seconds, shared))
    new = tree.path_tokens(list(verdict.path)) + [verdict.token]
    if seq.constraint is not None:
        t3 = time.perf_counter()
        for token in new:
            if not seq.constraint.accept(token):
                raise RuntimeError(f"the verifier confirmed token {token}, which the grammar "
                                   "forbids")
        stats.constraint_seconds += time.perf_counter() - t3
    if seq.penalties is not None:
        seq.penalties.accept(new)
    chosen, confirmed = new, len(new)
    for i, token in enumerate(new):
        # EOS (the model's, or one the request adds) ends the text but was still confirmed
        if token in eos_token_ids or token in seq.config.stop_token_ids:
            new, seq.finish_reason, confirmed = new[:i], "stop", i + 1
            break
    stats.observe(len(tree), verdict.accepted, len(new), confirmed, draft.forwards,
                  p.draft_seconds, verify_seconds, tree.depth)
    seq.tokens[n : n + len(new)] = torch.tensor(new, dtype=torch.long)
    seq.length += len(new)
    if seq.finish_reason is None and (seq.output_length >= seq.config.max_new_tokens
                                      or seq.length >= max_length):
        seq.finish_reason = "length"
    delta = seq.text.push(new) if seq.text else ""
    if seq.text and seq.text.stopped:
        seq.finish_reason = "stop"
    # the confirmed tokens' (a final EOS too: it was chosen) from the rows that chose them: raw,
    # or as the token was drawn
    chunk = Chunk(new, delta, logprobs=None if seq.config.logprobs is None else token_logprobs(
        (sampled(masked[rows[:confirmed]], seq.sampling) if seq.config.sampled_logprobs
         else logits[rows[:confirmed]]), chosen[:confirmed], seq.config.logprobs))
    chunk.prompt_logprobs, seq.prompt_logprobs = seq.prompt_logprobs, None
    return chunk if seq.finish_reason is None else _finish(drafter, seq, chunk)


def _finish(drafter: Drafter, seq: SequenceState, last: Chunk) -> Chunk:
    """The sequence's last chunk: its text flushed, its finish reason and stats."""
    drafter.finish(seq)
    last.text += seq.text.flush() if seq.text else ""
    last.finish_reason, last.stats = seq.finish_reason, seq.stats
    last.stop_string = seq.text.matched if seq.text else None
    return last


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str
    stats: RunStats


def collect(chunks: Iterable[Chunk]) -> GenerationResult:
    """Consume a stream to its end and assemble the result."""
    ids, parts = [], []
    for chunk in chunks:
        ids.extend(chunk.token_ids)
        parts.append(chunk.text)
    return GenerationResult(ids, "".join(parts), chunk.finish_reason, chunk.stats)


@dataclass
class Request:
    """One prompt to generate from, with its drafter (any mix of methods may share a batch)."""

    prompt: Tokens[int]
    config: GenerationConfig
    drafter: Drafter
    limit: DraftLimit | None  # None: plain decoding
    # a continuation's tokens generated before, in the chunks they were sent in (`admit`)
    generated: Tokens[Tokens[int]] = ()


@dataclass
class _Entry:
    drafter: Drafter
    seq: SequenceState
    joined: float  # perf_counter when it joined


@dataclass(frozen=True)
class StepReport:
    """What the last step held: decoding sequences, their rows (one each plus draft nodes), the
    draft rows among them, and prompt rows prefilled beside them."""

    sequences: int = 0
    rows: int = 0
    draft_rows: int = 0
    prefill_rows: int = 0


class Batch:
    """The sequences in flight on one target. `join` admits a request (its prompt is prefilled
    by the next steps); `step` prefills and advances every sequence by one target forward, and
    drops the finished; `leave` drops a sequence at once (a cancelled request), freeing its
    cache. `cost` chooses the draft rows (None: every proposed node), as `speculation` says."""

    def __init__(self, target: Target, cost: StepCost | None = None,
                 eos_token_ids: frozenset[int] = frozenset(),
                 decode: Callable[[list[int]], str] | None = None,
                 speculation: Speculation = "adaptive", prefill_rows: int = PREFILL_CHUNK,
                 prefixes: PrefixCache | None = None) -> None:
        if speculation not in SPECULATION or prefill_rows < 1:
            raise ValueError(f"speculation {speculation!r}, prefill rows {prefill_rows}")
        self.target, self.cost, self.speculation = target, cost, speculation
        # prompts' caches kept for prompts that start alike (lossless only on a row-invariant
        # target: `core.prefix_cache`)
        self.prefixes = prefixes if prefixes is not None and target.row_invariant else None
        self.eos_token_ids, self.decode, self.prefill_rows = eos_token_ids, decode, prefill_rows
        self.prefilling: list[_Entry] = []  # in join order: the first gets its chunk first
        self.decoding: list[_Entry] = []
        # chunks due before the next step's, once a prompt is read: a continuation's replayed
        # chunks, and the one chunk of a sequence that asked no new tokens (it is done)
        self.due: list[tuple[SequenceState, Chunk]] = []
        self.forks: dict[int, list[_Entry]] = {}  # id(sequence) -> those waiting for its prompt
        self.last_step = StepReport()

    def __len__(self) -> int:
        return len(self.prefilling) + len(self.decoding) + len(self.due)

    def join(self, request: Request) -> SequenceState:
        """Admit a request (raises SpecDecodeError for a bad prompt); it starts decoding once its
        prompt is in its cache."""
        limit = None if self.speculation == "off" else request.limit
        joined = time.perf_counter()
        entry = _Entry(request.drafter, admit(self.target, request.drafter, request.prompt,
                                              request.config, limit, self.decode,
                                              request.generated), joined)
        seq = entry.seq
        if (self.prefixes is not None and seq.to_prefill and not request.drafter.uses_features
                and seq.prompt_logprobs is None):  # those read every prompt row's features
            # a continuation scoring its earlier tokens reads their rows itself
            scored = seq.replay and seq.config.logprobs is not None
            reused, cache = self.prefixes.lookup(
                seq.tokens[: seq.prompt_length - 1 if scored else seq.length - 1])
            if cache is not None:
                seq.cache, seq.stats.cached_prompt_tokens = cache, reused
        if seq.to_prefill:
            self.prefilling.append(entry)
            self.forks[id(seq)] = []
        else:  # a one-token prompt, or all of it kept: nothing to prefill
            self._prefilled(entry)
        return seq

    def fork(self, seq: SequenceState, request: Request) -> SequenceState:
        """Admit `request`, whose prompt is `seq`'s (another choice of one request), to share
        seq's prefill: it takes a copy of seq's cache once seq's prompt is in it (one prefill for
        all; at once where that needed no prefill: a one-token prompt, or one kept whole) and
        decodes from then on. Call before seq's prefill is done and before it decodes."""
        if list(request.prompt) != seq.tokens[: seq.prompt_length].tolist():
            raise ValueError("a fork's prompt must be its sequence's")
        if request.generated or seq.replay:
            raise ValueError("a continuation shares no prefill: it joins alone")
        waiting = self.forks.get(id(seq))
        if waiting is None and (seq.stats.target_forwards or seq.finish_reason):
            raise ValueError("a fork must join before its sequence decodes")
        limit = None if self.speculation == "off" else request.limit
        entry = _Entry(request.drafter, admit(self.target, request.drafter, request.prompt,
                                              request.config, limit, self.decode),
                       time.perf_counter())
        if waiting is None:  # seq's prompt is in its cache already, and seq has not decoded
            entry.seq.cache = seq.cache.copy()
            self._prefilled(entry)
        else:
            waiting.append(entry)
            seq.forks.append(entry.seq)
        return entry.seq

    def _prefilled(self, entry: _Entry) -> None:
        """The sequence's prompt is in its cache: its drafter reads it (counted as prefill) and
        it decodes from the next step; one that asked no new tokens (a prompt scored for its
        log-probabilities) is done."""
        seq = entry.seq
        if self.prefixes is not None:
            self.prefixes.keep(seq.tokens[: seq.cache.length], seq.cache)
        self.due += [(seq, chunk) for chunk in seq.replay]
        for fork in self.forks.pop(id(seq), []):
            fork.seq.cache = seq.cache.copy()
            if seq.prompt_logprobs is not None and fork.seq.prompt_logprobs is not None:
                fork.seq.prompt_logprobs = list(seq.prompt_logprobs)
            self._prefilled(fork)
        seq.forks = []
        if seq.config.max_new_tokens == 0:
            seq.finish_reason = "length"
            seq.stats.prefill_seconds = seq.stats.wall_seconds = time.perf_counter() - entry.joined
            chunk = Chunk([], prompt_logprobs=seq.prompt_logprobs)
            self.due.append((seq, _finish(entry.drafter, seq, chunk)))
            return
        entry.drafter.prepare(seq)
        seq.stats.prefill_seconds = time.perf_counter() - entry.joined
        self.decoding.append(entry)

    def leave(self, seq: SequenceState) -> None:
        """Drop `seq` (and the forks still waiting for its prompt)."""
        self.forks.pop(id(seq), None)
        self.prefilling = [e for e in self.prefilling if e.seq is not seq]
        self.decoding = [e for e in self.decoding if e.seq is not seq]
        self.due = [(s, chunk) for s, chunk in self.due if s is not seq]

    def step(self) -> list[tuple[SequenceState, Chunk]]:
        """One forward: the next prompt chunks and every decoding sequence's rows; returns
        (sequence, its chunk) for each decoding sequence, in join order, after the chunks that
        were due (`due`)."""
        out, self.due = self.due, []
        if not self.prefilling and not self.decoding:
            return out
        prefill, left = [], self.prefill_rows
        for e in self.prefilling:
            if left == 0:
                break
            n = min(e.seq.to_prefill, left, PREFILL_CHUNK)
            prefill.append((e.drafter, e.seq, n))
            left -= n
        drafted = sum(e.seq.stats.drafted for e in self.decoding)
        chunks = step_batch(self.target, [(e.drafter, e.seq) for e in self.decoding],
                            self.eos_token_ids, self.cost, prefill,
                            jointly=self.speculation == "adaptive")
        draft_rows = sum(e.seq.stats.drafted for e in self.decoding) - drafted
        self.last_step = StepReport(len(self.decoding), len(self.decoding) + draft_rows,
                                    draft_rows, self.prefill_rows - left)
        now, decoding = time.perf_counter(), self.decoding
        self.decoding = []
        for e, chunk in zip(decoding, chunks):
            out.append((e.seq, chunk))
            if e.seq.stats.target_forwards == 1:
                e.seq.stats.first_token_seconds = now - e.joined
            if chunk.finish_reason is None:
                self.decoding.append(e)
            else:
                e.seq.stats.wall_seconds = now - e.joined
        for e in [e for e in self.prefilling if not e.seq.to_prefill]:
            self._prefilled(e)
        self.prefilling = [e for e in self.prefilling if e.seq.to_prefill]
        out += self.due
        self.due = []
        return out


def start(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
          limit: DraftLimit | None,
          decode: Callable[[list[int]], str] | None = None) -> SequenceState:
    """A new sequence for `prompt`, its prompt prefilled (all but the pending last token) and its
    drafter prepared, ready for `step`."""
    batch = Batch(target, decode=decode)
    seq = batch.join(Request(prompt, config, drafter, limit))
    while seq.to_prefill:
        batch.step()
    return seq


def stream(target: Target, drafter: Drafter, prompt: Tokens[int], config: GenerationConfig,
           limit: DraftLimit | None, eos_token_ids: frozenset[int] = frozenset(),
           decode: Callable[[list[int]], str] | None = None,
           cost: StepCost | None = None,
           generated: Tokens[Tokens[int]] = ()) -> Iterator[Chunk]:
    """Generate from `prompt`, a batch of one, yielding a Chunk per step; the last chunk carries
    the stats, whose wall time runs from the start of the prefill to the last step. `cost`: the
    target's step cost, by which each step keeps the draft nodes that pay (None: all proposed);
    `generated`: a continuation's tokens (`admit`), yielded first as the chunks they were."""
    batch = Batch(target, cost, eos_token_ids, decode)
    batch.join(Request(prompt, config, drafter, limit, generated))
    while len(batch):
        for _, chunk in batch.step():
            yield chunk


def generate(*args, **kwargs) -> GenerationResult:
    """`stream` (same arguments) run to the end."""
    return collect(stream(*args, **kwargs))
