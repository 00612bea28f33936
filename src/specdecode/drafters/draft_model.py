"""`draft`: a separate, smaller causal LM drafts autoregressively, with
its own KV cache per sequence. Between steps that cache is rolled back to the longest prefix it
shares with the context, so only the tokens it has not seen are fed again. Its output layer may
cover only the most frequent tokens (`--draft-vocab`, `vocabulary`), plus, for each sequence, the
tokens outside them that its context holds (`--draft-context-tokens`).

Under greedy decoding, where the draft model can append rows under any mask (`MaskedTarget`)
and the target scores trees, the draft may be a tree (`--draft-width` above 1): each depth keeps
the likeliest `width` continuations of the nodes above it, by chances learned from the draft
model's probabilities (`calibration`), and feeds them to the draft model in one forward of that
many rows, which on a memory-bound model costs about as much as one row (EAGLE-2's expansion by
path chance, with a real draft model).

Where the output copies its context (code edits, summaries), an n-gram match drafts for free
(`lookup`'s index and estimates): each step takes the match when its expected accepted tokens are
at least what the draft model's steps have been netting (accepted tokens less their forwards'
time, in the step's tokens), else runs the draft model.

A draft model with another tokenizer drafts as text (`cross_tokenizer`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..core.budget import DraftBudget
from ..core.drafter import EMPTY_DRAFT, Draft, Drafter
from ..core.target import MaskedTarget, Target, forward_last
from ..errors import InvalidParameterError, VocabularyMismatchError
from ..models.fim import FimTokens, fim_window
from .calibration import Calibration
from .chain import draft_chain
from .clock import ForwardClock
from .cross_tokenizer import CrossTokenizerDraft
from .lookup import MatchEvidence
from .ngrams import NgramIndex
from .registry import option, register
from .vocabulary import cut_vocabulary, shared_ids

NET_WEIGHT = 0.2  # weight of the newest draft model step in a sequence's `net`


@dataclass
class _State:
    cache: object  # the draft model's KV cache for this sequence
    cached: torch.Tensor  # [c] int64: the tokens whose keys and values it holds
    matches: MatchEvidence | None  # the n-gram index and its record (None: matching is off)
    net: float | None = None  # the draft model's steps' accepted tokens less their cost, average
    cost: float = 0.0  # the pending draft model step's forwards, in the step's tokens
    matched: bool = False  # the pending draft is an n-gram match
    match: tuple[int, list[int]] | None = None  # the last match: (context length, its tokens)
    offset: int | None = None  # the draft model sees context[offset:] (set at the first draft)
    # or, a fill-in-the-middle prompt longer than the window, that prompt as `fim_window` cuts it
    # and the context's length then: the draft model sees it and the context from there on
    fim_prompt: torch.Tensor | None = None
    read: int = 0
    # a tree's nodes the draft model was fed, in its cache after `cached`: (token, index in this
    # list of the parent, -1 for the root's children)
    fed: list[tuple[int, int]] = field(default_factory=list)
    tree: tuple[list[int], list[int], list[float]] | None = None  # the last tree draft, to judge
    # tokens outside the cut output layer that the context holds, their rows [E, H] and the
    # vocabulary they extend ([V' + E] int64)
    added: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    added_rows: torch.Tensor | None = None
    vocabulary: torch.Tensor | None = None
    scanned: int = 0  # context tokens looked at for `added`


@register("draft")
class DraftModel(Drafter):
    @dataclass(frozen=True)
    class Options:
        draft_model: str | None = option(
            None, "a smaller model (alias, .gguf file, directory or hub id); with another "
                  "tokenizer it drafts as text, retokenized for the target; default: the target "
                  "alias's own drafter (qwen2.5-coder-1.5b: qwen2.5-coder-0.5b)")
        draft_vocab: int = option(
            65536, "the draft model's output layer keeps only this many most frequent tokens "
                   "(plus special ones), which makes each draft token cheaper; 0: all")
        draft_dtype: str = option(
            "q4_0", "the draft model's weights: a format made on load (q4_0, q8_0: fewer bytes "
                    "per draft token than wider stored formats) or auto (as stored)")
        draft_context_tokens: int = option(
            1024, "with a cut output layer (--draft-vocab), up to this many tokens outside it "
                  "that a sequence's prompt or answer holds are added back for that sequence "
                  "(rare words a summary copies, a code fence); 0: none")
        draft_window: int = option(
            128, "the draft model reads only the last this many tokens of the prompt (its own "
                 "prefill of a long prompt costs more than its drafts gain: "
                 "docs/benchmarks/qwen-pair); 0: all")
        draft_width: int = option(
            1, "under greedy decoding, the draft is a tree keeping this many continuations per "
               "depth, fed to the draft model together (one forward of that many rows a depth); "
               "1: a chain (trees scored more rows than they gained on the 1.5B Qwen pair: "
               "docs/benchmarks/qwen-pair)")
        draft_ngram: int = option(
            5, "also draft n-gram matches from the context, up to this n-gram length, when they "
               "promise more than the draft model nets (free drafts where output copies its "
               "context); 0: off")

    def __init__(self, model: Target, label: str = "draft model",
                 vocabulary: torch.Tensor | None = None, vocab_size: int | None = None,
                 ngram: int = 0, window: int = 0, width: int = 1,
                 addable: torch.Tensor | None = None,
                 head_rows: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 most_added: int = 0, fim: FimTokens | None = None) -> None:
        self.model = model  # logits over `vocabulary` when given: [V'] int64 token ids
        # ids outside `vocabulary` a context may add ([vocab_size] bool), their output rows
        # (ids [E] -> [E, H] float32: a cut model's `output_rows`) and how many a sequence may
        # add: `_added`
        self.addable, self.head_rows, self.most_added = addable, head_rows, most_added
        self.label, self.ngram, self.window = label, ngram, window
        self.fim = fim  # the target's fill-in-the-middle tokens: its FIM prompts keep their shape
        # trees need a draft model that appends under masks (and a target that scores them:
        # `create`)
        self.width = width if isinstance(model, MaskedTarget) else 1
        self.calibration = Calibration()  # what a tree's node is worth, learned
        self.vocabulary, self.vocab_size = vocabulary, vocab_size
        self.clock = ForwardClock()

    @classmethod
    def unavailable(cls, model, options: Options) -> str | None:
        if options.draft_model or model.drafter:
            return None
        return f"method 'draft' needs --draft-model NAME_OR_PATH ({model.name} has no default)"

    @classmethod
    def tune_candidates(cls, model, draft_model: str | None) -> list[dict]:
        draft_model = draft_model or model.drafter
        return ([{"max_draft_depth": d, "draft_model": draft_model} for d in (2, 4, 6)]
                if draft_model else [])

    @classmethod
    def create(cls, model, options: Options) -> "DraftModel | CrossTokenizerDraft":
        from ..models import load_model

        reason = cls.unavailable(model, options)
        if reason:
            raise InvalidParameterError(reason)
        if min(options.draft_vocab, options.draft_ngram, options.draft_window,
               options.draft_context_tokens) < 0:
            raise InvalidParameterError(
                "--draft-vocab, --draft-ngram, --draft-window and --draft-context-tokens must be "
                f">= 0, got {options.draft_vocab}, {options.draft_ngram}, {options.draft_window}, "
                f"{options.draft_context_tokens}")
        if options.draft_width < 1:
            raise InvalidParameterError(f"--draft-width must be >= 1, got {options.draft_width}")
        name = options.draft_model or model.drafter
        drafter = load_model(name, device=str(model.target.device), dtype=options.draft_dtype)
        try:
            shared = shared_ids(model.tokenizer, drafter.tokenizer, drafter.target.vocab_size,
                                model.target.vocab_size)
        except VocabularyMismatchError:  # another tokenizer: draft as text
            label = name + (f", last {options.draft_window} prompt tokens"
                            if options.draft_window else "")
            return CrossTokenizerDraft(drafter, model.tokenizer, label, options.draft_window)
        ids = cut_vocabulary(shared, options.draft_vocab, drafter.tokenizer,
                             drafter.target.vocab_size)
        label = name if ids is None else f"{name}, {len(ids)} tokens"
        label += f", n-gram matches up to {options.draft_ngram}" if options.draft_ngram else ""
        label += f", last {options.draft_window} prompt tokens" if options.draft_window else ""
        target, addable, head_rows = drafter.target, None, None
        if ids is not None and hasattr(target, "with_vocabulary"):
            # a smaller output layer: cheaper steps; the context's tokens outside it come back
            # as rows of their own
            target = target.with_vocabulary(ids)
            if options.draft_context_tokens and len(ids) < len(shared):
                addable = torch.zeros(model.target.vocab_size, dtype=torch.bool)
                addable[shared] = True
                addable[ids] = False
                head_rows = target.output_rows
                label += f", up to {options.draft_context_tokens} more from the context"
        elif ids is not None:  # a model that cannot cut its output layer drafts the same ids
            target = _Columns(target, ids)
        width = options.draft_width if getattr(model.target, "scores_trees", False) else 1
        made = cls(target, label, ids, model.target.vocab_size, options.draft_ngram,
                   options.draft_window, width, addable, head_rows,
                   options.draft_context_tokens, getattr(model, "fim", None))
        made.label += f", trees {made.width} wide (greedy)" if made.width > 1 else ""
        return made

    @property
    def free_drafts(self) -> bool:  # its n-gram matches
        return self.ngram > 0

    def start(self, seq) -> None:
        seq.drafter_state = _State(self.model.new_cache(), torch.empty(0, dtype=torch.long),
                                   MatchEvidence(NgramIndex(self.ngram, seq.config.reference))
                                   if self.ngram else None)

    def prepare(self, seq) -> None:
        """Read the prompt (cut to `window` tokens, a fill-in-the-middle prompt around its
        cursor: `fim_window`) into the draft model's cache, all but the last token, which the
        first draft feeds for its logits."""
        state = seq.drafter_state
        state.offset = max(0, len(seq.context) - self.window) if self.window else 0
        prompt = seq.context[state.offset:]
        if state.offset and self.fim is not None:
            window = fim_window(seq.context.tolist(), self.fim, self.window)
            if window != prompt.tolist():  # a FIM prompt, kept around its cursor
                prompt = state.fim_prompt = torch.tensor(window)
                state.read = len(seq.context)
        prompt = prompt[:-1]
        if 0 < prompt.shape[0] < self.model.max_length:
            self.model.hidden(state.cache, prompt)
            state.cached = prompt

    def propose(self, seq, budget: DraftBudget) -> Draft:
        state = seq.drafter_state
        if state.offset is None:  # not prepared (a caller outside the engine)
            self.prepare(seq)
        context = (seq.context[state.offset:] if state.fim_prompt is None  # what the model reads
                   else torch.cat([state.fim_prompt, seq.context[state.read:]]))
        if state.tree:  # the last draft was a tree: judge its nodes by where the context went,
            # and keep the draft model's entries of the path it took
            base = state.cached.shape[0]
            went_on = context[base:].tolist()
            self.calibration.judge(*state.tree, went_on)
            path = _path(state.fed, went_on)
            state.cache.compact(base, [base + i for i in path])
            state.cached = context[:base + len(path)]
            state.tree, state.fed = None, []
        # reuse the cached prefix, but always refeed at least the last token to get its logits
        limit = min(state.cached.shape[0], context.shape[0] - 1)
        same = (state.cached[:limit] != context[:limit]).nonzero()
        keep = int(same[0, 0]) if same.numel() else limit
        state.cache.rollback(keep)
        state.cached = state.cached[:keep]  # a step that drafts from a match feeds nothing
        length = min(budget.nodes, budget.depth, self.model.max_length - context.shape[0])
        if length < 1:  # the draft model's context window is full: let the target go on alone
            return EMPTY_DRAFT
        forward_cost = self.clock.cost(budget)
        model, vocabulary = self._added(state, seq.context)
        match = self._match(state, seq.context, length, budget.min_chance)
        # no token's chance can pay for a forward where a step is shared by enough sequences
        # that a token costs less than the draft model's forward, nor while the gate pauses the
        # draft model: draft from the match alone (the draft model catches up on the context
        # when it next drafts)
        fed = context.shape[0] - keep  # what a forward would feed now
        priced_out = not budget.forwards or self.clock.priced_out(budget, fed)
        state.matched = match is not None and (priced_out or state.net is not None
                                               and float(match.chances.sum()) >= state.net)
        if state.matched:
            return match
        if priced_out:
            return EMPTY_DRAFT
        t0 = time.perf_counter()
        if self.width > 1 and seq.sampling.greedy:
            draft, state.fed, probs = draft_tree(
                model, state.cache, context[keep:], length,
                min(budget.nodes, MAX_TREE_NODES), self.width, vocabulary,
                budget.min_chance, forward_cost, self.calibration.rate)
            state.cached = context
            state.tree = (draft.tokens.tolist(), draft.parents.tolist(), probs)
        else:
            draft = draft_chain(lambda tokens: forward_last(model, state.cache, tokens),
                                context[keep:], length, seq.sampling, seq.draw,
                                vocabulary, self.vocab_size,
                                budget.min_chance + forward_cost, seq.constraint)
            drafted_fed = state.cache.length - context.shape[0]  # the draft's tokens it fed
            state.cached = torch.cat([context, draft.tokens[:drafted_fed]])
        self.clock.record(fed, time.perf_counter() - t0, draft.forwards)
        state.cost = draft.forwards * forward_cost
        return draft

    def _added(self, state: _State, context: torch.Tensor
               ) -> tuple[Target, torch.Tensor | None]:
        """The draft model and its vocabulary for this sequence: the cut output layer plus a row
        for each token outside it that the context ([n] int64) has held, in order of first
        appearance, up to `most_added` (the draft's q then covers them too)."""
        if self.addable is None:
            return self.model, self.vocabulary
        new = context[state.scanned:]
        new = new[self.addable[new]]
        state.scanned = len(context)
        room = self.most_added - len(state.added)
        if room > 0 and len(new):
            known = set(state.added.tolist())
            fresh = [t for t in dict.fromkeys(new.tolist()) if t not in known]
            if fresh:
                fresh = torch.tensor(fresh[:room], dtype=torch.long)
                rows = self.head_rows(fresh)
                state.added = torch.cat([state.added, fresh])
                state.added_rows = (rows if state.added_rows is None
                                    else torch.cat([state.added_rows, rows]))
                state.vocabulary = torch.cat([self.vocabulary, state.added])
        if state.added_rows is None:
            return self.model, self.vocabulary
        return _AddedRows(self.model, state.added_rows), state.vocabulary

    def _match(self, state: _State, context: torch.Tensor, length: int,
               min_chance: float) -> Draft | None:
        """The longest n-gram match's continuation with its chances (`lookup`), None if none.
        The match found the step before is judged first against the tokens committed since,
        whether or not it was drafted, so the estimates learn while the draft model drafts."""
        if state.matches is None:
            return None
        matches = state.matches
        if state.match:
            start, tokens = state.match
            new = context[start:].tolist()
            judged = min(len(tokens), len(new))
            agree = next((j for j in range(judged) if tokens[j] != new[j]), judged)
            matches.record(judged, agree)
        tokens, draft = matches.match(context, self.ngram, 1, length, min_chance)
        state.match = (len(context), tokens) if tokens else None
        return draft if len(draft) else None

    def observe(self, seq, scored: int, accepted: int) -> None:
        state = seq.drafter_state
        if not state.matched and scored:
            net = accepted - state.cost
            state.net = net if state.net is None else (
                (1 - NET_WEIGHT) * state.net + NET_WEIGHT * net)

    @property
    def default_budget(self) -> DraftBudget:
        # deeper than a chain's usual 4: each chain stops where its chance no longer pays; a
        # tree's nodes are capped by what the step's cost rule scores (`core.budget`)
        return DraftBudget(6 if self.width == 1 else MAX_TREE_NODES, 6)

    def describe(self) -> str:
        return f"draft ({self.label})"


MAX_TREE_NODES = 16  # a tree draft's nodes (the step's cost rule scores the likeliest of them)


def draft_tree(model: MaskedTarget, cache, first: torch.Tensor, length: int, nodes: int,
               width: int, vocabulary: torch.Tensor | None, row_cost: float,
               forward_cost: float, rate: Callable[[float], float] = lambda p: p,
               ) -> tuple[Draft, list[tuple[int, int]], list[float]]:
    """A greedy tree of at most `nodes` tokens and depth `length`, grown a depth at a time: feed
    `first` ([T] int64), then at each depth take, of the top `width` tokens under each node fed
    last, the `width` likeliest by path chance (the product along the path of `rate` of the draft
    model's probabilities: `Calibration.rate`, or the probabilities themselves), and feed them in
    one forward, each row seeing the prefix and its ancestors.
    A node is kept while its chance pays for its row (`row_cost`, in the step's tokens), and a
    depth while its nodes' chances, less their rows, pay for the forward that drafted them
    (`forward_cost`): with width 1, the chain's rule (`draft_chain`).

    Returns the draft (nodes by chance, best first: parents precede children, so every prefix is
    a tree), the nodes fed to the draft model in its cache order: (token, index in that list
    of the parent, -1 for the root's children), and the draft model's probability of each of the
    draft's nodes. `vocabulary`: as `draft_chain`'s."""
    logits = forward_last(model, cache, first)  # [frontier, V']: the rows fed last
    base, forwards = cache.length, 1
    tokens: list[int] = []
    parents: list[int] = []  # node index, -1: the root
    chances: list[float] = []
    depths: list[int] = []
    probs: list[float] = []  # the draft model's, of each node
    fed: list[int] = []  # node indices in the draft model's cache order after `base`
    frontier, frontier_chances = [-1], [1.0]
    for depth in range(1, length + 1):
        top = torch.topk(torch.softmax(logits.float(), -1), min(width, logits.shape[-1]))
        candidates = sorted(((c * rate(p), p, row, t) for row, c in enumerate(frontier_chances)
                             for p, t in zip(top.values[row].tolist(), top.indices[row].tolist())),
                            key=lambda item: -item[0])
        picked, gain = [], 0.0
        for chance, p, row, column in candidates[:min(width, nodes - len(tokens))]:
            if chance < row_cost:
                break
            picked.append((chance, p, frontier[row], column))
            gain += chance - row_cost
        if not picked or gain < forward_cost:
            break
        first_new = len(tokens)
        for chance, p, parent, column in picked:
            tokens.append(column if vocabulary is None else int(vocabulary[column]))
            parents.append(parent)
            chances.append(chance)
            depths.append(depth)
            probs.append(p)
        if depth == length or len(tokens) >= nodes:
            break
        new = list(range(first_new, len(tokens)))
        place = {node: base + i for i, node in enumerate(fed)}
        mask = torch.zeros(len(new), cache.length + len(new), dtype=torch.bool)
        mask[:, :base] = True
        for r, node in enumerate(new):
            mask[r, cache.length + r] = True
            ancestor = parents[node]
            while ancestor >= 0:
                mask[r, place[ancestor]] = True
                ancestor = parents[ancestor]
        positions = torch.full((len(new),), base + depth - 1, dtype=torch.long)
        fed += new
        logits = model.logits(model.hidden_masked(
            cache, torch.tensor([tokens[n] for n in new]), positions, mask))
        forwards += 1
        frontier, frontier_chances = new, [chances[n] for n in new]
    # best first; a child's chance is at most its parent's, and a tie puts the shallower first
    order = sorted(range(len(tokens)), key=lambda n: (-chances[n], depths[n], n))
    index = {node: i for i, node in enumerate(order)}
    draft = Draft(torch.tensor([tokens[n] for n in order], dtype=torch.long), None, forwards,
                  torch.tensor([-1 if parents[n] < 0 else index[parents[n]] for n in order],
                               dtype=torch.long),
                  torch.tensor([chances[n] for n in order]))
    cache_index = {node: i for i, node in enumerate(fed)}
    return (draft, [(tokens[n], -1 if parents[n] < 0 else cache_index[parents[n]]) for n in fed],
            [probs[n] for n in order])


def _path(fed: list[tuple[int, int]], continuation: list[int]) -> list[int]:
    """Indices in `fed` ((token, parent index) in cache order) of the fed nodes the context went
    on with, root's child first: the entries worth keeping."""
    path: list[int] = []
    for token in continuation:
        parent = path[-1] if path else -1
        step = next((i for i, (t, p) in enumerate(fed) if p == parent and t == token), None)
        if step is None:
            break
        path.append(step)
    return path


class _OtherLogits:
    """A target whose cache and hidden states are another's, its logits its own (`logits`)."""

    def __init__(self, target: Target) -> None:
        self.target, self.max_length = target, target.max_length

    def new_cache(self):
        return self.target.new_cache()

    def hidden(self, cache, tokens: torch.Tensor) -> torch.Tensor:
        return self.target.hidden(cache, tokens)


class _AddedRows(_OtherLogits):
    """A draft model whose logits gain columns: its hidden state against `rows` ([E, H] float32,
    tokens outside its cut output layer), computed in float32 beside the cut layer's kernel."""

    def __init__(self, model: Target, rows: torch.Tensor) -> None:
        super().__init__(model)
        self.rows = rows

    def hidden_masked(self, cache, tokens: torch.Tensor, positions: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:  # trees: `model` is a MaskedTarget
        return self.target.hidden_masked(cache, tokens, positions, mask)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [T, H] -> [T, V' + E]."""
        return torch.cat([self.target.logits(hidden), hidden.float() @ self.rows.T], dim=-1)


class _Columns(_OtherLogits):
    """A target whose logits keep only some columns: a draft model that cannot cut its output
    layer proposes the same tokens, no cheaper. (No `hidden_masked`: it drafts chains only.)"""

    def __init__(self, target: Target, ids: torch.Tensor) -> None:
        super().__init__(target)
        self.ids = ids

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.target.logits(hidden)[:, self.ids]
